#!/usr/bin/env bash
# User-space instructions per request of nginx, under callgrind: the module's own cost, free of
# the machine's noise (a VM's req/s drifts by 20-40% between runs; this count moves by <1%).
# It leaves out what run.sh measures and this cannot: the kernel (send, receive, wake-ups) and
# cache and TLB misses.
#
#   tests/bench/instructions.sh        (needs valgrind; Redis row: redis-server, else skipped)
#   METRICS=on tests/bench/instructions.sh   the same with a ratelimit_metrics location: every
#                                            zone and Redis counts into the metrics' shared memory
#   SYNC=on tests/bench/instructions.sh      more rows: gcra with sync=100ms, optimistic and
#                                            lease (their rounds run on timers inside the event
#                                            loop, so they count, spread over the requests; idle,
#                                            the zones still send a round each interval, which
#                                            every row then counts too: hence not by default),
#                                            and a new key each request on the Redis zone and
#                                            the lease zone (a lease zone's cold keys, issue 33)
#   SETTLE=on tests/bench/instructions.sh    rows with settle=: equal to the quantity (nothing to
#                                            send), and charging one unit more (shared memory, Redis;
#                                            the GETs and SETs Redis ran per request, its scripts'
#                                            included, in two more columns);
#                                            with a settle= in the configuration, every location runs
#                                            the log phase's handler: compare its rows with those
#                                            of a run without SETTLE=on
#   PARTS=on tests/bench/instructions.sh     where the worker's instructions go (issue 33): plain,
#                                            gcra in shared memory and in Redis split into parts
#                                            (callgrind_parts.py: building the command, the
#                                            connection's buffer and writes, reading, hiredis's
#                                            parsing, decoding, nginx's timers and HTTP work), a
#                                            table after the main one
#   CONNS=50 PIPELINE=16 tests/bench/instructions.sh   the load of run.sh (wrk connections, requests
#                                            per write: one-key.lua), so that a Redis call carries
#                                            many requests (the script calls per request say how
#                                            many); default one connection, one request at a time
#
# One nginx (one process, no master) runs under callgrind, collecting only inside its event
# loop; for each location: a few requests to warm up, counters zeroed, SECONDS_PER_CASE seconds of
# wrk (CONNS connections, PIPELINE requests per write), counters dumped (and, with Redis, the
# commands it ran meanwhile). Every limit admits every request; one-key locations; but the
# "rejected" rows (issue 32's top keys count each rejection): one key whose every request is
# rejected after its first, and a new key each request (random-keys.lua) rejected at once (a
# quantity above the limit), neither logged (ratelimit_log_level info under error_log warn).
# SO=path/to/another.so runs the same rows with that module.
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
NGINX_BIN=${NGINX_BIN:-/usr/sbin/nginx}
SO=${SO:-$ROOT/build/ngx_http_ratelimit_module.so}
SECONDS_PER_CASE=${SECONDS_PER_CASE:-3}
CONNS=${CONNS:-1}
PIPELINE=${PIPELINE:-1}

for c in valgrind callgrind_control wrk curl; do
    command -v $c >/dev/null || { echo "instructions.sh: $c is not installed" >&2; exit 1; }
done
[[ -f $SO ]] || { echo "instructions.sh: no module at $SO (./build.sh build)" >&2; exit 1; }

TMP=$(mktemp -d "${TMPDIR:-/tmp}/rlinstr.XXXXXX")
VG="" RPID=""
cleanup() {
    [[ -n $VG ]] && kill -QUIT "$VG" 2>/dev/null && wait "$VG" 2>/dev/null
    [[ -n $RPID ]] && kill "$RPID" 2>/dev/null
    rm -rf "$TMP"
}
trap cleanup EXIT

# Script calls Redis ran so far (FCALL, EVALSHA, EVAL; not the commands they run), 0 without Redis.
redis_commands() {
    [[ -n $redis_port ]] || { echo 0; return; }
    redis-cli -p "$redis_port" info commandstats |
        awk -F'[:=,]' '/^cmdstat_(fcall|evalsha|eval):/ { n += $3 } END { print n + 0 }'
}

# Calls of one command (GET, SET) Redis ran so far, those the scripts make included.
redis_stat() {
    [[ -n $redis_port ]] || { echo 0; return; }
    redis-cli -p "$redis_port" info commandstats | awk -F'[:=,]' -v c="cmdstat_$1" '$1 == c { n = $3 } END { print n + 0 }'
}

free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

