#!/usr/bin/env python3
"""Start-up costs of the `capstan` process, side by side in one sitting:

* `capstan invoke terminal_exec -i '{"command":"true"}'` (a whole process: config,
  registry, the terminal-exec component, the OS sandbox, `true`) against
  bubblewrap running `true` with the same filesystem view
  (crates/sandbox/benches/exec.rs builds the same one) and a plain `true`;
* the first `capstan ask` on a fresh home (cold: nothing cached, the workspace
  not indexed yet) against a warm one, wall time, CPU time and peak RSS.

Rows are measured in interleaved rounds (one run of each per round), so a slow
stretch of a shared machine hits every row alike.

Usage: python3 bench/startup/bench.py [--bin PATH] [--rounds N] [--baseline PATH]
(default binary: $CARGO_TARGET_DIR or target, release/capstan; `--baseline` times
another build of capstan in the same rounds). Prints Markdown tables and the
command that reproduces them.
"""

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
QUESTION = "How do I rotate the signing keys?"


def bwrap_argv(ws):
    argv = ["bwrap", "--unshare-all", "--die-with-parent", "--new-session", "--tmpfs", "/"]
    for d in ["/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc", "/opt"]:
        if os.path.islink(d):
            argv += ["--symlink", os.readlink(d), d]
        elif os.path.exists(d):
            argv += ["--ro-bind", d, d]
    for secret in ["/etc/shadow", "/etc/shadow-", "/etc/gshadow", "/etc/gshadow-",
                   "/etc/sudoers", "/etc/sudoers.d", "/etc/ssh", "/etc/ssl/private"]:
        if os.path.isdir(secret) and not os.path.islink(secret):
            argv += ["--tmpfs", secret, "--remount-ro", secret]
        elif os.path.lexists(secret):
            argv += ["--ro-bind", "/dev/null", secret]
    argv += ["--tmpfs", "/tmp", "--dev", "/dev", "--proc", "/proc",
             "--bind", ws, ws, "--chdir", ws, "--", "/bin/bash", "--noprofile", "--norc",
             "-c", "true"]
    return argv


def env_for(home):
    env = dict(os.environ, CAPSTAN_HOME=home)
    for k in ("CAPSTAN_CONFIG_DIR", "CAPSTAN_DATA_DIR", "CAPSTAN_CACHE_DIR", "RUST_LOG"):
        env.pop(k, None)
    return env


def timed(argv, env=None, cwd=None):
    """Wall seconds, CPU seconds and peak RSS (KiB) of one child process."""
    start = time.perf_counter()
    proc = subprocess.Popen(argv, env=env, cwd=cwd, stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    err = proc.stderr.read()
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        sys.exit(f"{' '.join(argv[:4])}... exited {proc.returncode}: {err.decode()[-2000:]}")
    return wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    target = os.environ.get("CARGO_TARGET_DIR", os.path.join(ROOT, "target"))
    ap.add_argument("--bin", default=os.path.join(target, "release", "capstan"))
    ap.add_argument("--baseline", help="another capstan binary to time in the same rounds")
    ap.add_argument("--rounds", type=int, default=30, help="invoke rounds (default 30)")
    ap.add_argument("--ask-rounds", type=int, default=5, help="cold/warm ask rounds (default 5)")
    args = ap.parse_args()
    if shutil.which("bwrap") is None:
        sys.exit("bwrap is not installed: apt-get install -y bubblewrap")

    bins = [("capstan", os.path.abspath(args.bin))]
    if args.baseline:
        bins.append(("baseline", os.path.abspath(args.baseline)))
    scratch = tempfile.mkdtemp(prefix="capstan-startup-")
    ws = os.path.join(scratch, "ws")
    os.makedirs(ws)
    handbook = os.path.join(ROOT, "examples", "handbook")

    invoke = {}
    for label, binary in bins:
        home = os.path.join(scratch, f"home-{label}")
        argv = [binary, "invoke", "terminal_exec", "-w", ws, "-i", '{"command":"true"}']
        timed(argv, env_for(home))  # compiles or loads once, creates the database
        invoke[label] = (argv, env_for(home))
    rows = {"plain `true`": [], "bwrap, same view, `true`": []}
    for label in invoke:
        rows[f"`{label} invoke terminal_exec` `true`"] = []
    for _ in range(args.rounds):
        rows["plain `true`"].append(timed(["/bin/true"])[0])
        rows["bwrap, same view, `true`"].append(timed(bwrap_argv(ws))[0])
        for label, (argv, env) in invoke.items():
            rows[f"`{label} invoke terminal_exec` `true`"].append(timed(argv, env)[0])

    bw = statistics.median(rows["bwrap, same view, `true`"])
    print(f"\n`python3 bench/startup/bench.py {' '.join(sys.argv[1:])}`, "
          f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, load average "
          f"{os.getloadavg()[0]:.1f}, {args.rounds} interleaved rounds\n")
    print("| process | p50 ms | p90 ms | p50 vs bwrap |")
    print("|---|---:|---:|---:|")
    for name, xs in rows.items():
        print(f"| {name} | {statistics.median(xs) * 1e3:.1f} | {pct(xs, 90) * 1e3:.1f} "
              f"| {statistics.median(xs) / bw:.2f}x |")

    cold = {label: [] for label, _ in bins}
    warm = {label: [] for label, _ in bins}
    for r in range(args.ask_rounds):
        for label, binary in bins:
            home = os.path.join(scratch, f"ask-{label}-{r}")
            copy = os.path.join(scratch, f"handbook-{label}-{r}")
            shutil.copytree(handbook, copy)
            argv = [binary, "ask", "-w", copy, QUESTION]
            cold[label].append(timed(argv, env_for(home)))
            warm[label].append(timed(argv, env_for(home)))
    print("\nFirst `capstan ask` on a fresh home (nothing compiled or indexed) and the "
          "next one, examples/handbook, medians:\n")
    print("| binary | run | wall ms | CPU ms | peak RSS MiB |")
    print("|---|---|---:|---:|---:|")
    for label, _ in bins:
        for name, xs in (("first (cold)", cold[label]), ("second (warm)", warm[label])):
            print(f"| {label} | {name} | {statistics.median(x[0] for x in xs) * 1e3:.0f} "
                  f"| {statistics.median(x[1] for x in xs) * 1e3:.0f} "
                  f"| {statistics.median(x[2] for x in xs) / 1024:.0f} |")
    shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
