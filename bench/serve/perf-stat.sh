#!/usr/bin/env bash
# What one served run costs the server in the kernel's terms: context switches, CPU
# migrations, page faults, CPU time, `fdatasync`s, `pwrite64`s (SQLite's WAL frames
# are two each) and futex calls, per run, from `perf stat -p` over 6 s of
# `wrk -t2 -c16` POSTing the handbook question (after a warm-up run and 2 s of load).
#
# Usage: bash bench/serve/perf-stat.sh BIN [BIN...]   (CONC=16)
# Needs wrk and perf (apt-get install -y wrk linux-perf), and root or
# kernel.perf_event_paranoid <= 1 for the syscall tracepoints.
set -euo pipefail
source "$(dirname "$0")/server.sh"
command -v perf >/dev/null || { echo "perf is not installed: apt-get install -y linux-perf" >&2; exit 1; }
[ $# -ge 1 ] || { echo "usage: bash bench/serve/perf-stat.sh BIN [BIN...]" >&2; exit 2; }
C="${CONC:-16}"
EVENTS=context-switches,cpu-migrations,page-faults,task-clock
EVENTS="$EVENTS,syscalls:sys_enter_fdatasync,syscalls:sys_enter_pwrite64,syscalls:sys_enter_futex"
echo "bash bench/serve/perf-stat.sh $*  ($(date -u '+%Y-%m-%d %H:%M UTC'), load average $(cut -d' ' -f1 /proc/loadavg))"
for BIN in "$@"; do
  H="$(mktemp -d)"
  start_server "$BIN" "$H"
  wrk -t2 -c"$C" -d2s -s "$H/post.lua" "$URL/v1/runs" > /dev/null
  perf stat -e "$EVENTS" -p "$SP" -o "$H/stat.txt" -- sleep 6 &
  PS=$!
  R="$(wrk -t2 -c"$C" -d6s -s "$H/post.lua" "$URL/v1/runs")"
  wait "$PS"
  N=$(echo "$R" | awk '/requests in/ {print $1}')
  echo "$BIN at $C in flight: $(echo "$R" | awk '/Requests\/sec/ {print $2}') runs/s; per run:" \
    "$(awk -v n="$N" '/context-switches|cpu-migrations|page-faults|task-clock|sys_enter/ {
        gsub(",", "", $1); name = $2; sub("syscalls:sys_enter_", "", name);
        if (name == "msec") name = "CPU ms"; printf "%s %.2f, ", name, $1 / n }' "$H/stat.txt" | sed 's/, $//')"
  stop_server
  rm -rf "$H"
done
