#!/usr/bin/env python3
"""`capstan search` end to end against ripgrep, side by side.

Each round runs, interleaved and for every query:
  * `capstan search --json` (the index is refreshed only when the host's walk
    sees a change: here nothing changes, so the plugin never walks);
  * `capstan invoke local_kb_retrieval --operation search` (always refreshes
    first: what every search did before);
  * `rg -i -l -F -e WORD ...` over the whole corpus (every file read).
The index is built once first (`capstan index`, timed). Wall time per process,
p50 and p90 over the rounds; ratios against ripgrep.

usage: python3 bench/kb/search.py [--capstan target/release/capstan]
       [--root DIR] [--rounds N] [--baseline OTHER_CAPSTAN]
The default root is linux-doc-6.1's html/_sources (3,183 files, 24 MB; the corpus
of the kb benches, fetched by bench/kb/fetch-corpus.sh).
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

CACHE = Path(os.environ.get("CAPSTAN_BENCH_CORPUS", "/work/.cache/capstan-bench"))
QUERIES = ["memory barrier ordering", "scheduler load balancing", "usb gadget configfs",
           "page cache writeback", "interrupt affinity"]


def linux_doc() -> Path:
    src = next((CACHE / "linux-doc").glob("usr/share/doc/linux-doc-*/html/_sources"), None)
    if src is None:
        sys.exit("no linux-doc corpus: run bash bench/kb/fetch-corpus.sh first")
    return src


def timed(cmd, env) -> tuple[float, bytes]:
    start = time.perf_counter()
    out = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    ms = (time.perf_counter() - start) * 1000
    if out.returncode not in (0, 1):  # rg exits 1 when nothing matches
        sys.exit(f"{cmd[0]} failed ({out.returncode}): {out.stderr.decode()[-500:]}")
    return ms, out.stdout


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--capstan", default=str(Path(__file__).resolve().parents[2] / "target/release/capstan"))
    ap.add_argument("--root", type=Path)
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--baseline", help="another capstan binary, timed interleaved with the first "
                    "(same home and index) for a before/after comparison")
    args = ap.parse_args()
    capstan = os.environ.get("CAPSTAN_BIN", args.capstan)
    if not Path(capstan).exists():
        alt = Path("/work/target/release/capstan")
        capstan = str(alt) if alt.exists() else sys.exit(f"no capstan binary at {capstan}")
    root = (args.root or linux_doc()).resolve()
    size = sum(f.stat().st_size for f in root.rglob("*") if f.is_file() and not f.is_symlink())
    files = sum(1 for f in root.rglob("*") if f.is_file())

    home = tempfile.mkdtemp(prefix="capstan-bench-search-")
    env = dict(os.environ, CAPSTAN_HOME=home)
    ms, _ = timed([capstan, "index", "--workspace", str(root)], env)
    print(f"corpus: {root} ({files} files, {size / 1e6:.1f} MB); first index {ms / 1000:.1f} s")
    # Warm the compiled-component cache and the page cache for everyone.
    timed([capstan, "search", "--json", "--workspace", str(root), "warm"], env)
    timed(["rg", "-i", "-l", "-F", "-e", "warm", str(root)], env)

    tools = {
        "capstan search (skips an unneeded refresh)":
            lambda q: [capstan, "search", "--json", "--workspace", str(root), q],
        "capstan search, refresh first (before)":
            lambda q: [capstan, "invoke", "local_kb_retrieval", "--json", "--operation", "search",
                       "--workspace", str(root), "--input", json.dumps({"query": q})],
        **({"capstan search, baseline binary":
            lambda q: [args.baseline, "search", "--json", "--workspace", str(root), q]}
           if args.baseline else {}),
        "ripgrep -i -l -F (all words, whole corpus)":
            lambda q: ["rg", "-i", "-l", "-F", *[a for w in q.split() for a in ("-e", w)], str(root)],
    }
    times = {name: [] for name in tools}
    skipped = 0
    for _ in range(args.rounds):
        for q in QUERIES:
            for name, cmd in tools.items():
                ms, out = timed(cmd(q), env)
                times[name].append(ms)
                if name.startswith("capstan search (skips"):
                    skipped += json.loads(out).get("index") is None
    runs = args.rounds * len(QUERIES)
    rg = statistics.median(times["ripgrep -i -l -F (all words, whole corpus)"])
    print(f"\n{runs} queries per tool, interleaved; wall time per process")
    print(f"{'tool':<46} {'p50 ms':>8} {'p90 ms':>8} {'p50 vs rg':>10}")
    for name, t in times.items():
        t = sorted(t)
        p50, p90 = statistics.median(t), t[int(len(t) * 0.9) - 1]
        print(f"{name:<46} {p50:>8.1f} {p90:>8.1f} {p50 / rg:>9.2f}x")
    print(f"\nrefresh skipped in {skipped} of {runs} searches")
    print(f"reproduce: python3 bench/kb/search.py --rounds {args.rounds}" +
          (f" --root {root}" if args.root else "") +
          (f" --baseline {args.baseline}" if args.baseline else ""))
    print(f"load average: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    shutil.rmtree(home, ignore_errors=True)


if __name__ == "__main__":
    main()
