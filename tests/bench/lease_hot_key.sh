#!/usr/bin/env bash
# One hot key on a lease zone far below its limit (10^9 requests/s, burst 1000): how many
# requests it rejects all the same, and why (the module's warnings). A benchmark, not a test:
# it prints what it counted and never fails on a figure.
#
#   tests/bench/lease_hot_key.sh                 (RUNS=12 SECS=4 SO=build/...so VG=1: under callgrind)
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
SO=${SO:-$HERE/../../build/ngx_http_ratelimit_module.so}
SECS=${SECS:-4} RUNS=${RUNS:-12}
free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

one_run() {
    local tmp rp port ng rejected requests
    tmp=$(mktemp -d /tmp/rl-leasehot.XXXXXXXXXX)
    rp=$(free_port) port=$(free_port)
    redis-server --port "$rp" --bind 127.0.0.1 --save '' --appendonly no --dir "$tmp" --daemonize yes \
        --pidfile "$tmp/redis.pid" --logfile "$tmp/redis.log" >/dev/null
    cat >"$tmp/nginx.conf" <<C
load_module $SO;
worker_processes 1; daemon off; master_process off;
pid $tmp/nginx.pid; error_log $tmp/error.log warn;
events { worker_connections 512; }
http { access_log off; keepalive_requests 100000000;
  client_body_temp_path $tmp; proxy_temp_path $tmp; fastcgi_temp_path $tmp; uwsgi_temp_path $tmp; scgi_temp_path $tmp;
  ratelimit_redis r 127.0.0.1:$rp timeout=1s;
  ratelimit_zone z_lease key=one requests=1000000000 period=1s burst=1000 redis=r sync=100ms sync_mode=lease size=1m;
  server { listen 127.0.0.1:$port; location / { ratelimit zone=z_lease; empty_gif; } }
}
C
    if [[ ${VG:-0} == 1 ]]; then
        valgrind --tool=callgrind --callgrind-out-file="$tmp/cg.out" /usr/sbin/nginx -p "$tmp" -c "$tmp/nginx.conf" >"$tmp/vg.log" 2>&1 &
    else
        /usr/sbin/nginx -p "$tmp" -c "$tmp/nginx.conf" &
    fi
    ng=$!
    for _ in $(seq 200); do curl -s -o /dev/null "http://127.0.0.1:$port/" && break; sleep 0.1; done
    out=$(wrk -t1 -c50 -d"${SECS}s" -s "$HERE/one-key.lua" "http://127.0.0.1:$port/" -- 16 2>&1)
    requests=$(awk '/requests in/ { print $1 }' <<<"$out")
    rejected=$(awk '/Non-2xx/ { print $NF }' <<<"$out")
    echo "run: ${rejected:-0} rejected of ${requests:-?}"
    grep -E '\[(warn|error|crit|alert)\]' "$tmp/error.log" | grep -v 'limiting request' | sed 's/^[^]]*\] [0-9#]*: //' |
        cut -c1-160 | sort | uniq -c | sort -rn | head -3
    kill "$ng" 2>/dev/null; wait "$ng" 2>/dev/null
    kill "$(cat "$tmp/redis.pid")" 2>/dev/null; sleep 0.3
    rm -rf "$tmp"
}

for _ in $(seq "$RUNS"); do one_run; done