redis_port=""
if command -v redis-server >/dev/null; then
    redis_port=$(free_port)
    redis-server --port "$redis_port" --bind 127.0.0.1 --save '' --appendonly no --dir "$TMP" \
        --daemonize yes --pidfile "$TMP/redis.pid" --logfile "$TMP/redis.log" >/dev/null
    for _ in $(seq 100); do [[ -s $TMP/redis.pid ]] && break; sleep 0.05; done
    RPID=$(cat "$TMP/redis.pid")
fi

# name | location body [| more lines in its server] (the zones z* all key on the constant "one")
quota="requests=1000000000 period=1s"
CASES=(
    "plain|empty_gif;"
    "plain + the gcra row's headers (add_header)|add_header RateLimit-Policy '\"z_gcra\";q=1000000000;w=1'; add_header RateLimit '\"z_gcra\";r=1000;t=1'; empty_gif;"
    "limit_req|limit_req zone=lr burst=1000000 nodelay; empty_gif;"
    "ratelimit gcra, headers off|ratelimit zone=z_gcra; ratelimit_headers off; empty_gif;"
)
for a in gcra token leaky sliding fixed log; do CASES+=("ratelimit $a|ratelimit zone=z_$a; empty_gif;"); done
CASES+=("ratelimit gcra, tier (rate and burst from a map)|ratelimit zone=z_tier; empty_gif;")
# Issue 21's operator controls, each beside the row it must cost no more than: the same gcra zone
# in a server that also has a ratelimit_api location (API: off the request path); gcra with
# block= (a block slot looked up per decision); a fixed window of one day, and the same as a
# calendar day in Europe/Berlin (a third field: more lines in the server)
CASES+=("ratelimit gcra, its server with a ratelimit_api location|ratelimit zone=z_gcra; empty_gif;|location /rl-api/ { ratelimit_api write=on; }"
    "ratelimit gcra, block=10m|ratelimit zone=z_block; empty_gif;"
    "ratelimit fixed, period=1d|ratelimit zone=z_fixed1d; empty_gif;"
    "ratelimit fixed, period=day timezone=Europe/Berlin|ratelimit zone=z_calendar; empty_gif;")
CASES+=("ratelimit concurrency=1000000 (a slot taken and given back)|ratelimit zone=z_conc; empty_gif;")
CASES+=("ratelimit gcra, rejected, one key|ratelimit zone=z_rej; ratelimit_log_level info; empty_gif;"
    "ratelimit gcra, rejected, a new key each request|ratelimit zone=z_rejnew quantity=2; ratelimit_log_level info; empty_gif;")
[[ -n $redis_port ]] && CASES+=("ratelimit gcra, Redis|ratelimit zone=z_redis; empty_gif;"
    "ratelimit concurrency=1000000, Redis|ratelimit zone=z_rconc; empty_gif;")
if [[ ${SETTLE:-off} == on ]]; then
    CASES+=("ratelimit gcra, settle=1 (the quantity: nothing to settle)|ratelimit zone=z_gcra settle=1; empty_gif;"
        "ratelimit gcra, quantity=\$settle_one (the map's own cost, as a quantity)|ratelimit zone=z_gcra quantity=\$settle_one; empty_gif;"
        "ratelimit gcra, settle=\$settle_one (a map: 1, the quantity)|ratelimit zone=z_gcra settle=\$settle_one; empty_gif;"
        "ratelimit gcra, settle=2 (charges one unit more)|ratelimit zone=z_gcra settle=2; empty_gif;")
    [[ -n $redis_port ]] && CASES+=("ratelimit gcra, Redis, settle=1|ratelimit zone=z_redis settle=1; empty_gif;"
        "ratelimit gcra, Redis, settle=2|ratelimit zone=z_redis settle=2; empty_gif;")
fi
if [[ -n $redis_port && ${SYNC:-off} == on ]]; then
    CASES+=("ratelimit gcra, Redis, sync=100ms optimistic|ratelimit zone=z_sync; empty_gif;"
        "ratelimit gcra, Redis, sync=100ms lease|ratelimit zone=z_lease; empty_gif;"
        "ratelimit gcra, Redis, a new key each request|ratelimit zone=z_redisnew; empty_gif;"
        "ratelimit gcra, Redis, sync=100ms lease, a new key each request|ratelimit zone=z_leasenew; empty_gif;")
fi

