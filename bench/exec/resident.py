#!/usr/bin/env python3
"""A sandboxed `true` inside a resident host against bubblewrap, side by side.

A running `capstan serve` (fresh home, `--approve all`) gets `run \\`true\\`` runs over
127.0.0.1; each run's `terminal.step` says how long the host took to run the command
in the OS sandbox (`duration_ms`: from the request to the launcher until the command's
exit was seen: launcher fork, namespaces, the view, Landlock, seccomp, the identity,
then bash running `true`). In the same interleaved rounds bubblewrap runs `true` in the
same view as a whole process (bench/startup/bench.py's `bwrap_argv`). Also `capstan
invoke terminal_exec` `true`, the one-shot process, for the second ratio of issue 41.

Usage: python3 bench/exec/resident.py [--bin PATH] [--rounds N]
(default binary: $CARGO_TARGET_DIR or target, release/capstan). Needs bwrap. Prints a
Markdown table and the command that reproduces it.
"""

import argparse
import http.client
import importlib.util
import json
import os
import shutil
import statistics
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "bench", "startup"))
from bench import bwrap_argv, env_for, pct, timed  # noqa: E402

# bench/serve/bench.py's server start (a module of the same name as startup's).
_spec = importlib.util.spec_from_file_location(
    "serve_bench", os.path.join(ROOT, "bench", "serve", "bench.py"))
serve_bench = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(serve_bench)


def step_ms(host, port, ws):
    """One `run \\`true\\`` run: the terminal.step's duration_ms, in seconds."""
    conn = http.client.HTTPConnection(host, port, timeout=60)
    body = json.dumps({"message": "run `true`", "workspace": ws})
    conn.request("POST", "/v1/runs", body, {"Content-Type": "application/json"})
    resp = conn.getresponse()
    text = resp.read().decode()
    conn.close()
    for block in text.split("\n\n"):
        if "event: terminal.step" in block:
            data = next(l[len("data: "):] for l in block.splitlines() if l.startswith("data: "))
            event = json.loads(data)
            event = event.get("event", event)
            if event.get("exit_code") != 0:
                raise RuntimeError(f"`true` failed: {event}")
            return event["duration_ms"] / 1e3
    raise RuntimeError(f"no terminal.step in the run: {text[-400:]}")


def main():
    target = os.environ.get("CARGO_TARGET_DIR", os.path.join(ROOT, "target"))
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bin", default=os.path.join(target, "release", "capstan"))
    parser.add_argument("--rounds", type=int, default=60)
    args = parser.parse_args()
    if shutil.which("bwrap") is None:
        sys.exit("bwrap is not installed: apt-get install -y bubblewrap")
    scratch = tempfile.mkdtemp(prefix="capstan-resident-")
    ws = os.path.join(scratch, "ws")
    os.makedirs(ws)
    proc, host, port = serve_bench.start(os.path.abspath(args.bin), os.path.join(scratch, "home"),
                                         ws, ["--approve", "all"])
    invoke_home = os.path.join(scratch, "home-invoke")
    invoke = [os.path.abspath(args.bin), "invoke", "terminal_exec", "-w", ws, "-i",
              '{"command":"true"}']
    try:
        for _ in range(3):  # warm-up: components loaded, the store open
            step_ms(host, port, ws)
        timed(invoke, env_for(invoke_home))
        rows = {"bwrap, same view, `true` (whole process)": [],
                "`capstan serve`: sandboxed `true` in a run (terminal.step duration)": [],
                "`capstan invoke terminal_exec` `true` (whole process)": []}
        names = list(rows)
        for _ in range(args.rounds):
            rows[names[0]].append(timed(bwrap_argv(ws))[0])
            rows[names[1]].append(step_ms(host, port, ws))
            rows[names[2]].append(timed(invoke, env_for(invoke_home))[0])
    finally:
        proc.terminate()
        proc.wait()
        shutil.rmtree(scratch, ignore_errors=True)
    bw = statistics.median(rows[names[0]])
    print(f"\n`python3 bench/exec/resident.py {' '.join(sys.argv[1:])}`, "
          f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, load average "
          f"{os.getloadavg()[0]:.1f}, {args.rounds} interleaved rounds\n")
    print("| what | p50 ms | p90 ms | p50 vs bwrap |")
    print("|---|---:|---:|---:|")
    for name, xs in rows.items():
        print(f"| {name} | {statistics.median(xs) * 1e3:.1f} | {pct(xs, 90) * 1e3:.1f} "
              f"| {statistics.median(xs) / bw:.2f}x |")


if __name__ == "__main__":
    main()
