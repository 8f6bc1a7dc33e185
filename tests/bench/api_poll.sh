#!/usr/bin/env bash
# What one poll of the dashboard costs the worker (issue 32): CPU time (user + system, from
# /proc) of one nginx process per GET <api>/zones with ZONES zones (100), each with a full top
# list (three keys rejected in every zone beforehand), and per .../zones/NAME/top?n=20; against a
# location answering a few bytes from memory (`return 200`: nginx's own cost of a request), and
# the dashboard's bytes. One nginx process (master_process off), wrk on one keep-alive connection,
# SECONDS_PER_CASE (5) per row. A benchmark, not a test: the CPU clock has a 10 ms tick (hence
# thousands of requests per row) and the machine's load moves it.
#
#   tests/bench/api_poll.sh        SO=path/to/module.so  ZONES=100  SECONDS_PER_CASE=5
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
NGINX_BIN=${NGINX_BIN:-/usr/sbin/nginx}
SO=${SO:-$ROOT/build/ngx_http_ratelimit_module.so}
ZONES=${ZONES:-100}
SECONDS_PER_CASE=${SECONDS_PER_CASE:-5}

for c in wrk curl; do command -v $c >/dev/null || { echo "api_poll.sh: $c is not installed" >&2; exit 1; }; done
[[ -f $SO ]] || { echo "api_poll.sh: no module at $SO (./build.sh build)" >&2; exit 1; }

TMP=$(mktemp -d "${TMPDIR:-/tmp}/rlpoll.XXXXXX")
NPID=""
cleanup() {
    [[ -n $NPID ]] && kill "$NPID" 2>/dev/null && wait "$NPID" 2>/dev/null
    rm -rf "$TMP"
}
trap cleanup EXIT

PORT=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
{
    echo "load_module $SO;"
    echo "worker_processes 1; daemon off; master_process off;"
    echo "pid $TMP/nginx.pid; error_log $TMP/error.log warn;"
    echo "events { worker_connections 64; }"
    echo "http { access_log off; keepalive_requests 100000000;"
    echo "  client_body_temp_path $TMP; proxy_temp_path $TMP; fastcgi_temp_path $TMP; uwsgi_temp_path $TMP; scgi_temp_path $TMP;"
    for z in $(seq "$ZONES"); do echo "  ratelimit_zone z$z key=\$arg_k requests=1 period=1h size=1m;"; done
    echo "  server { listen 127.0.0.1:$PORT;"
    echo "    location /z/ { ratelimit_log_level info;"
    for z in $(seq "$ZONES"); do echo "      location = /z/$z { ratelimit zone=z$z; empty_gif; }"; done
    echo "    }"
    echo "    location /api/ { ratelimit_api; }"
    echo "    location = /plain { return 200 '{\"zones\":[]}'; }"
    echo "  }"
    echo "}"
} >"$TMP/nginx.conf"

"$NGINX_BIN" -p "$TMP" -c "$TMP/nginx.conf" &
NPID=$!
for _ in $(seq 100); do curl -s -o /dev/null "http://127.0.0.1:$PORT/plain" && break; sleep 0.1; done

# Three keys rejected in every zone, more for the first: each zone's top list full.
for z in $(seq "$ZONES"); do
    for k in a b c; do for _ in 1 2 3; do curl -s -o /dev/null "http://127.0.0.1:$PORT/z/$z?k=$k"; done; done
done

# CPU time of the nginx process, in clock ticks.
ticks() { awk '{ print $14 + $15 }' "/proc/$NPID/stat"; }
HZ=$(getconf CLK_TCK)

echo "| request | bytes | requests | worker CPU µs/request | against the location answering from memory |"
echo "| --- | ---: | ---: | ---: | ---: |"
base=""
for path in /plain /api/zones /api/zones/z1/top?n=20; do
    url="http://127.0.0.1:$PORT$path"
    bytes=$(curl -s "$url" | wc -c)
    t0=$(ticks)
    out=$(wrk -t1 -c1 -d"${SECONDS_PER_CASE}s" "$url" 2>&1)
    t1=$(ticks)
    n=$(awk '/requests in/ { print $1 }' <<<"$out")
    us=$(awk -v t=$((t1 - t0)) -v hz="$HZ" -v n="$n" 'BEGIN { printf "%.1f", t / hz * 1e6 / n }')
    [[ -z $base ]] && base=$us
    printf '| GET %s | %d | %d | %s | +%s |\n' "$path" "$bytes" "$n" "$us" "$(awk -v a="$us" -v b="$base" 'BEGIN { printf "%.1f", a - b }')"
done
echo
files=0
for f in "$ROOT"/src/ngx/http/api/dashboard/*.{html,js,css,svg}; do files=$((files + $(wc -c <"$f"))); done
gz=$(cat "$ROOT"/src/ngx/http/api/dashboard/*.{html,js,css,svg} | gzip -9 | wc -c)
echo "The dashboard's files: $files bytes ($gz gzipped together), loaded once; then one GET .../zones per 1.5 s."
echo "$ZONES zones, one nginx process, one keep-alive connection, $SECONDS_PER_CASE s of wrk per row."