{
    echo "load_module $SO;"
    echo "worker_processes 1; daemon off; master_process off;"
    echo "pid $TMP/nginx.pid; error_log $TMP/error.log warn;"
    echo "events { worker_connections $((CONNS + 256)); }"
    echo "http { access_log off; keepalive_requests 100000000;"
    echo "  client_body_temp_path $TMP; proxy_temp_path $TMP; fastcgi_temp_path $TMP; uwsgi_temp_path $TMP; scgi_temp_path $TMP;"
    echo "  limit_req_zone \$host zone=lr:10m rate=100000000r/s;"
    for a in gcra token leaky; do echo "  ratelimit_zone z_$a key=one $quota burst=1000 algo=$a size=1m;"; done
    for a in sliding fixed; do echo "  ratelimit_zone z_$a key=one $quota algo=$a size=1m;"; done
    echo "  ratelimit_zone z_log key=one requests=1000000 period=1s algo=log size=16m;"
    echo "  map \$host \$tier_rate { default 1000000000/1s; } map \$host \$tier_burst { default 1000; }"
    echo "  ratelimit_zone z_tier key=one rate=\$tier_rate default_rate=1r/s burst=\$tier_burst size=1m;"
    echo "  ratelimit_zone z_conc key=one concurrency=1000000 size=1m;"
    echo "  ratelimit_zone z_rej key=one requests=1 period=1h size=1m;"
    echo "  ratelimit_zone z_rejnew key=\$arg_k requests=1 period=1h size=1m;"
    echo "  ratelimit_zone z_block key=one $quota burst=1000 block=10m size=1m;"
    echo "  ratelimit_zone z_fixed1d key=one requests=1000000000 period=1d algo=fixed size=1m;"
    echo "  ratelimit_zone z_calendar key=one requests=1000000000 period=day timezone=Europe/Berlin algo=fixed size=1m;"
    echo "  map \$host \$settle_one { default 1; }"
    if [[ -n $redis_port ]]; then
        echo "  ratelimit_redis r 127.0.0.1:$redis_port timeout=1s;"
        echo "  ratelimit_zone z_redis key=one $quota burst=1000 redis=r;"
        echo "  ratelimit_zone z_rconc key=one concurrency=1000000 redis=r;"
        if [[ ${SYNC:-off} == on ]]; then
            echo "  ratelimit_zone z_sync key=one $quota burst=1000 redis=r sync=100ms size=1m;"
            echo "  ratelimit_zone z_lease key=one $quota burst=1000 redis=r sync=100ms sync_mode=lease size=1m;"
            echo "  ratelimit_zone z_redisnew key=\$arg_k $quota burst=1000 redis=r;"
            echo "  ratelimit_zone z_leasenew key=\$arg_k $quota burst=1000 redis=r sync=100ms sync_mode=lease size=64m;"
        fi
    fi
    PORTS=()
    for c in "${CASES[@]}"; do
        p=$(free_port); PORTS+=("$p")
        body=${c#*|} extra=""
        [[ $body == *"|"* ]] && { extra=${body#*|}; body=${body%%|*}; }
        echo "  server { listen 127.0.0.1:$p; location / { $body } $extra }"
    done
    [[ ${METRICS:-off} == on ]] && echo "  server { listen 127.0.0.1:$(free_port); location = /metrics { ratelimit_metrics; } }"
    echo "}"
} >"$TMP/nginx.conf"

valgrind --tool=callgrind --callgrind-out-file="$TMP/cg.out" --collect-atstart=no \
    --toggle-collect=ngx_process_events_and_timers \
    "$NGINX_BIN" -p "$TMP" -c "$TMP/nginx.conf" >"$TMP/vg.log" 2>&1 &
VG=$!
for _ in $(seq 200); do curl -s -o /dev/null "http://127.0.0.1:${PORTS[0]}/" && break; sleep 0.1; done

STATS=${SETTLE:-off}
if [[ $STATS == on ]]; then
    echo "| location | Ir/request | vs plain | vs limit_req | Redis script calls/request | GET/request | SET/request |"
    echo "| --- | ---: | ---: | ---: | ---: | ---: | ---: |"
else
    echo "| location | Ir/request | vs plain | vs limit_req | Redis script calls/request |"
    echo "| --- | ---: | ---: | ---: | ---: |"
fi
declare -a IR=() PARTS_OF=()
for i in "${!CASES[@]}"; do
    url="http://127.0.0.1:${PORTS[$i]}/"
    name=${CASES[$i]%%|*} want=200 script=()
    [[ $name == *rejected* ]] && want=429
    [[ $name == *"a new key each request"* ]] && script=(-s "$HERE/random-keys.lua")
    for w in 1 2 3 4 5; do
        code=$(curl -s -o /dev/null -w '%{http_code}' "$url?k=warm$w")
        [[ $code == "$want" || ($want == 429 && $w == 1) ]] || { echo "instructions.sh: $name: status $code" >&2; exit 1; }
    done
    callgrind_control -z "$VG" >/dev/null
    cmds0=$(redis_commands) gets0=$(redis_stat get) sets0=$(redis_stat set)
    if ((${#script[@]})); then
        out=$(wrk -t1 -c"$CONNS" -d"${SECONDS_PER_CASE}s" "${script[@]}" "$url" -- 1000000 "$i" "$PIPELINE" 2>&1)
    elif ((PIPELINE > 1)); then
        out=$(wrk -t1 -c"$CONNS" -d"${SECONDS_PER_CASE}s" -s "$HERE/one-key.lua" "$url" -- "$PIPELINE" 2>&1)
    else
        out=$(wrk -t1 -c"$CONNS" -d"${SECONDS_PER_CASE}s" "$url" 2>&1)
    fi
    rm -f "$TMP"/cg.out.*
    callgrind_control -d "$VG" >/dev/null
    n=$(awk '/requests in/ { print $1 }' <<<"$out")
    cmds=$(( $(redis_commands) - cmds0 )) gets=$(( $(redis_stat get) - gets0 )) sets=$(( $(redis_stat set) - sets0 ))
    non2xx=$(awk '/Non-2xx/ { print $NF }' <<<"$out")
    if [[ $want == 429 ]]; then
        [[ $non2xx == "$n" ]] || { echo "instructions.sh: $name: not every request rejected: $out" >&2; exit 1; }
    else
        [[ $non2xx == "" ]] || { echo "instructions.sh: non-2xx answers: $out" >&2; exit 1; }
    fi
    dump=$(ls -t "$TMP"/cg.out.* | head -1)
    ir=$(awk '/^summary:/ { print $2 }' "$dump")
    IR[$i]=$((ir / n))
    case ${CASES[$i]%%|*} in
        plain | "ratelimit gcra" | "ratelimit gcra, Redis") PARTS_OF+=("${CASES[$i]%%|*}=$TMP/kept.$i:$n"); mv "$dump" "$TMP/kept.$i" ;;
    esac
    per() { [[ -n $redis_port ]] && awk -v c="$1" -v n="$n" 'BEGIN { printf "%.3f", c / n }' || echo -; }
    printf '| %s | %d | %s | %s | %s |' "${CASES[$i]%%|*}" "${IR[$i]}" \
        "$(awk -v a="${IR[0]}" -v b="${IR[$i]}" 'BEGIN { printf "%.3fx", a / b }')" \
        "$( ((i >= 2)) && awk -v a="${IR[2]}" -v b="${IR[$i]}" 'BEGIN { printf "%.3fx", a / b }' || echo -)" "$(per "$cmds")"
    [[ $STATS == on ]] && printf ' %s | %s |' "$(per "$gets")" "$(per "$sets")"
    echo
done
# Issue 21's pairs: a row against the row it is compared with (Ir difference and ratio)
declare -A AT=()
for i in "${!CASES[@]}"; do AT[${CASES[$i]%%|*}]=$i; done
PAIRS=("ratelimit gcra, its server with a ratelimit_api location|ratelimit gcra"
    "ratelimit gcra, block=10m|ratelimit gcra"
    "ratelimit fixed, period=day timezone=Europe/Berlin|ratelimit fixed, period=1d"
    "ratelimit fixed, period=1d|ratelimit fixed")
echo
echo "| location | against | Ir/request | theirs | difference | ratio (theirs / row's) |"
echo "| --- | --- | ---: | ---: | ---: | ---: |"
for pair in "${PAIRS[@]}"; do
    a=${AT[${pair%%|*}]:-} b=${AT[${pair#*|}]:-}
    [[ -n $a && -n $b ]] || continue
    printf '| %s | %s | %d | %d | %+d | %s |\n' "${pair%%|*}" "${pair#*|}" "${IR[$a]}" "${IR[$b]}" \
        $((IR[a] - IR[b])) "$(awk -v a="${IR[$b]}" -v b="${IR[$a]}" 'BEGIN { printf "%.4fx", a / b }')"
done
echo
echo "Ir: instructions executed in user space (nginx, the module, libc), per request, $CONNS keep-alive"
echo "connection(s), $PIPELINE request(s) per write, $SECONDS_PER_CASE s of wrk per location. \"vs\": the baseline's Ir / the row's (the"
echo "throughput ratio that user-space work alone would give)."
if [[ ${PARTS:-off} == on ]]; then
    echo
    echo "Where the worker's instructions go (tests/bench/callgrind_parts.py: each function's own instructions in its"
    echo "part, helpers such as malloc, memcpy and nginx's pools in their callers' parts):"
    echo
    python3 -B "$HERE/callgrind_parts.py" nginx --table "${PARTS_OF[@]}"
fi
