# Sourced by the serve benches: one `capstan serve` on a fresh home with a copy of
# examples/handbook, answering the handbook question over 127.0.0.1.
#
#   start_server BIN DIR   sets SP (its pid), URL and WS, writes DIR/post.lua (the
#                          wrk script POSTing the question) and answers one warm-up run
#   stop_server            stops it
# Needs wrk (apt-get install -y wrk).
command -v wrk >/dev/null || { echo "wrk is not installed: apt-get install -y wrk" >&2; exit 1; }
SERVE_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"

start_server() {
  local bin="$1" dir="$2"
  cp -r "$SERVE_ROOT/examples/handbook" "$dir/ws"
  export CAPSTAN_HOME="$dir/home" WS="$dir/ws"
  unset CAPSTAN_TOKEN CAPSTAN_CONFIG_DIR CAPSTAN_DATA_DIR CAPSTAN_CACHE_DIR
  cat > "$dir/post.lua" <<'LUA'
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.body = '{"message":"How do I rotate the signing keys?","workspace":"' .. os.getenv("WS") .. '"}'
LUA
  "$bin" serve --port 0 --no-token -w "$WS" > "$dir/out.txt" 2>/dev/null &
  SP=$!
  for _ in $(seq 1 40); do [ -s "$dir/out.txt" ] && break; sleep 0.25; done
  URL="$(head -1 "$dir/out.txt" | sed 's/listening on //')"
  curl -sf -X POST -H 'Content-Type: application/json' \
    -d "{\"message\":\"warm-up\",\"workspace\":\"$WS\"}" "$URL/v1/runs" > /dev/null
}

stop_server() {
  kill "$SP"
  wait "$SP" 2>/dev/null || true
}
