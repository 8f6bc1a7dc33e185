#!/usr/bin/env bash
# How many keys one MiB of zone holds: this module against limit_req, at the same zone sizes,
# found by observation (not computed from struct sizes):
#
#   tests/bench/keys_per_mib.sh            (SIZES="1 10" NGINX_BIN=... SO=...)
#
# Each zone limits $arg_k to 1 request (ratelimit: requests=1 period=1h; limit_req: rate=1r/m,
# its slowest rate, no burst). zone_capacity.py sends keys k1..kN (fresh ones each time), then
# k1 again: rejected means k1 is still remembered, admitted means it was evicted. Both evict the
# least recently used key when full, so k1 survives iff N <= capacity; doubling then bisecting N
# finds the capacity exactly. Bounded: the whole search stops after TIME_LIMIT seconds (150).
# Prints a Markdown table: keys remembered, keys per MiB, and the ratio module / limit_req.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
NGINX_BIN=${NGINX_BIN:-/usr/sbin/nginx}
SO=${SO:-$ROOT/build/ngx_http_ratelimit_module.so}
SIZES=${SIZES:-1 10}               # zone sizes to measure, in MiB
TIME_LIMIT=${TIME_LIMIT:-150}
START=$(date +%s)

say() { printf '%s\n' "$*" >&2; }
die() { say "keys_per_mib.sh: $*"; exit 1; }

[[ -x $NGINX_BIN ]] || die "no nginx at $NGINX_BIN"
[[ -f $SO ]] || die "no module at $SO (./build.sh build)"
command -v python3 >/dev/null || die "python3 is needed"

TMP="" MASTER=""
cleanup() {
    local rc=$?
    trap - EXIT INT TERM
    if [[ -n $MASTER ]]; then
        kill -QUIT "$MASTER" 2>/dev/null || true
        for _ in $(seq 50); do kill -0 "$MASTER" 2>/dev/null || break; sleep 0.1; done
        kill -KILL "$MASTER" 2>/dev/null || true
    fi
    [[ -n $TMP ]] && rm -rf "$TMP"
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

TMP=$(mktemp -d "${TMPDIR:-/tmp}/rlkeys.XXXXXX")
chmod 755 "$TMP"
cp "$SO" "$TMP/ngx_http_ratelimit_module.so"   # build.sh rewrites build/*.so in place
PORT=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')

{
    echo "load_module $TMP/ngx_http_ratelimit_module.so;"
    [[ $(id -u) -eq 0 ]] && echo "user nobody nogroup;"
    cat <<EOF
worker_processes 1;
daemon on;
pid $TMP/nginx.pid;
error_log $TMP/error.log info;

events { worker_connections 64; }

http {
    access_log off;
    keepalive_requests 100000000;   # one pipelined connection carries a whole probe
    client_body_temp_path $TMP/client_body_temp;
    proxy_temp_path $TMP/proxy_temp;
    fastcgi_temp_path $TMP/fastcgi_temp;
    uwsgi_temp_path $TMP/uwsgi_temp;
    scgi_temp_path $TMP/scgi_temp;
EOF
    for m in $SIZES; do
        echo "    ratelimit_zone rl$m key=\$arg_k requests=1 period=1h size=${m}m;"
        echo "    limit_req_zone \$arg_k zone=lr$m:${m}m rate=1r/m;"
    done
    echo "    server {"
    echo "        listen 127.0.0.1:$PORT;"
    for m in $SIZES; do
        echo "        location /rl$m { ratelimit zone=rl$m; empty_gif; }"
        echo "        location /lr$m { limit_req zone=lr$m; empty_gif; }"
    done
    echo "    }"
    echo "}"
} >"$TMP/nginx.conf"

"$NGINX_BIN" -p "$TMP/" -c "$TMP/nginx.conf" -e "$TMP/error.log" || die "nginx failed to start"
for _ in $(seq 50); do [[ -s $TMP/nginx.pid ]] && break; sleep 0.1; done
MASTER=$(cat "$TMP/nginx.pid")
sleep 0.3

deadline=$((START + TIME_LIMIT))
declare -A CAP=()
for m in $SIZES; do
    for z in rl lr; do
        say "== searching the capacity of $z$m (${m} MiB)"
        read -r cap probes reqs secs < <(python3 "$HERE/zone_capacity.py" "$PORT" "/$z$m" "$z$m" "$deadline") ||
            die "search failed for $z$m"
        [[ -n ${cap:-} ]] || die "search failed for $z$m"
        CAP[$z$m]=$cap
        say "   $cap keys ($probes probes, $reqs requests, ${secs}s)"
    done
done

echo "### Keys per MiB of zone (observed)"
echo
echo "| zone size | ratelimit keys | ratelimit keys/MiB | limit_req keys | limit_req keys/MiB | ratio |"
echo "| ---: | ---: | ---: | ---: | ---: | ---: |"
for m in $SIZES; do
    awk -v m="$m" -v a="${CAP[rl$m]}" -v b="${CAP[lr$m]}" 'BEGIN {
        printf "| %d MiB | %d | %.0f | %d | %.0f | %.2fx |\n", m, a, a / m, b, b / m, (b > 0 ? a / b : 0) }'
done
echo
echo "Keys (\$arg_k) of 6 to 12 bytes. limit_req stores each key in a node of 80 bytes plus the key, taken from"
echo "128-byte slab chunks for keys up to 48 bytes; this module stores a 128-bit hash of the key in a fixed-size"
echo "slot, so the key's length does not matter to it."
echo "Observed: a zone remembers N keys when, after N fresh keys, the first one is still rejected."
echo "The module's own count at start (error.log, info):"
grep -o 'ratelimit zone "rl[0-9]*": [0-9]* keys of [0-9]* bytes' "$TMP/error.log" | sed 's/^/  /'
echo
echo "Reproduce: cd $ROOT && SIZES='$SIZES' NGINX_BIN=$NGINX_BIN SO=$SO tests/bench/keys_per_mib.sh"
echo "Total time: $(($(date +%s) - START))s"
