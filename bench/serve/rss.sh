#!/usr/bin/env bash
# `capstan serve`'s resident memory around a burst: after one warm-up run, during
# `wrk -t2 -c64 -d6s` POSTing the handbook question, just after, 12 s and 25 s later
# (the server returns freed heap every 10 s: `idle_trim.rs`), and how much of the last
# is the binary's own code (file-backed pages).
# As root the page cache is dropped before each binary starts: a binary just written
# (built or copied) is cached in large folios and mapped whole, which reads about
# 5 MiB more resident than the same file read back from disk.
# Usage: bash bench/serve/rss.sh BIN [BIN...]   (needs wrk: apt-get install -y wrk)
set -euo pipefail
source "$(dirname "$0")/server.sh"
for B in "$@"; do
  D="$(mktemp -d)"
  if [ -w /proc/sys/vm/drop_caches ]; then sync; echo 3 > /proc/sys/vm/drop_caches; fi
  start_server "$B" "$D"
  rss() { awk '/VmRSS/ {print $2}' "/proc/$SP/status"; }
  a=$(rss)
  wrk -t2 -c64 -d6s -s "$D/post.lua" "$URL/v1/runs" > /dev/null 2>&1 &
  sleep 3; m=$(rss); wait $!; b=$(rss); sleep 12; c=$(rss); sleep 13; d=$(rss)
  f=$(awk '/^RssFile/ {print $2}' "/proc/$SP/status")
  echo "$B: RSS KiB after warm-up $a, at 64 in flight $m, just after $b, 12 s idle $c," \
    "25 s idle $d (of which file-backed $f)"
  stop_server
  rm -rf "$D"
done
