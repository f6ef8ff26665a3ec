#!/usr/bin/env python3
"""`capstan serve` throughput: offline question runs per second at several
concurrencies, latency percentiles, and the bytes each run leaves in the event
store. Starts the real binary on 127.0.0.1 with a fresh home and a copy of
examples/handbook, warms it up (first use compiles the components), then sends
`POST /v1/runs` and reads each SSE stream to its end.

Usage: python3 bench/serve/bench.py [--bin PATH] [--seconds S] [--conc 1,4,16]
(default binary: $CARGO_TARGET_DIR or target, release/capstan). Prints a Markdown
table and the command that reproduces it.
"""

import argparse
import http.client
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# A question the offline answerer answers from the handbook (tests/serve.rs).
QUESTIONS = ["How do I rotate the signing keys?"]


def start(binary, home, ws, extra=()):
    """`capstan serve` on a free port of 127.0.0.1 with a fresh home; `extra`
    arguments go after the common ones. Returns (process, host, port)."""
    env = dict(os.environ, CAPSTAN_HOME=home)
    for k in ("CAPSTAN_TOKEN", "CAPSTAN_CONFIG_DIR", "CAPSTAN_DATA_DIR", "CAPSTAN_CACHE_DIR"):
        env.pop(k, None)
    proc = subprocess.Popen(
        [binary, "serve", "--port", "0", "--no-token", "-w", ws, *extra],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    line = proc.stdout.readline().strip()
    if not line.startswith("listening on http://"):
        proc.kill()
        sys.exit(f"capstan serve printed {line!r}")
    host, port = line[len("listening on http://"):].rsplit(":", 1)
    return proc, host, int(port)


def one_run(conn, ws, question):
    body = json.dumps({"message": question, "workspace": ws})
    conn.request("POST", "/v1/runs", body, {"Content-Type": "application/json"})
    resp = conn.getresponse()
    data = resp.read()
    if resp.status != 200:
        raise RuntimeError(f"POST /v1/runs: {resp.status} {data[:300]!r}")
    text = data.decode()
    if "event: run.completed" not in text:
        raise RuntimeError(f"run did not complete: {text[-300:]}")


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def cpu_ms(pid):
    """User + system CPU time the process has used, in ms."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) * 1000 / os.sysconf("SC_CLK_TCK")


def load(host, port, ws, conc, seconds):
    """`conc` clients, each one run at a time on its own keep-alive connection."""
    lat = []
    lock = threading.Lock()
    stop = time.monotonic() + seconds
    errors = []

    def client(i):
        conn = http.client.HTTPConnection(host, port, timeout=120)
        n = i
        while time.monotonic() < stop:
            t = time.monotonic()
            try:
                one_run(conn, ws, QUESTIONS[n % len(QUESTIONS)])
            except Exception as e:  # noqa: BLE001 - reported below
                errors.append(str(e))
                return
            with lock:
                lat.append(time.monotonic() - t)
            n += 1

    started = time.monotonic()
    threads = [threading.Thread(target=client, args=(i,)) for i in range(conc)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.monotonic() - started
    if errors:
        sys.exit(f"errors: {errors[:3]}")
    lat.sort()
    pct = lambda p: lat[min(len(lat) - 1, int(round((len(lat) - 1) * p)))] * 1e3
    return len(lat), len(lat) / wall, pct(0.5), pct(0.99)


def main():
    ap = argparse.ArgumentParser()
    target = os.environ.get("CARGO_TARGET_DIR", os.path.join(ROOT, "target"))
    ap.add_argument("--bin", default=os.path.join(target, "release", "capstan"))
    ap.add_argument("--seconds", type=float, default=15)
    ap.add_argument("--conc", default="1,4,16")
    ap.add_argument("--workspace", help="ask in this directory instead of a copy of "
                    "examples/handbook (e.g. the linux-doc corpus of bench/kb, 3,183 files)")
    ap.add_argument("--question", help="ask this instead of the handbook question")
    ap.add_argument("--idle-wait", type=float, default=12,
                    help="seconds to wait after the last run before reading the idle RSS")
    args = ap.parse_args()
    if args.question:
        QUESTIONS[:] = [args.question]
    binary = os.path.abspath(args.bin)
    home = tempfile.mkdtemp(prefix="capstan-bench-serve-")
    if args.workspace:  # used in place: a question does not write
        ws = os.path.abspath(args.workspace)
    else:
        ws = os.path.join(home, "handbook")
        shutil.copytree(os.path.join(ROOT, "examples", "handbook"), ws)
    proc, host, port = start(binary, home, ws)
    try:
        conn = http.client.HTTPConnection(host, port, timeout=300)
        for q in QUESTIONS:  # warm-up: compiles components, builds the index
            one_run(conn, ws, q)
        idle = rss_kib(proc.pid)
        rows = []
        for conc in [int(c) for c in args.conc.split(",")]:
            cpu = cpu_ms(proc.pid)
            n, rate, p50, p99 = load(host, port, ws, conc, args.seconds)
            cpu = (cpu_ms(proc.pid) - cpu) / n
            rows.append((conc, n, rate, p50, p99, cpu, rss_kib(proc.pid)))
        # Idle again: what the server holds once the runs are over (a server
        # that trims freed heap does so every 10 s).
        time.sleep(args.idle_wait)
        idle_after = rss_kib(proc.pid)
    finally:
        proc.terminate()
        proc.wait()
    db = sqlite3.connect(os.path.join(home, "data", "capstan.db"))
    runs, events, size, deltas = db.execute(
        "SELECT COUNT(DISTINCT run_id), COUNT(*), SUM(LENGTH(json)),"
        " SUM(type = 'response.delta') FROM events"
    ).fetchone()
    db.close()
    db_bytes = sum(
        os.path.getsize(os.path.join(home, "data", f))
        for f in os.listdir(os.path.join(home, "data"))
        if f.startswith("capstan.db")
    )
    print(f"binary: {binary}")
    print(f"date: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, load average {os.getloadavg()[0]:.1f}")
    print()
    print("| concurrency | runs | runs/s | p50 | p99 | server CPU per run | server RSS after |")
    print("|---|---|---|---|---|---|---|")
    for conc, n, rate, p50, p99, cpu, rss in rows:
        print(
            f"| {conc} | {n} | {rate:.1f} | {p50:.1f} ms | {p99:.1f} ms | {cpu:.2f} ms | {rss / 1024:.0f} MiB |"
        )
    print()
    print(f"server RSS idle after warm-up: {idle / 1024:.0f} MiB; "
          f"idle {args.idle_wait:g} s after the last run: {idle_after / 1024:.0f} MiB")
    print(
        f"event store: {runs} runs, {events / runs:.1f} events/run ({deltas / runs:.1f} response.delta), "
        f"{size / runs / 1024:.2f} KiB of event JSON per run; database files {db_bytes / 1024 / 1024:.1f} MiB"
    )
    print()
    print(f"Command: python3 bench/serve/bench.py --bin {args.bin} --seconds {args.seconds:g} --conc {args.conc}"
          + (f" --workspace {args.workspace}" if args.workspace else "")
          + (f" --question {json.dumps(args.question)}" if args.question else ""))
    shutil.rmtree(home, ignore_errors=True)


if __name__ == "__main__":
    main()
