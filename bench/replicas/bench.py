#!/usr/bin/env python3
"""`capstan serve` replicas: offline question runs per second and event fan-out
latency for 1 and 3 replicas, on SQLite (one file shared by the processes) and
on PostgreSQL (a cluster this script starts in a temp dir, fsync on), side by
side in one run (issue 22).

Runs/s: `--conc` clients send `POST /v1/runs` round-robin over the replicas and
read each SSE stream to its end, for `--seconds` per setup.

Fan-out: a slow run (`run \\`sleep 1\\``, approved by flag) is started on the
first replica and followed from the last one (`GET /v1/runs/{id}/events`, the
path a load balancer's other replica takes); for every event emitted after the
follower subscribed, the time from its emission (the envelope's `ts`, in
milliseconds, so figures carry up to 1 ms of rounding) to its delivery on the
follower. With one replica the follower is a second stream on the same server.

Usage: python3 bench/replicas/bench.py [--bin PATH] [--seconds S] [--conc N]
[--fanout-runs N]. Prints a Markdown table and the command that reproduces it.
"""

import argparse
import calendar
import http.client
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
QUESTION = "How do I rotate the signing keys?"
SLOW = "run `sleep 1`"


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


class Postgres:
    """A throwaway cluster on 127.0.0.1, run as `postgres` when we are root."""

    def __init__(self, base):
        versions = sorted(
            int(v) for v in os.listdir("/usr/lib/postgresql") if v.isdigit()
        )
        if not versions:
            sys.exit("PostgreSQL is not installed: apt-get install postgresql")
        self.bin = f"/usr/lib/postgresql/{versions[-1]}/bin"
        self.dir = os.path.join(base, "pg")
        os.makedirs(self.dir)
        self.prefix = []
        if os.getuid() == 0:
            shutil.chown(self.dir, "postgres", "postgres")
            self.prefix = ["runuser", "-u", "postgres", "--"]
        data = os.path.join(self.dir, "data")
        subprocess.run(
            self.prefix
            + [f"{self.bin}/initdb", "-D", data, "-U", "postgres", "--auth=trust",
               "-E", "UTF8", "--locale=C"],
            check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        self.port = free_port()
        self.proc = subprocess.Popen(
            self.prefix
            + [f"{self.bin}/postgres", "-D", data, "-p", str(self.port), "-k", self.dir,
               "-c", "listen_addresses=127.0.0.1", "-c", "max_connections=200"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        self.n = 0
        for _ in range(100):
            if subprocess.run(
                [f"{self.bin}/pg_isready", "-h", "127.0.0.1", "-p", str(self.port)],
                stdout=subprocess.DEVNULL,
            ).returncode == 0:
                return
            time.sleep(0.1)
        sys.exit("PostgreSQL did not start")

    def fresh_url(self):
        self.n += 1
        name = f"bench{self.n}"
        subprocess.run(
            [f"{self.bin}/createdb", "-h", "127.0.0.1", "-p", str(self.port), "-U", "postgres", name],
            check=True,
        )
        return f"postgres://postgres@127.0.0.1:{self.port}/{name}"

    def stop(self):
        self.proc.terminate()
        self.proc.wait()


class Replica:
    def __init__(self, binary, base, i, store_url, ws):
        self.home = os.path.join(base, f"home{i}")
        os.makedirs(os.path.join(self.home, "config"))
        with open(os.path.join(self.home, "config", "capstan.toml"), "w") as f:
            f.write(f"[store]\nurl = {json.dumps(store_url)}\n")
        env = dict(os.environ, CAPSTAN_HOME=self.home)
        for k in ("CAPSTAN_TOKEN", "CAPSTAN_CONFIG_DIR", "CAPSTAN_DATA_DIR", "CAPSTAN_CACHE_DIR"):
            env.pop(k, None)
        self.proc = subprocess.Popen(
            [binary, "serve", "--port", "0", "--no-token", "--approve", "all", "-w", ws],
            env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
        )
        line = self.proc.stdout.readline().strip()
        if not line.startswith("listening on http://"):
            self.proc.kill()
            sys.exit(f"capstan serve printed {line!r}")
        host, port = line[len("listening on http://"):].rsplit(":", 1)
        self.host, self.port = host, int(port)

    def conn(self):
        return http.client.HTTPConnection(self.host, self.port, timeout=120)

    def stop(self):
        self.proc.terminate()
        self.proc.wait()


def one_run(conn, ws, question):
    body = json.dumps({"message": question, "workspace": ws})
    conn.request("POST", "/v1/runs", body, {"Content-Type": "application/json"})
    resp = conn.getresponse()
    data = resp.read()
    if resp.status != 200 or b"event: run.completed" not in data:
        raise RuntimeError(f"POST /v1/runs: {resp.status} {data[-300:]!r}")


def throughput(replicas, ws, conc, seconds):
    lat, errors = [], []
    lock = threading.Lock()
    stop = time.monotonic() + seconds

    def client(i):
        conns = [r.conn() for r in replicas]
        n = i
        while time.monotonic() < stop:
            t = time.monotonic()
            try:
                one_run(conns[n % len(conns)], ws, QUESTION)
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
    return len(lat) / wall, pct(lat, 0.5) * 1e3, pct(lat, 0.99) * 1e3


def pct(xs, p):
    return xs[min(len(xs) - 1, int(round((len(xs) - 1) * p)))]


def sse_times(resp, out):
    """Reads an SSE stream to its terminal event, recording per event its
    (seq, type, arrival wall time, emission wall time from the envelope's
    `ts`, which has millisecond precision)."""
    seq, kind, emitted = None, None, None
    while True:
        line = resp.readline()
        if not line:
            return
        line = line.decode().rstrip("\r\n")
        if line.startswith("id:"):
            seq = int(line[3:].strip())
        elif line.startswith("event:"):
            kind = line[6:].strip()
        elif line.startswith("data:"):
            ts = json.loads(line[5:])["ts"]
            emitted = calendar.timegm(time.strptime(ts[:19], "%Y-%m-%dT%H:%M:%S")) + int(ts[20:23]) / 1e3
        elif line == "" and kind is not None:
            out.append((seq, kind, time.time(), emitted))
            if kind in ("run.completed", "run.failed", "run.cancelled"):
                return
            seq, kind, emitted = None, None, None


def fanout(replicas, ws, runs):
    """Emission (the envelope's `ts`) to delivery on the follower, for the
    events emitted after the follower subscribed."""
    delays = []
    for _ in range(runs):
        origin, follower = replicas[0], replicas[-1]
        c = origin.conn()
        c.request("POST", "/v1/runs", json.dumps({"message": SLOW, "workspace": ws}),
                  {"Content-Type": "application/json"})
        resp = c.getresponse()
        run_id = resp.getheader("x-capstan-run-id")
        seen_origin = []
        t_origin = threading.Thread(target=sse_times, args=(resp, seen_origin))
        t_origin.start()
        f = follower.conn()
        f.request("GET", f"/v1/runs/{run_id}/events")
        fresp = f.getresponse()
        subscribed = time.time()
        seen_follower = []
        sse_times(fresp, seen_follower)
        t_origin.join()
        for _, kind, arrived, emitted in seen_follower:
            if emitted > subscribed + 0.05 and kind != "response.delta":
                delays.append(arrived - emitted)
    delays.sort()
    if not delays:  # the follower's stream ended before the runner's events
        return 0, float("nan"), float("nan")
    return len(delays), pct(delays, 0.5) * 1e3, pct(delays, 0.99) * 1e3


def main():
    ap = argparse.ArgumentParser()
    target = os.environ.get("CARGO_TARGET_DIR", os.path.join(ROOT, "target"))
    ap.add_argument("--bin", default=os.path.join(target, "release", "capstan"))
    ap.add_argument("--seconds", type=float, default=10)
    ap.add_argument("--conc", type=int, default=8)
    ap.add_argument("--fanout-runs", type=int, default=10)
    args = ap.parse_args()
    binary = os.path.abspath(args.bin)
    base = tempfile.mkdtemp(prefix="capstan-bench-replicas-")
    os.chmod(base, 0o755)
    ws = os.path.join(base, "handbook")
    shutil.copytree(os.path.join(ROOT, "examples", "handbook"), ws)
    pg = Postgres(base)
    rows = []
    try:
        for backend in ("sqlite", "postgres"):
            for n in (1, 3):
                url = (
                    pg.fresh_url() if backend == "postgres"
                    else "sqlite:" + os.path.join(base, f"shared-{n}.db")
                )
                setup = os.path.join(base, f"{backend}-{n}")
                os.makedirs(setup)
                replicas = []
                try:
                    for i in range(n):
                        replicas.append(Replica(binary, setup, i, url, ws))
                    for r in replicas:  # warm-up: compiles components, builds the index
                        one_run(r.conn(), ws, QUESTION)
                    rate, p50, p99 = throughput(replicas, ws, args.conc, args.seconds)
                    fn, f50, f99 = fanout(replicas, ws, args.fanout_runs)
                    rows.append((backend, n, rate, p50, p99, fn, f50, f99))
                finally:
                    for r in replicas:
                        r.stop()
    finally:
        pg.stop()
        shutil.rmtree(base, ignore_errors=True)
    print(f"binary: {binary}")
    print(f"date: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, "
          f"load average {os.getloadavg()[0]:.1f}, {os.cpu_count()} cores")
    print()
    print(f"| store | replicas | runs/s ({args.conc} clients) | run p50 | run p99 "
          "| fan-out events | fan-out p50 | fan-out p99 |")
    print("|---|---|---|---|---|---|---|---|")
    for backend, n, rate, p50, p99, fn, f50, f99 in rows:
        fan = (
            f"{fn} | {f50:.2f} ms | {f99:.2f} ms" if fn
            else "0 | not followed | (SQLite processes replay, they do not follow)"
        )
        print(f"| {backend} | {n} | {rate:.1f} | {p50:.1f} ms | {p99:.1f} ms | {fan} |")
    print()
    print(f"Command: python3 bench/replicas/bench.py --bin {args.bin} --seconds {args.seconds:g} "
          f"--conc {args.conc} --fanout-runs {args.fanout_runs}")


if __name__ == "__main__":
    main()
