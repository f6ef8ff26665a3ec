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
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
command -v wrk >/dev/null || { echo "wrk is not installed: apt-get install -y wrk" >&2; exit 1; }
for B in "$@"; do
  D="$(mktemp -d)"
  cp -r "$ROOT/examples/handbook" "$D/ws"
  export CAPSTAN_HOME="$D/home" WS="$D/ws"
  cat > "$D/post.lua" <<'LUA'
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.body = '{"message":"How do I rotate the signing keys?","workspace":"' .. os.getenv("WS") .. '"}'
LUA
  if [ -w /proc/sys/vm/drop_caches ]; then sync; echo 3 > /proc/sys/vm/drop_caches; fi
  "$B" serve --port 0 --no-token -w "$WS" > "$D/out.txt" 2>/dev/null &
  SP=$!
  for _ in $(seq 1 40); do [ -s "$D/out.txt" ] && break; sleep 0.25; done
  URL="$(head -1 "$D/out.txt" | sed 's/listening on //')"
  curl -sf -X POST -H 'Content-Type: application/json' \
    -d "{\"message\":\"warm-up\",\"workspace\":\"$WS\"}" "$URL/v1/runs" > /dev/null
  rss() { awk '/VmRSS/ {print $2}' "/proc/$SP/status"; }
  a=$(rss)
  wrk -t2 -c64 -d6s -s "$D/post.lua" "$URL/v1/runs" > /dev/null 2>&1 &
  sleep 3; m=$(rss); wait $!; b=$(rss); sleep 12; c=$(rss); sleep 13; d=$(rss)
  f=$(awk '/^RssFile/ {print $2}' "/proc/$SP/status")
  echo "$B: RSS KiB after warm-up $a, at 64 in flight $m, just after $b, 12 s idle $c," \
    "25 s idle $d (of which file-backed $f)"
  kill "$SP"; wait "$SP" 2>/dev/null || true
  rm -rf "$D"
done
