#!/usr/bin/env bash
# `capstan serve` runs per second under wrk (a native client: the Python bench's client
# takes most of a core). Each binary serves a fresh home and a copy of examples/handbook
# on 127.0.0.1, answers one warm-up run, then `wrk -t2 -cC -d6s` POSTs the handbook
# question to /v1/runs at each concurrency; the binaries alternate round by round.
# Prints one line per binary, round and concurrency: runs/s, p50, p99, non-2xx
# responses (must be 0) and the server's CPU per run (utime + stime).
#
# Usage: bash bench/serve/wrk.sh BIN [BIN...]   (ROUNDS=2 CONC="4 16 64" SECONDS_EACH=6)
# Needs wrk (apt-get install -y wrk).
set -euo pipefail
source "$(dirname "$0")/server.sh"
[ $# -ge 1 ] || { echo "usage: bash bench/serve/wrk.sh BIN [BIN...]" >&2; exit 2; }
SCRATCH="$(mktemp -d)"
trap 'rm -rf "$SCRATCH"' EXIT
echo "bash bench/serve/wrk.sh $*  ($(date -u '+%Y-%m-%d %H:%M UTC'), load average $(cut -d' ' -f1 /proc/loadavg))"
for r in $(seq 1 "${ROUNDS:-2}"); do
  for BIN in "$@"; do
    H="$(mktemp -d "$SCRATCH/run-XXXX")"
    start_server "$BIN" "$H"
    for c in ${CONC:-4 16 64}; do
      T0=$(awk '{print $14+$15}' "/proc/$SP/stat")
      R="$(wrk -t2 -c"$c" -d"${SECONDS_EACH:-6}"s --latency -s "$H/post.lua" "$URL/v1/runs" 2>&1)"
      T1=$(awk '{print $14+$15}' "/proc/$SP/stat")
      N=$(echo "$R" | awk '/requests in/ {print $1}')
      TICK=$(getconf CLK_TCK)
      echo "$BIN round $r conc $c: $(echo "$R" | awk '/Requests\/sec/ {print $2}') runs/s," \
        "p50 $(echo "$R" | awk '$1=="50%" {print $2}'), p99 $(echo "$R" | awk '$1=="99%" {print $2}')," \
        "non-2xx $(echo "$R" | awk '/Non-2xx/ {print $5}' | grep . || echo 0)," \
        "CPU per run $(awk -v a="$T0" -v b="$T1" -v n="$N" -v t="$TICK" 'BEGIN {printf "%.2f", (b-a)*1000/t/n}') ms"
    done
    stop_server
  done
done
