#!/usr/bin/env bash
# Throughput of ngx_http_ratelimit_module on the allowed path, against plain nginx and limit_req,
# with its state in shared memory, in Redis and in a Redis Cluster.
#
# A benchmark, not a test: it prints a Markdown table and whether the targets are met, and never
# fails because of a figure (it exits non-zero only if it cannot set up what it measures).
#
#   tests/bench/run.sh                      (or ./build.sh bench, which builds the module first)
#   DURATION=5 ROUNDS=1 CASES='gcra|^plain$' tests/bench/run.sh
#   CASES='redis|cluster' tests/bench/run.sh          (the Redis and Redis Cluster rows only)
#   CASES='^sync-' tests/bench/run.sh     (the sync=100ms rows, with the rows they are compared with)
#
# Settings (environment):
#   DURATION   seconds measured per case and round            (10)
#   WARMUP     seconds of load before each measurement         (2)
#   ROUNDS     measurements per case; the median is reported   (3)
#   CASES      extended regex on case names (see CASE TABLE); the baselines each selected case
#              is compared with (plain, limit_req of the same key kind) are always kept  (all)
#   CONNS      wrk connections                                 (50)
#   PIPELINE   requests wrk writes at once on a connection (HTTP/1.1 pipelining); 1: one request
#              per write, as before this setting existed (then wrk, not nginx, sets the pace)  (16)
#   LAT_DURATION  seconds of latency probe (latency.py: one connection, one request at a time)
#              run alone after each measurement (0: none)                          (3)
#   LAT_LOADED 1: also run that probe alongside the measured wrk run (the latency under load) (1)
#   KEYS       number of distinct keys of the "1M" rows        (1000000)
#   ZONE_SIZE  size of every shared-memory zone, limit_req's and this module's alike  (256m)
#   FILL       1: before measuring, send every key 1..KEYS once to each many-key zone  (1)
#   FILL_MAX   seconds at most spent filling one zone                     (60)
#   NGINX_BIN  nginx binary                                    (/usr/sbin/nginx)
#   SO         module to load            (build/ngx_http_ratelimit_module.so; copied first)
#   NGINX_CPU, WRK_CPU   CPUs the nginx worker and wrk are pinned to  (0, 1)
#   REDIS_CPU  CPU(s) the standalone redis-server is pinned to (a taskset list); empty: not
#              pinned                                                                (WRK_CPU)
#   REDIS_CLUSTER_CPU  the same for the cluster nodes                         (empty: not pinned)
#   REDIS_BIN, REDIS_CLI   redis-server and redis-cli        (from PATH)
#   KEEP       1: keep the temporary prefix directory (config, error.log, raw wrk output)
#   QUIET_WAIT seconds at most to wait for idle CPUs before each measurement   (60)
#   OTHER_MAX  % of a CPU taken by other work during a run above which the run is redone  (15)
#   RETRIES    how many times at most a disturbed run is redone              (2)
#   MAX_TIME   seconds after which the script stops waiting for idle CPUs and redoing
#              disturbed runs, and just measures (bounds the total time)    (2700)
#
# Method: one nginx (worker_processes 1, pinned to NGINX_CPU, access_log off, keep-alive) serves
# every case, each on its own 127.0.0.1 port with one `location /` (empty_gif), so all cases are
# measured against the same process in the same run. Cases whose "workers" column is above 1
# are served by a second nginx with that many workers, not pinned (there is no CPU to spare for
# pinning on a 2-CPU machine). wrk (-t1, pinned to WRK_CPU) drives one case at a time: a warm-up,
# then the measurement, then (LAT_DURATION) a latency probe alone; the cases are run
# round-robin ROUNDS times so that machine noise spreads over all of them, and the median of the
# rounds is reported. Latency comes from latency.py, not wrk (see there): a probe that sends one
# request at a time on its own connection, alongside the measured run ("under load") and alone
# after it ("alone").
# "one key" rows send GET /x and key on a constant ($server_name); "1M" rows send
# GET /x?k=<random 1..KEYS> (random-keys.lua) and key on $arg_k. Every limit is set so high that
# every request is admitted (except the "rejected" row, whose limit rejects nearly every
# request: 429 is its expected status): we compare the cost of the allowed path (wrk's non-2xx
# count is reported to prove it).
#
# Pipelining (PIPELINE): with one request per write, wrk spends more CPU per request than
# nginx does and runs at 100% of its CPU: the client sets the pace and req/s ratios between cases
# are mostly noise. Writing PIPELINE requests at once (one-key.lua, random-keys.lua; each write
# carries fresh random keys) divides wrk's cost per request, and nginx becomes the bottleneck:
# the "nginx CPU" and "wrk CPU" columns show which side is saturated. wrk's latency figures are
# then meaningless (one sample per write, then distorted by its coordinated-omission
# correction), hence latency.py.
#
# Redis: the Redis rows keep the zone's state in a redis-server started by the case's `start`
# hook (--save '' --appendonly no, in $TMP, on a free port; one server shared by the standalone
# Redis rows, one 1-primary and one 3-primary cluster shared by the cluster rows). nginx talks
# to it with `ratelimit_redis ... timeout=100ms` and `ratelimit_on_error deny`, so a Redis error
# shows as a 503 in the non-2xx column (and as error.log lines, counted too). Redis's CPU time
# is read from /proc/PID/stat (utime + stime, all its threads) before and after the measured run:
# reported as a share of one CPU and as ms of Redis CPU per 1000 checks (checks = requests
# answered during the run; one request, one check). "1M" Redis rows use a quota whose state
# lasts a day (gcra: requests=10 period=1d burst=1000; sliding: requests=1000 period=1d), so that
# Redis really holds ~KEYS keys (a 1s quota would let each key expire between two of its hits,
# and measure key creation and expiry instead); they still admit every request.
#
# Where Redis runs (REDIS_CPU, REDIS_CLUSTER_CPU): on this 2-CPU machine Redis must share a CPU
# with nginx or wrk. Unpinned, the scheduler puts it on either, often on nginx's CPU when wrk's is
# busier, and it then takes CPU time from the nginx worker being measured. Pinned to WRK_CPU (the
# default for the standalone server), the nginx worker keeps its CPU, like a real deployment
# where Redis runs on another host, and the client side (wrk + Redis) shares the other CPU: the
# "wrk CPU" and "Redis CPU" columns show whether that CPU became the bottleneck. Measured both
# ways (2 rounds each, quiet machine, the .so of commit 70dd798): pinned gave the same or higher
# req/s for the Redis rows (one key 0.74x plain pinned vs 0.63x unpinned; 1M keys 0.52x vs
# 0.54x) and less spread.
# Sync rows (sync-*): the zone decides every request in its shared memory (ZONE_SIZE) and
# reconciles with Redis every 100ms (sync_mode=optimistic, or lease), each on a standalone
# redis-server of its own (pinned as REDIS_CPU), so that the Redis commands and Redis CPU per
# 1000 requests (INFO commandstats without INFO itself, INFO cpu used_cpu_sys + used_cpu_user,
# read before and after the measured run) are the case's alone. A table after the main one puts
# each beside gcra in shared memory and in Redis per request, same key kind, same run.
# The cluster nodes are not pinned by default: pinned together to one CPU, 3 primaries could
# only share the CPU 1 primary has, which rules out by construction what the cluster rows look
# for (whether more primaries bring more throughput); unpinned they may spread over both CPUs.
# With 2 CPUs for nginx, wrk and Redis together, the Redis rows are bound by the machine, not
# by nginx: the "CPUs busy" column (all CPUs, irq and softirq included) shows it.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)

DURATION=${DURATION:-10}
WARMUP=${WARMUP:-2}
ROUNDS=${ROUNDS:-3}
CASES=${CASES:-}
CONNS=${CONNS:-50}
PIPELINE=${PIPELINE:-16}
LAT_DURATION=${LAT_DURATION:-3}
LAT_LOADED=${LAT_LOADED:-1}
KEYS=${KEYS:-1000000}
ZONE_SIZE=${ZONE_SIZE:-256m}
FILL=${FILL:-1}
FILL_MAX=${FILL_MAX:-60}
NGINX_BIN=${NGINX_BIN:-/usr/sbin/nginx}
SO=${SO:-$ROOT/build/ngx_http_ratelimit_module.so}
NGINX_CPU=${NGINX_CPU:-0}
WRK_CPU=${WRK_CPU:-1}
REDIS_CPU=${REDIS_CPU-$WRK_CPU}
REDIS_CLUSTER_CPU=${REDIS_CLUSTER_CPU-}
REDIS_BIN=${REDIS_BIN:-redis-server}
REDIS_CLI=${REDIS_CLI:-redis-cli}
KEEP=${KEEP:-0}
OTHER_MAX=${OTHER_MAX:-15}
RETRIES=${RETRIES:-2}
QUIET_WAIT=${QUIET_WAIT:-60}
MAX_TIME=${MAX_TIME:-2700}

START_TIME=$(date +%s)
REPRO="cd $ROOT && DURATION=$DURATION WARMUP=$WARMUP ROUNDS=$ROUNDS CONNS=$CONNS PIPELINE=$PIPELINE LAT_DURATION=$LAT_DURATION LAT_LOADED=$LAT_LOADED KEYS=$KEYS ZONE_SIZE=$ZONE_SIZE FILL=$FILL CASES='$CASES' REDIS_CPU='$REDIS_CPU' REDIS_CLUSTER_CPU='$REDIS_CLUSTER_CPU' NGINX_BIN=$NGINX_BIN SO=$SO tests/bench/run.sh"

say() { printf '%s\n' "$*" >&2; }      # progress, on stderr: stdout is the report
die() { say "run.sh: $*"; exit 1; }

# ------------------------------------------------------------------ CASE TABLE
# One line per case: name, key kind, check kind, nginx workers, snippet command.
#   key kind   one:  GET /x, the limit keys on $server_name (one constant key)
#              many: GET /x?k=<random 1..KEYS> (random-keys.lua), the limit keys on $arg_k
#   check kind what the sanity check expects of one request:
#              plain (200, no RateLimit header), limit_req (200, no RateLimit header),
#              module (200 with the RateLimit headers), module-noheaders (200, no header),
#              module-reject (a second request: 429; the case's rows expect 429 throughout)
#   workers    1: the main nginx (one worker pinned to NGINX_CPU); N > 1: a second nginx with
#              N workers, not pinned (compared with plain of the same key kind and workers)
#   snippet    a function and its arguments (split on blanks); it is called as
#                  FUNCTION PART NAME KEYVAR ARGS...
#              with PART "http" (print the http{}-level lines: zones, upstreams...),
#              "location" (print the body of the case's `location /`), "start" (called once
#              before nginx starts: start a service the case needs, e.g. a redis-server on a
#              port from fresh_ports, in $TMP) or "stop" (called once at exit, even on error or
#              Ctrl-C). NAME is a unique identifier usable in zone names; KEYVAR is the nginx
#              variable to key on. A function prints nothing for a PART it has no use for.
#              "start" runs in the script's own shell (not a subshell): it may set variables
#              (snip_redis records the case's Redis servers in CASE_REDIS).
# To add a case: write a snip_* function below (or reuse one) and add a line here.
CASE_TABLE='
plain                   one   plain             1  snip_plain
plain-headers           one   plain-headers     1  snip_plain headers=rl_gcra
plain-rand              many  plain             1  snip_plain
limit_req               one   limit_req         1  snip_limit_req
limit_req-1M            many  limit_req         1  snip_limit_req
gcra                    one   module            1  snip_module gcra
gcra-1M                 many  module            1  snip_module gcra
gcra-headers-off        one   module-noheaders  1  snip_module gcra headers=off
gcra-1M-headers-off     many  module-noheaders  1  snip_module gcra headers=off
token                   one   module            1  snip_module token
token-1M                many  module            1  snip_module token
token-headers-off       one   module-noheaders  1  snip_module token headers=off
token-1M-headers-off    many  module-noheaders  1  snip_module token headers=off
leaky                   one   module            1  snip_module leaky
leaky-1M                many  module            1  snip_module leaky
leaky-headers-off       one   module-noheaders  1  snip_module leaky headers=off
leaky-1M-headers-off    many  module-noheaders  1  snip_module leaky headers=off
sliding                 one   module            1  snip_module sliding
sliding-1M              many  module            1  snip_module sliding
sliding-headers-off     one   module-noheaders  1  snip_module sliding headers=off
sliding-1M-headers-off  many  module-noheaders  1  snip_module sliding headers=off
fixed                   one   module            1  snip_module fixed
fixed-1M                many  module            1  snip_module fixed
fixed-headers-off       one   module-noheaders  1  snip_module fixed headers=off
fixed-1M-headers-off    many  module-noheaders  1  snip_module fixed headers=off
log                     one   module            1  snip_module log
log-1M                  many  module            1  snip_module log
log-headers-off         one   module-noheaders  1  snip_module log headers=off
log-1M-headers-off      many  module-noheaders  1  snip_module log headers=off
redis-gcra              one   module            1  snip_redis gcra
redis-gcra-1M           many  module            1  snip_redis gcra
redis-gcra-rejected     one   module-reject     1  snip_redis gcra quota=requests=1_period=1h log=info
redis-sliding-1M        many  module            1  snip_redis sliding
sync-gcra               one   module            1  snip_redis gcra sync=100ms
sync-gcra-1M            many  module            1  snip_redis gcra sync=100ms
sync-lease-gcra         one   module            1  snip_redis gcra sync=100ms mode=lease
sync-lease-gcra-1M      many  module            1  snip_redis gcra sync=100ms mode=lease
sync-lease-gcra-near    one   module            1  snip_redis gcra sync=100ms mode=lease quota=requests=300000_period=1s_burst=3000000
cluster1-gcra-1M        many  module            1  snip_redis gcra cluster=1
cluster3-gcra-1M        many  module            1  snip_redis gcra cluster=3
plain-rand-2w           many  plain             2  snip_plain
cluster1-gcra-1M-2w     many  module            2  snip_redis gcra cluster=1
cluster3-gcra-1M-2w     many  module            2  snip_redis gcra cluster=3
'

# Human-readable labels for the table.
label_of() {
    local n=$1 w=""
    [[ $n == *-2w ]] && { w=", 2 nginx workers"; n=${n%-2w}; }
    case $n in
        plain) echo "plain nginx (empty_gif)$w" ;;
        plain-rand) echo "plain nginx, random URLs$w" ;;
        plain-headers) echo "plain nginx + the gcra row's RateLimit headers (add_header)$w" ;;
        limit_req*) echo "limit_req$w" ;;
        *-headers-off) echo "ratelimit ${n%%-*}, ratelimit_headers off$w" ;;
        redis-*-rejected) n=${n#redis-}; echo "ratelimit ${n%-rejected}, Redis, rejected (429)$w" ;;
        sync-lease-*-near) n=${n#sync-lease-}; echo "ratelimit ${n%-near}, Redis, sync=100ms lease, 300000r/s burst=3000000$w" ;;
        sync-lease-*) n=${n#sync-lease-}; echo "ratelimit ${n%-1M}, Redis, sync=100ms lease$w" ;;
        sync-*) n=${n#sync-}; echo "ratelimit ${n%-1M}, Redis, sync=100ms optimistic$w" ;;
        redis-*) n=${n#redis-}; echo "ratelimit ${n%-1M}, Redis$w" ;;
        cluster1-*) n=${n#cluster1-}; echo "ratelimit ${n%-1M}, Redis Cluster of 1 primary$w" ;;
        cluster3-*) n=${n#cluster3-}; echo "ratelimit ${n%-1M}, Redis Cluster of 3 primaries$w" ;;
        *) echo "ratelimit ${n%-1M}$w" ;;
    esac
}

# --------------------------------------------------------------- SNIPPETS
# No limit at all: the baseline.
# Argument headers=ZONE: add, with add_header, the two headers the module sends for zone ZONE
# with gcra's default quota (below), byte for byte: a baseline with the same response size, which
# tells the cost of the module's work from the cost of sending and parsing ~75 more bytes.
snip_plain() {
    local part=$1 arg zone=""
    shift 3
    for arg in "$@"; do [[ $arg == headers=* ]] && zone=${arg#headers=}; done
    [[ $part == location ]] || return 0
    [[ -n $zone ]] && printf "add_header RateLimit-Policy '\"%s\";q=1000000000;w=1';\nadd_header RateLimit '\"%s\";r=1000;t=1';\n" "$zone" "$zone"
    echo "empty_gif;"
}

# limit_req with a rate no benchmark reaches; burst+nodelay because limit_req counts every
# request arriving within one millisecond (nginx's cached clock) as excess: without a burst
# the second request of a millisecond would be rejected, and without nodelay delayed.
# Optional argument rate=R (the sanity control uses 1r/m).
snip_limit_req() {
    local part=$1 name=$2 key=$3 rate=100000000r/s arg
    shift 3
    for arg in "$@"; do [[ $arg == rate=* ]] && rate=${arg#rate=}; done
    case $part in
        http) echo "limit_req_zone $key zone=lr_$name:$ZONE_SIZE rate=$rate;" ;;
        location)
            if [[ $rate == 100000000r/s ]]; then
                echo "limit_req zone=lr_$name burst=1000000 nodelay; empty_gif;"
            else
                echo "limit_req zone=lr_$name; empty_gif;"
            fi ;;
    esac
}

# The default quota of an algorithm, one that no benchmark reaches:
#  - buckets (gcra token leaky): 10^9 requests per second, burst 1000;
#  - windows (sliding fixed): 10^9 requests per 1s window;
#  - log keeps a ring of `requests` 8-byte timestamps per key, so the quota decides the slot
#    size: one key: 10^6 per second (an 8 MB ring, ~10x what one CPU serves); 1M keys: 10 per
#    second per key (136-byte slots; a key is drawn ~0.1 times a second, so 10 in one second
#    practically never happens: the non-2xx column shows it).
default_quota() {  # default_quota ALGO KEYVAR
    case $1 in
        gcra|token|leaky) echo "requests=1000000000 period=1s burst=1000" ;;
        sliding|fixed) echo "requests=1000000000 period=1s" ;;
        log) if [[ $2 == '$arg_k' ]]; then echo "requests=10 period=1s"
             else echo "requests=1000000 period=1s"; fi ;;
    esac
}

# This module, one algorithm, state in shared memory.
# Extra arguments: headers=off|on|legacy|all, quota=requests=.._period=.. (replaces the default;
# underscores stand for blanks, since the table splits on blanks).
snip_module() {
    local part=$1 name=$2 key=$3 algo=$4 headers="" quota="" arg
    shift 4
    for arg in "$@"; do
        case $arg in
            headers=*) headers=${arg#headers=} ;;
            quota=*) quota=${arg#quota=}; quota=${quota//_/ } ;;
        esac
    done
    [[ -n $quota ]] || quota=$(default_quota "$algo" "$key")
    case $part in
        http) echo "ratelimit_zone rl_$name key=$key $quota size=$ZONE_SIZE algo=$algo;" ;;
        location)
            echo "ratelimit zone=rl_$name;"
            [[ -n $headers ]] && echo "ratelimit_headers $headers;"
            echo "empty_gif;" ;;
    esac
}

# This module, one algorithm, state in Redis: a standalone redis-server shared by every such
# case, or (cluster=N) a Redis Cluster of N primaries shared by the cases with the same N.
# Quota: one key: the algorithm's default (above); many keys: state that lasts a day, so that
# Redis holds ~KEYS keys (see the header comment). quota=.. replaces it, as in snip_module.
# log=LEVEL: ratelimit_log_level LEVEL (the rejected row: info, below the error log's level for
# requests, notice: the row measures rejecting, not writing one error.log line per request).
# The zone's shared memory only serves ratelimit_on_error local, unused here: 1m.
# sync=TIME [mode=lease]: the zone decides in its shared memory and reconciles with Redis every
# TIME (sync_mode=optimistic unless mode= says otherwise), on a standalone server of its own.
snip_redis() {
    local part=$1 name=$2 key=$3 algo=$4 cluster=0 quota="" log="" sync="" mode="" arg srv size=1m
    shift 4
    for arg in "$@"; do
        case $arg in
            cluster=*) cluster=${arg#cluster=} ;;
            quota=*) quota=${arg#quota=}; quota=${quota//_/ } ;;
            log=*) log=${arg#log=} ;;
            sync=*) sync=${arg#sync=} ;;
            mode=*) mode=${arg#mode=} ;;
        esac
    done
    if [[ -z $quota ]]; then
        if [[ $key == '$arg_k' ]]; then
            case $algo in
                gcra|token|leaky) quota="requests=10 period=1d burst=1000" ;;
                *) quota="requests=1000 period=1d" ;;
            esac
        else
            quota=$(default_quota "$algo" "$key")
        fi
    fi
    srv=standalone
    ((cluster > 0)) && srv=cluster$cluster
    if [[ -n $sync ]]; then
        # decided in shared memory (ZONE_SIZE, as the shared-memory rows); a server of its own, so
        # that its Redis commands and CPU are the case's alone (idle sync zones still send rounds)
        srv=sync_$name size=$ZONE_SIZE
        quota="$quota sync=$sync${mode:+ sync_mode=$mode}"
    fi
    case $part in
        start)
            redis_start "$srv" "$cluster"
            CASE_REDIS[$name]=$srv
            if [[ -n $sync ]]; then SYNC_CASE[$name]=1; fi ;;
        stop) redis_stop "$srv" ;;
        http)
            if ((cluster > 0)); then
                echo "ratelimit_redis r_$name cluster $(redis_addrs "$srv") timeout=100ms;"
            else
                echo "ratelimit_redis r_$name $(redis_addrs "$srv") timeout=100ms;"
            fi
            echo "ratelimit_zone rl_$name key=$key $quota size=$size algo=$algo redis=r_$name;" ;;
        location)
            echo "ratelimit zone=rl_$name;"
            echo "ratelimit_on_error deny;"
            [[ -n $log ]] && echo "ratelimit_log_level $log;"
            echo "empty_gif;" ;;
    esac
}

# ------------------------------------------------------------------ HELPERS
TMP=""
WRK_PID=""
PROBE_PID=""
declare -A NG_MASTER=() NG_WORKERS=()   # nginx instance (its worker count) -> master pid, worker pids
declare -A CASE_REDIS=()                # case's zone name -> its Redis server (a key of RSRV_*)
declare -A SYNC_CASE=()                 # case's zone name -> 1 for a zone with sync=
declare -A RSRV_PORTS=() RSRV_PIDS=()   # Redis server -> ports, pids (one per node)
declare -A USED_PORTS=()

cleanup() {
    local rc=$?
    trap - EXIT INT TERM
    if [[ -n $WRK_PID ]]; then kill "$WRK_PID" 2>/dev/null || true; fi
    if [[ -n $PROBE_PID ]]; then kill "$PROBE_PID" 2>/dev/null || true; fi
    stop_nginx
    run_hooks stop || true
    if [[ -n $TMP && -d $TMP ]]; then
        if [[ $KEEP == 1 ]]; then say "kept $TMP"; else rm -rf "$TMP"; fi
    fi
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

stop_nginx() {
    local w m i
    for w in "${!NG_MASTER[@]}"; do
        m=${NG_MASTER[$w]}
        kill -QUIT "$m" 2>/dev/null || true
        for i in $(seq 50); do kill -0 "$m" 2>/dev/null || break; sleep 0.1; done
        if kill -0 "$m" 2>/dev/null; then kill -KILL "$m" 2>/dev/null || true; fi
        for i in ${NG_WORKERS[$w]:-}; do kill -KILL "$i" 2>/dev/null || true; done
        unset "NG_MASTER[$w]"
    done
}

# run_hooks start|stop: the start/stop part of every selected case's snippet (see CASE TABLE).
HOOKS_STARTED=0
run_hooks() {
    local i s
    [[ $1 == stop && $HOOKS_STARTED == 0 ]] && return 0
    [[ $1 == start ]] && HOOKS_STARTED=1
    for i in "${SEL[@]}"; do
        read -r -a s <<<"${SNIP[$i]}"
        "${s[0]}" "$1" "$(zname "${NAMES[$i]}")" "$(keyvar_of "${KIND[$i]}")" "${s[@]:1}" >/dev/null
    done
}

# N free TCP ports on 127.0.0.1 (held all at once while choosing, so they are distinct).
free_ports() {
    python3 - "$1" <<'PY' 2>/dev/null || perl -MIO::Socket::INET -e '
        my @s = map { IO::Socket::INET->new(LocalAddr => "127.0.0.1", LocalPort => 0, Listen => 1) or die } 1 .. $ARGV[0];
        print join(" ", map { $_->sockport } @s), "\n";' "$1"
import socket, sys
socks = []
for _ in range(int(sys.argv[1])):
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    socks.append(s)
print(" ".join(str(s.getsockname()[1]) for s in socks))
PY
}
# fresh_ports N: sets FRESH to N free ports that no earlier call handed out (those may not be
# bound yet: nginx starts after the Redis servers).
fresh_ports() {
    local try p ok
    for try in $(seq 20); do
        read -r -a FRESH <<<"$(free_ports "$1")"
        ((${#FRESH[@]} == $1)) || continue
        ok=1
        for p in "${FRESH[@]}"; do [[ -n ${USED_PORTS[$p]:-} ]] && ok=0; done
        if ((ok)); then
            for p in "${FRESH[@]}"; do USED_PORTS[$p]=1; done
            return 0
        fi
    done
    die "cannot find $1 free ports"
}

median() {  # numbers on stdin, one per line ("nan" and "-" ignored)
    grep -Ev '^(nan|-)?$' | sort -g | awk '{a[NR]=$1} END { if (NR == 0) print "nan"; else if (NR % 2) print a[(NR+1)/2]; else print (a[NR/2]+a[NR/2+1])/2 }'
}

# CPU time (in clock ticks) of processes: utime + stime (fields 14, 15 of /proc/PID/stat, the
# whole thread group; the comm field may hold spaces, so count from the closing parenthesis).
# proc_ticks PID...: one number per process, on one line; ticks_sum PID...: their sum.
proc_ticks() {
    local p f=()
    for p in "$@"; do f+=("/proc/$p/stat"); done
    ((${#f[@]})) || { echo; return 0; }
    awk '{ sub(/.*\) /, ""); printf "%s%d", (NR > 1 ? " " : ""), $12 + $13 } END { print "" }' "${f[@]}"
}
ticks_sum() { proc_ticks "$@" | awk '{ for (i = 1; i <= NF; i++) n += $i } END { print n + 0 }'; }
# cpu_ticks CPU...: "busy softirq" ticks of those CPUs together, from /proc/stat: busy is user
# nice system steal (irq and softirq apart: the loopback traffic of the benchmark itself)
cpu_ticks() {
    awk -v list=" $* " '$1 ~ /^cpu[0-9]+$/ && index(list, " " substr($1, 4) " ") {
        n += $2 + $3 + $4 + $9; s += $7 + $8 } END { print n + 0, s + 0 }' /proc/stat
}
# CPU seconds (user + system) of the children this shell has waited for: wrk's, once reaped.
# `times` must run in this shell, not in a $(...) subshell (a fork starts with zero counts).
children_cpu() {
    times >"$TMP/times"
    awk 'NR == 2 { t = 0; for (i = 1; i <= 2; i++) { split($i, p, "m"); sub(/s$/, "", p[2]); t += p[1] * 60 + p[2] } print t }' "$TMP/times"
}

# latency.py's p99 (ms) from its output "count p50 p90 p99 p999 max"
probe_p99() { awk 'NF >= 4 && $1 > 0 { print $4; f = 1 } END { if (!f) print "nan" }' "$1" 2>/dev/null || echo nan; }
# latency_probe OUTFILE SECONDS CASE-INDEX: latency.py on the case's port, pinned to WRK_CPU
latency_probe() {
    local k=()
    [[ ${KIND[$3]} == many ]] && k=("$KEYS")
    timeout -k 5 $(($2 + 30)) taskset -c "$WRK_CPU" python3 "$HERE/latency.py" "${PORT[${NAMES[$3]}]}" "$2" "${k[@]}" >"$1" 2>&1
}
wrk_rps() { awk '/^Requests\/sec:/ { print $2; f = 1 } END { if (!f) print 0 }' "$1"; }
wrk_requests() { awk '/ requests in / { print $1; f = 1 } END { if (!f) print 0 }' "$1"; }
wrk_non2xx() { awk '/Non-2xx or 3xx responses:/ { n += $NF } END { print n + 0 }' "$1"; }
wrk_sockerr() { awk '/Socket errors:/ { gsub(/,/, ""); n += $4 + $6 + $8 + $10 } END { print n + 0 }' "$1"; }

# run_wrk OUTFILE SECONDS CONNS URL [SCRIPT [SCRIPT ARGS...]]: wrk pinned to WRK_CPU, in the
# background so that a signal reaches the trap at once; `timeout` bounds a stuck wrk.
run_wrk() {
    local out=$1 secs=$2 conns=$3 url=$4 script=${5:-}
    local cmd=(timeout -k 5 $((secs + 30)) taskset -c "$WRK_CPU" wrk -t1 -c"$conns" -d"${secs}s")
    if [[ -n $script ]]; then
        shift 5
        cmd+=(-s "$script" "$url" -- "$@")
    else
        cmd+=("$url")
    fi
    "${cmd[@]}" >"$out" 2>&1 &
    WRK_PID=$!
    wait "$WRK_PID" || true
    WRK_PID=""
}

# curl one request, print "STATUS RATELIMIT-HEADER" (the header empty when absent)
probe() {
    curl -s -o /dev/null -D - --max-time 5 "$1" | tr -d '\r' |
        awk 'NR == 1 { s = $2 } tolower($1) == "ratelimit:" { sub(/^[^:]*: */, ""); h = $0 } END { print s, h }'
}

# ------------------------------------------------------------------ REDIS
# redis_cpu SERVER: the CPUs it is pinned to (REDIS_CPU or REDIS_CLUSTER_CPU), empty if not
redis_cpu() { [[ $1 == cluster* ]] && echo "$REDIS_CLUSTER_CPU" || echo "$REDIS_CPU"; }
# redis_spawn CPUS DIR PORT [ARGS...]: a redis-server (pinned to CPUS if not empty) in DIR;
# prints its pid.
redis_spawn() {
    local cpus=$1 dir=$2 port=$3 pin=() i
    shift 3
    mkdir -p "$dir"
    [[ -n $cpus ]] && pin=(taskset -c "$cpus")
    "${pin[@]}" "$REDIS_BIN" --port "$port" --bind 127.0.0.1 --save '' --appendonly no --dir "$dir" \
        --daemonize yes --pidfile "$dir/redis.pid" --logfile "$dir/redis.log" "$@" >/dev/null ||
        die "redis-server failed to start on port $port (log: $dir/redis.log)"
    for i in $(seq 100); do
        [[ -s $dir/redis.pid ]] && [[ $("$REDIS_CLI" -p "$port" ping 2>/dev/null) == PONG ]] && break
        sleep 0.05
    done
    [[ $("$REDIS_CLI" -p "$port" ping 2>/dev/null) == PONG ]] ||
        die "redis-server on port $port does not answer: $(tail -3 "$dir/redis.log")"
    cat "$dir/redis.pid"
}

# redis_start SERVER N: the standalone server (N = 0) or a cluster of N primaries, once.
redis_start() {
    local srv=$1 n=$2 ports=() pids=() j out ok
    [[ -n ${RSRV_PORTS[$srv]:-} ]] && return 0
    command -v "$REDIS_BIN" >/dev/null || die "$REDIS_BIN is not installed (redis-server)"
    command -v "$REDIS_CLI" >/dev/null || die "$REDIS_CLI is not installed (redis-tools)"
    if ((n == 0)); then
        fresh_ports 1
        RSRV_PORTS[$srv]=${FRESH[0]}
        RSRV_PIDS[$srv]=$(redis_spawn "$(redis_cpu "$srv")" "$TMP/redis-$srv" "${FRESH[0]}")
    else
        # Each node: a client port and its own cluster bus port, both chosen free (the default
        # bus port, port + 10000, may be taken or beyond 65535).
        fresh_ports $((2 * n))
        for ((j = 0; j < n; j++)); do
            ports+=("${FRESH[$((2 * j))]}")
            RSRV_PORTS[$srv]="${ports[*]}"   # set early, so that a failure below still stops them
            pids+=("$(redis_spawn "$(redis_cpu "$srv")" "$TMP/redis-$srv-$j" "${FRESH[$((2 * j))]}" --cluster-enabled yes \
                --cluster-config-file nodes.conf --cluster-node-timeout 2000 --cluster-port "${FRESH[$((2 * j + 1))]}")")
            RSRV_PIDS[$srv]="${pids[*]}"
        done
        if ((n == 1)); then
            # redis-cli --cluster create wants 3 primaries at least: one node takes every slot.
            "$REDIS_CLI" -p "${ports[0]}" cluster addslotsrange 0 16383 >/dev/null ||
                die "CLUSTER ADDSLOTSRANGE failed on port ${ports[0]}"
        else
            out=$("$REDIS_CLI" --cluster create $(printf '127.0.0.1:%s ' "${ports[@]}") --cluster-yes 2>&1) ||
                die "redis-cli --cluster create failed: $out"
            [[ $out == *"All 16384 slots covered"* ]] || die "redis-cli --cluster create: $out"
        fi
        for j in $(seq 200); do
            ok=1
            for p in "${ports[@]}"; do
                "$REDIS_CLI" -p "$p" cluster info 2>/dev/null | grep -q 'cluster_state:ok' || ok=0
            done
            ((ok)) && break
            sleep 0.1
        done
        ((ok)) || die "cluster $srv (ports ${ports[*]}) did not reach cluster_state:ok"
    fi
    say "== started Redis $srv: port(s) ${RSRV_PORTS[$srv]}, pid(s) ${RSRV_PIDS[$srv]}, $(
        [[ -n $(redis_cpu "$srv") ]] && echo "pinned to CPU $(redis_cpu "$srv")" || echo "not pinned")"
}

redis_stop() {
    local srv=$1 p i
    [[ -n ${RSRV_PIDS[$srv]:-} ]] || return 0
    for p in ${RSRV_PIDS[$srv]}; do kill -TERM "$p" 2>/dev/null || true; done
    for p in ${RSRV_PIDS[$srv]}; do
        for i in $(seq 50); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
        kill -KILL "$p" 2>/dev/null || true
    done
    unset "RSRV_PIDS[$srv]" "RSRV_PORTS[$srv]"
}

redis_addrs() { local p; for p in ${RSRV_PORTS[$1]}; do printf '127.0.0.1:%s ' "$p"; done | sed 's/ $//'; }
# script calls (EVAL/EVALSHA/FCALL and their _RO forms) that the server's nodes have run
redis_script_calls() {
    local p
    for p in ${RSRV_PORTS[$1]}; do "$REDIS_CLI" -p "$p" info commandstats 2>/dev/null; done | tr -d '\r' |
        awk -F'[:=,]' '$1 ~ /^cmdstat_(eval|evalsha|eval_ro|evalsha_ro|fcall|fcall_ro)$/ { n += $3 } END { print n + 0 }'
}
# every command the server's nodes have run but INFO (which this script sends), and their CPU
# time as INFO cpu says (used_cpu_sys + used_cpu_user, seconds)
redis_commands() {
    local p
    for p in ${RSRV_PORTS[$1]}; do "$REDIS_CLI" -p "$p" info commandstats 2>/dev/null; done | tr -d '\r' |
        awk -F'[:=,]' '$1 ~ /^cmdstat_/ && $1 != "cmdstat_info" { n += $3 } END { print n + 0 }'
}
redis_info_cpu() {
    local p
    for p in ${RSRV_PORTS[$1]}; do "$REDIS_CLI" -p "$p" info cpu 2>/dev/null; done | tr -d '\r' |
        awk -F: '$1 == "used_cpu_sys" || $1 == "used_cpu_user" { t += $2 } END { printf "%.6f\n", t }'
}
redis_dbsizes() { local p; for p in ${RSRV_PORTS[$1]}; do "$REDIS_CLI" -p "$p" dbsize 2>/dev/null; done | paste -sd/; }
# every Redis pid (subtracted from "other CPU": they are part of the benchmark)
all_redis_pids() { local s; for s in "${!RSRV_PIDS[@]}"; do printf '%s ' ${RSRV_PIDS[$s]}; done; }

# ------------------------------------------------------------------ SETUP
command -v wrk >/dev/null || die "wrk is not installed (./build.sh bench installs it)"
command -v taskset >/dev/null || die "taskset is not installed (util-linux)"
command -v curl >/dev/null || die "curl is not installed"
[[ -x $NGINX_BIN ]] || die "no nginx at $NGINX_BIN"
[[ -f $SO ]] || die "no module at $SO (./build.sh build)"
((PIPELINE >= 1)) || die "PIPELINE must be 1 or more"
ncpu=$(nproc)
((NGINX_CPU < ncpu && WRK_CPU < ncpu)) || die "need CPUs $NGINX_CPU and $WRK_CPU, have $ncpu"
[[ $NGINX_CPU != "$WRK_CPU" ]] || say "warning: nginx and wrk share CPU $NGINX_CPU"
ALL_CPUS=$(seq -s' ' 0 $((ncpu - 1)))

# Parse the case table and select the cases. A selected case keeps its baselines so that its
# ratios can be computed: plain of its key kind and workers, limit_req of its key kind.
NAMES=() KIND=() CHECK=() WORKERS=() SNIP=()
while read -r name kind check workers snip; do
    [[ -n ${name:-} ]] || continue
    NAMES+=("$name") KIND+=("$kind") CHECK+=("$check") WORKERS+=("$workers") SNIP+=("$snip")
done <<<"$CASE_TABLE"
plain_of() {  # plain_of KIND WORKERS: the plain case with those, or nothing
    local n
    n=$([[ $1 == one ]] && echo plain || echo plain-rand)
    (($2 > 1)) && n="$n-${2}w"
    printf '%s\n' "${NAMES[@]}" | grep -qx -- "$n" && echo "$n"
    return 0
}
# sync_bases CASE: for a sync-* case, the shared-memory and per-request Redis cases of its
# algorithm and key kind ("gcra redis-gcra" for sync-lease-gcra)
sync_bases() {
    local n=$1
    [[ $n == sync-* ]] || return 0
    n=${n#sync-}; n=${n#lease-}; n=${n%-near}
    echo "$n redis-$n"
}
lr_of() { (($2 == 1)) && { [[ $1 == one ]] && echo limit_req || echo limit_req-1M; }; return 0; }
declare -A WANT=()
for i in "${!NAMES[@]}"; do
    if [[ -z $CASES ]] || grep -Eq -- "$CASES" <<<"${NAMES[$i]}"; then
        WANT[${NAMES[$i]}]=1
        b=$(plain_of "${KIND[$i]}" "${WORKERS[$i]}"); [[ -n $b ]] && WANT[$b]=1
        b=$(lr_of "${KIND[$i]}" "${WORKERS[$i]}")
        [[ ${CHECK[$i]} == module* && -n $b ]] && WANT[$b]=1
        # one-key rows with headers also compare with plain + the same headers
        [[ ${CHECK[$i]} == module && ${KIND[$i]} == one && ${WORKERS[$i]} == 1 ]] && WANT[plain-headers]=1
        # sync rows compare with the same algorithm in shared memory and in Redis per request
        for b in $(sync_bases "${NAMES[$i]}"); do WANT[$b]=1; done
    fi
done
SEL=()
for i in "${!NAMES[@]}"; do [[ -n ${WANT[${NAMES[$i]}]:-} ]] && SEL+=("$i"); done
((${#SEL[@]})) || die "CASES='$CASES' selects no case"
declare -A IDX=()
for i in "${SEL[@]}"; do IDX[${NAMES[$i]}]=$i; done
# the nginx instances: 1 (always: it serves the sanity controls) and every other worker count
INSTANCES=$(printf '%s\n' 1 $(for i in "${SEL[@]}"; do echo "${WORKERS[$i]}"; done) | sort -un | paste -sd' ')

TMP=$(mktemp -d "${TMPDIR:-/tmp}/rlbench.XXXXXX")
chmod 755 "$TMP"
mkdir -p "$TMP/out"
# Load a private copy: build.sh rewrites build/*.so in place, which must not touch a running nginx.
cp "$SO" "$TMP/ngx_http_ratelimit_module.so"
SO_SHA=$(sha256sum "$SO" | cut -c1-12)
SO_TIME=$(date -r "$SO" '+%Y-%m-%d %H:%M:%S')
# the source tree when the run starts (commits may land while it runs)
git_rev=$(git -C "$ROOT" log -1 --format='%h (%cd)' --date=format:'%Y-%m-%d %H:%M' 2>/dev/null || echo '?')
git -C "$ROOT" status --porcelain -- src config 2>/dev/null | grep -q . && git_rev="$git_rev + uncommitted src"

# Ports: one per case, plus two sanity controls (limit_req and this module at a tiny rate).
fresh_ports $((${#SEL[@]} + 2))
declare -A PORT=()
n=0
for i in "${SEL[@]}"; do PORT[${NAMES[$i]}]=${FRESH[$n]}; n=$((n + 1)); done
CTL_LR_PORT=${FRESH[$n]}
CTL_RL_PORT=${FRESH[$((n + 1))]}

keyvar_of() { [[ $1 == one ]] && echo '$server_name' || echo '$arg_k'; }
zname() { echo "${1//-/_}"; }     # case name -> identifier for zone names
keys_label() { awk -v k="$KEYS" 'BEGIN { if (k % 1000000 == 0) print k / 1000000 "M"; else print k }'; }

# nginx's worker_cpu_affinity mask: the bit of NGINX_CPU, rightmost is CPU 0
mask="1"
for ((j = 0; j < NGINX_CPU; j++)); do mask="${mask}0"; done

# gen_conf W: the configuration of the nginx instance with W workers (its cases only)
gen_conf() {
    local w=$1 d="$TMP/ng$1" i s name
    echo "load_module $TMP/ngx_http_ratelimit_module.so;"
    [[ $(id -u) -eq 0 ]] && echo "user nobody nogroup;"
    echo "worker_processes $w;"
    ((w == 1)) && echo "worker_cpu_affinity $mask;"
    cat <<EOF
daemon on;
master_process on;
pid $d/nginx.pid;
error_log $d/error.log info;    # info: the module logs each zone's capacity at start

events {
    worker_connections 4096;
}

http {
    access_log off;
    error_log $d/error.log notice;  # requests: notice (the info level above is for start-up)
    keepalive_timeout 75s;
    keepalive_requests 1000000000;  # a wrk connection lives for a whole run
    default_type application/octet-stream;
    client_body_temp_path $d/client_body_temp;
    proxy_temp_path $d/proxy_temp;
    fastcgi_temp_path $d/fastcgi_temp;
    uwsgi_temp_path $d/uwsgi_temp;
    scgi_temp_path $d/scgi_temp;

EOF
    for i in "${SEL[@]}"; do
        ((${WORKERS[$i]} == w)) || continue
        read -r -a s <<<"${SNIP[$i]}"
        name=$(zname "${NAMES[$i]}")
        "${s[0]}" http "$name" "$(keyvar_of "${KIND[$i]}")" "${s[@]:1}" | sed 's/^/    /'
    done
    if ((w == 1)); then
        # Controls: the same snippets at a rate a second request exceeds, to prove both limiters act.
        ZONE_SIZE=1m snip_limit_req http ctl '$server_name' rate=1r/m | sed 's/^/    /'
        ZONE_SIZE=1m snip_module http ctl '$server_name' gcra 'quota=requests=1_period=1h' | sed 's/^/    /'
    fi
    echo
    for i in "${SEL[@]}"; do
        ((${WORKERS[$i]} == w)) || continue
        read -r -a s <<<"${SNIP[$i]}"
        name=$(zname "${NAMES[$i]}")
        echo "    server {  # ${NAMES[$i]}"
        echo "        listen 127.0.0.1:${PORT[${NAMES[$i]}]};"
        echo "        server_name bench;"
        echo "        location / {"
        "${s[0]}" location "$name" "$(keyvar_of "${KIND[$i]}")" "${s[@]:1}" | sed 's/^/            /'
        echo "        }"
        echo "    }"
    done
    if ((w == 1)); then
        echo "    server { listen 127.0.0.1:$CTL_LR_PORT; server_name bench; location / {"
        snip_limit_req location ctl '$server_name' rate=1r/m | sed 's/^/        /'
        echo "    } }"
        echo "    server { listen 127.0.0.1:$CTL_RL_PORT; server_name bench; location / {"
        snip_module location ctl '$server_name' gcra | sed 's/^/        /'
        echo "    } }"
    fi
    echo "}"
}

run_hooks start
for w in $INSTANCES; do
    d="$TMP/ng$w"
    mkdir -p "$d"
    chmod 755 "$d"
    gen_conf "$w" >"$d/nginx.conf"
    say "== starting nginx with $w worker(s) ($d/nginx.conf)"
    "$NGINX_BIN" -t -q -p "$d/" -c "$d/nginx.conf" -e "$d/error.log" ||
        die "nginx -t failed (config in $d/nginx.conf; KEEP=1 keeps it)"
    "$NGINX_BIN" -p "$d/" -c "$d/nginx.conf" -e "$d/error.log" || die "nginx failed to start"
    for _ in $(seq 100); do
        if [[ -s $d/nginx.pid ]]; then
            NG_MASTER[$w]=$(cat "$d/nginx.pid")
            NG_WORKERS[$w]=$(pgrep -P "${NG_MASTER[$w]}" | paste -sd' ' || true)
            (($(wc -w <<<"${NG_WORKERS[$w]}") == w)) && break
        fi
        sleep 0.1
    done
    (($(wc -w <<<"${NG_WORKERS[$w]:-}") == w)) || die "nginx workers did not start: $(tail -5 "$d/error.log")"
done

# ------------------------------------------------------------------ SANITY
# Each case must really exercise what it claims, or its row means nothing: abort otherwise.
SANITY=()
bad=0
check() {  # check DESCRIPTION OK(0/1)
    if [[ $2 == 1 ]]; then SANITY+=("ok    $1"); else SANITY+=("FAIL  $1"); bad=1; fi
}
r1=$(probe "http://127.0.0.1:$CTL_LR_PORT/x"); r2=$(probe "http://127.0.0.1:$CTL_LR_PORT/x")
check "limit_req control (rate=1r/m): ${r1%% *} then ${r2%% *} (want 200 then 503)" \
    "$([[ ${r1%% *} == 200 && ${r2%% *} == 503 ]] && echo 1 || echo 0)"
r1=$(probe "http://127.0.0.1:$CTL_RL_PORT/x"); r2=$(probe "http://127.0.0.1:$CTL_RL_PORT/x")
check "ratelimit control (requests=1 period=1h): ${r1%% *} then ${r2%% *} (want 200 then 429)" \
    "$([[ ${r1%% *} == 200 && ${r2%% *} == 429 ]] && echo 1 || echo 0)"
for i in "${SEL[@]}"; do
    name=${NAMES[$i]}
    z=$(zname "$name")
    url="http://127.0.0.1:${PORT[$name]}/x"
    [[ ${KIND[$i]} == many ]] && url="$url?k=1"
    srv=${CASE_REDIS[$z]:-}
    [[ -n $srv ]] && calls0=$(redis_script_calls "$srv")
    r=$(probe "$url")
    [[ ${CHECK[$i]} == module-reject ]] && r=$(probe "$url")   # the first may be admitted
    st=${r%% *} hdr=""
    [[ $r == *" "* ]] && hdr=${r#* }
    case ${CHECK[$i]} in
        module) ok=$([[ $st == 200 && $hdr == *"\"rl_$z\""* ]] && echo 1 || echo 0)
                want="200 with RateLimit of zone rl_$z" ;;
        plain-headers) ok=$([[ $st == 200 && $hdr == *'"rl_gcra"'* ]] && echo 1 || echo 0)
                want="200 with the RateLimit header of add_header" ;;
        module-reject) ok=$([[ $st == 429 && $hdr == *"\"rl_$z\""* ]] && echo 1 || echo 0)
                want="429 with RateLimit of zone rl_$z, on a second request" ;;
        *) ok=$([[ $st == 200 && -z $hdr ]] && echo 1 || echo 0)
           want="200 without RateLimit" ;;
    esac
    check "$name: $st${hdr:+ RateLimit: $hdr} (want $want)" "$ok"
    if [[ -n $srv ]]; then
        [[ -n ${SYNC_CASE[$z]:-} ]] && sleep 0.5    # a sync zone sends at its next round
        calls=$(($(redis_script_calls "$srv") - calls0))
        check "$name: Redis $srv ran $calls script call(s) for it (want >= 1)" "$((calls >= 1 ? 1 : 0))"
    fi
done
# Capacity of the module's shared-memory zones as the module logs it (capacity, not usage).
CAPACITY=()
while IFS= read -r line; do CAPACITY+=("$line"); done < <(
    grep -ho 'ratelimit zone "rl_[^"]*": [0-9]* keys of [0-9]* bytes' "$TMP"/ng*/error.log | grep -v '"rl_ctl"' | sort -u)
for line in "${CAPACITY[@]}"; do
    z=$(sed 's/^ratelimit zone "rl_\([^"]*\)".*/\1/' <<<"$line")
    # a Redis zone: its shared memory is unused here (unless it syncs: it decides there)
    [[ -n ${CASE_REDIS[$z]:-} && -z ${SYNC_CASE[$z]:-} ]] && continue
    if [[ $line == *_1M[\"_]* ]]; then
        cap=$(awk '{ print $4 }' <<<"$line")
        check "capacity: $line (want >= $KEYS)" "$([[ $cap -ge $KEYS ]] && echo 1 || echo 0)"
    fi
done
printf '%s\n' "${SANITY[@]}" >&2
((bad == 0)) || die "sanity check failed: the figures would not mean what they claim (KEEP=1 keeps $TMP)"

# ------------------------------------------------------------------ FILL
# Send each key 1..KEYS once to every many-key zone (limit_req's and this module's), so that
# the "1M" rows measure lookups in a zone holding ~KEYS keys, not inserts into a filling one.
FILLED=()
if [[ $FILL == 1 ]]; then
    for i in "${SEL[@]}"; do
        name=${NAMES[$i]}
        [[ ${KIND[$i]} == many && ${CHECK[$i]} != plain ]] || continue
        sent=0 next=1 t0=$(date +%s) non2xx=0
        while ((sent < KEYS && $(date +%s) - t0 < FILL_MAX)); do
            left=$(((KEYS - sent) / 60000 + 1)); ((left > 5)) && left=5
            run_wrk "$TMP/out/fill-$name" "$left" "$CONNS" "http://127.0.0.1:${PORT[$name]}/" \
                "$HERE/walk-keys.lua" "$KEYS" "$next" "$PIPELINE"
            got=$(wrk_requests "$TMP/out/fill-$name")
            ((got > 0)) || die "fill of $name failed: $(cat "$TMP/out/fill-$name")"
            non2xx=$((non2xx + $(wrk_non2xx "$TMP/out/fill-$name")))
            sent=$((sent + got)); next=$(((next - 1 + got) % KEYS + 1))
        done
        srv=${CASE_REDIS[$(zname "$name")]:-}
        extra=""
        [[ -n $srv ]] && extra=", keys in Redis $srv now (per node): $(redis_dbsizes "$srv")"
        say "== filled $name: $sent requests over keys 1..$KEYS in $(($(date +%s) - t0))s, non-2xx $non2xx$extra"
        FILLED+=("$name: $sent requests, non-2xx $non2xx$extra")
    done
fi

# ------------------------------------------------------------------ MEASURE
# load_case OUTFILE SECONDS CASE-INDEX [CONNS DEPTH]: the case's load: GET /x, or random keys
# with a fresh seed; DEPTH requests per write (PIPELINE by default)
load_case() {
    local url="http://127.0.0.1:${PORT[${NAMES[$3]}]}/x" conns=${4:-$CONNS} depth=${5:-$PIPELINE}
    if [[ ${KIND[$3]} == many ]]; then
        run_wrk "$1" "$2" "$conns" "$url" "$HERE/random-keys.lua" "$KEYS" "$RANDOM$RANDOM" "$depth"
    elif ((depth > 1)); then
        run_wrk "$1" "$2" "$conns" "$url" "$HERE/one-key.lua" "$depth"
    else
        run_wrk "$1" "$2" "$conns" "$url"
    fi
}
# measure CASE-INDEX OUT: warm up, then one measured run (with latency.py alongside), then
# latency.py alone; writes OUT.res:
#    1 req/s   2 p99-under-load(ms)   3 nginx-us/req   4 nginx-cpu%   5 wrk-cpu%   6 non-2xx   7 other-cpu%
#    8 socket-errors   9 requests   10 redis-cpu%   11 redis-ms-per-1000-checks
#   12 p99-alone(ms)   13 error-log-lines   14 redis-cpu%-per-node (a/b/c)   15 checks-per-script-call
#   16 softirq-cpu%   17 all CPUs busy (% of one CPU; irq, softirq included)
#   18 Redis commands per 1000 requests (INFO commandstats, INFO itself left out; the
#      commands scripts run count too)
#   19 Redis CPU ms per 1000 requests (INFO cpu: used_cpu_sys + used_cpu_user)
#   20 Redis calls per 1000 requests: script calls (EVAL, EVALSHA, FCALL), all the module sends
#      once connected (checks, refunds, sync rounds, heartbeats, lease asks)
# CPU shares are of the wall time of the measured run, in % of one CPU. "other" is what else was
# busy on the CPUs the case uses (other processes; irq/softirq apart, in field 16): a high value
# means a disturbed run. Fields 10, 11, 14, 15, 18-20 are "-" for a case without Redis.
HZ=$(getconf CLK_TCK)
measure() {
    local i=$1 out=$2 w=${WORKERS[$1]} srv rp="" cpus p0 p1 r0 r1 a0 a1 b0 b1 c0 c1 w0 w1 reqs
    local e0 k0=0 k1=0 lat="nan" elog rcpu m0 m1 cm0=0 cm1=0 ic0=0 ic1=0
    srv=${CASE_REDIS[$(zname "${NAMES[$i]}")]:-}
    [[ -n $srv ]] && rp=${RSRV_PIDS[$srv]}
    cpus="$NGINX_CPU $WRK_CPU"
    rcpu=""
    [[ -n $srv ]] && rcpu=$(redis_cpu "$srv")
    if ((w > 1)) || [[ -n $srv && ( -z $rcpu || $rcpu == *-* ) ]]; then
        cpus=$ALL_CPUS
    elif [[ -n $srv ]]; then
        cpus="$cpus ${rcpu//,/ }"
    fi
    load_case "$out.warmup" "$WARMUP" "$i"
    if [[ -n $srv ]]; then k0=$(redis_script_calls "$srv"); cm0=$(redis_commands "$srv"); ic0=$(redis_info_cpu "$srv"); fi
    e0=$(stat -c %s "$TMP/ng$w/error.log")
    p0=$(ticks_sum ${NG_WORKERS[$w]}); r0=$(proc_ticks $rp); a0=$(ticks_sum $(all_redis_pids))
    b0=$(cpu_ticks $cpus); m0=$(cpu_ticks $ALL_CPUS); children_cpu >"$TMP/c0"; w0=$EPOCHREALTIME
    if [[ $LAT_LOADED == 1 ]]; then
        # the probe ends a little before wrk; it is reaped after c1, so its CPU time is not wrk's
        latency_probe "$out.loaded" $((DURATION > 2 ? DURATION - 1 : 1)) "$i" &
        PROBE_PID=$!
    fi
    load_case "$out" "$DURATION" "$i"
    w1=$EPOCHREALTIME; p1=$(ticks_sum ${NG_WORKERS[$w]}); r1=$(proc_ticks $rp); a1=$(ticks_sum $(all_redis_pids))
    b1=$(cpu_ticks $cpus); m1=$(cpu_ticks $ALL_CPUS); children_cpu >"$TMP/c1"
    if [[ -n $PROBE_PID ]]; then wait "$PROBE_PID" || true; PROBE_PID=""; fi
    for p in ${NG_WORKERS[$w]}; do
        kill -0 "$p" 2>/dev/null || die "an nginx worker died during ${NAMES[$i]}: $(tail -5 "$TMP/ng$w/error.log")"
    done
    if [[ -n $srv ]]; then k1=$(redis_script_calls "$srv"); cm1=$(redis_commands "$srv"); ic1=$(redis_info_cpu "$srv"); fi
    elog=$(tail -c +$((e0 + 1)) "$TMP/ng$w/error.log" | grep -cE '\[(error|crit|alert|emerg)\]' || true)
    if ((LAT_DURATION > 0)); then
        # in the background, as run_wrk does, so that a signal reaches the trap at once
        latency_probe "$out.alone" "$LAT_DURATION" "$i" &
        PROBE_PID=$!
        wait "$PROBE_PID" || true
        PROBE_PID=""
        lat=$(probe_p99 "$out.alone")
    fi
    c0=$(cat "$TMP/c0"); c1=$(cat "$TMP/c1")
    reqs=$(wrk_requests "$out")
    awk -v rps="$(wrk_rps "$out")" -v p99="$(probe_p99 "$out.loaded")" -v n="$reqs" -v non2xx="$(wrk_non2xx "$out")" \
        -v sock="$(wrk_sockerr "$out")" -v p=$((p1 - p0)) -v r0="$r0" -v r1="$r1" -v a=$((a1 - a0)) \
        -v b0="$b0" -v b1="$b1" -v w="$(awk -v a="$c0" -v b="$c1" 'BEGIN { print b - a }')" -v redis="$srv" \
        -v hz="$HZ" -v t0="$w0" -v t1="$w1" -v lat="$lat" -v elog="${elog:-0}" -v k=$((k1 - k0)) \
        -v m0="$m0" -v m1="$m1" -v cm=$((cm1 - cm0)) -v ic0="$ic0" -v ic1="$ic1" 'BEGIN {
            wall = t1 - t0; ng = p / hz
            split(b0, x); split(b1, y); busy = (y[1] - x[1]) / hz; soft = (y[2] - x[2]) / hz
            split(m0, x); split(m1, y); machine = (y[1] - x[1] + y[2] - x[2]) / hz
            other = busy - ng - w - a / hz; if (other < 0) other = 0
            rc = "-"; rms = "-"; per = "-"; cpc = "-"; cmk = "-"; icms = "-"; kk = "-"
            if (redis != "") {
                m = split(r0, u); split(r1, v); tot = 0; per = ""
                for (j = 1; j <= m; j++) { d = (v[j] - u[j]) / hz; tot += d
                    per = per sprintf("%s%.0f", (j > 1 ? "/" : ""), 100 * d / wall) }
                rc = sprintf("%.1f", 100 * tot / wall)
                rms = sprintf("%.3f", (n ? 1e6 * tot / n : 0))
                cpc = sprintf("%.1f", (k ? n / k : 0))
                cmk = sprintf("%.3f", (n ? 1000 * cm / n : 0))
                icms = sprintf("%.3f", (n ? 1e6 * (ic1 - ic0) / n : 0))
                kk = sprintf("%.3f", (n ? 1000 * k / n : 0))
            }
            printf "%s %s %.2f %.0f %.0f %d %.0f %d %d %s %s %s %d %s %s %.0f %.0f %s %s %s\n", rps, p99, (n ? 1e6 * ng / n : 0),
                100 * ng / wall, 100 * w / wall, non2xx, 100 * other / wall, sock, n, rc, rms, lat, elog, per, cpc,
                100 * soft / wall, 100 * machine / wall, cmk, icms, kk }' >"$out.res"
}

# wait_quiet: before a measurement, wait (at most QUIET_WAIT seconds) until the two CPUs are
# nearly idle for half a second: other work on this machine (builds, tests) would otherwise
# take CPU time from nginx or wrk and lower the figure of whichever case runs meanwhile.
WAITED=0
wait_quiet() {
    local t0=$SECONDS b0 b1
    while ((SECONDS - t0 < QUIET_WAIT && $(date +%s) - START_TIME < MAX_TIME)); do
        b0=$(cpu_ticks "$NGINX_CPU" "$WRK_CPU"); sleep 0.5; b1=$(cpu_ticks "$NGINX_CPU" "$WRK_CPU")
        ((((${b1% *} - ${b0% *}) + (${b1#* } - ${b0#* })) * 200 / HZ <= 15)) && break   # <= 15% of one CPU
    done
    WAITED=$((WAITED + SECONDS - t0))
}

total=$((ROUNDS * ${#SEL[@]}))
say "== measuring ${#SEL[@]} cases x $ROUNDS rounds x (${WARMUP}s + ${DURATION}s + ${LAT_DURATION}s): ~$((total * (WARMUP + DURATION + LAT_DURATION + 1) / 60 + 1)) min"
k=0
RETRIED=0
for ((round = 1; round <= ROUNDS; round++)); do
    for i in "${SEL[@]}"; do
        name=${NAMES[$i]}
        out="$TMP/out/$name.$round"
        k=$((k + 1))
        # A run during which something else kept the CPUs busy is measured again (at most
        # RETRIES times; the last attempt is kept whatever it shows).
        for ((attempt = 0; attempt <= RETRIES; attempt++)); do
            wait_quiet
            measure "$i" "$out"
            read -r rps p99 us_req ncpu_pct wcpu_pct non2xx other_pct sock reqs rcpu rms lat elog rper cpc soft mach cmk _ kk <"$out.res"
            say "$(printf '[%d/%d] round %d %-19s %7.0f req/s p99 %s ms (alone %s) nginx %3s%% %5s us/req wrk %3s%% redis %s%% (%s) %s ms/1k, %s/call, %s calls/1k, %s cmds/1k other %s%% softirq %s%% all %s%% non-2xx %s err %s log %s' \
                "$k" "$total" "$round" "$name" "$rps" "$p99" "$lat" "$ncpu_pct" "$us_req" "$wcpu_pct" "$rcpu" "$rper" \
                "$rms" "$cpc" "$kk" "$cmk" "$other_pct" "$soft" "$mach" "$non2xx" "$sock" "$elog")"
            ((other_pct <= OTHER_MAX || $(date +%s) - START_TIME >= MAX_TIME)) && break
            if ((attempt < RETRIES)); then
                say "   disturbed (other ${other_pct}% > ${OTHER_MAX}%): measuring again"
                RETRIED=$((RETRIED + 1))
                mv "$out" "$out.disturbed$attempt"   # kept for KEEP=1
            fi
        done
    done
done

# ------------------------------------------------------------------ REPORT
col() {  # col CASE FIELD# -> median over rounds of that field
    cat "$TMP/out/$1".*.res | awk -v f="$2" '{ print $f }' | median
}
# colv CASE FIELD#: median over rounds of each part of an a/b/c field
colv() {
    local m j
    m=$(head -1 "$TMP/out/$1.1.res" | awk -v f="$2" '{ print split($f, a, "/") }')
    for ((j = 1; j <= m; j++)); do
        cat "$TMP/out/$1".*.res | awk -v f="$2" -v j="$j" '{ split($f, a, "/"); print a[j] }' | median
    done | awk '{ printf "%s%.0f", (NR > 1 ? "/" : ""), $1 } END { print "" }'
}
fmt() {  # fmt PRINTF-FORMAT VALUE: "-" for nan or "-"
    if [[ $2 == nan || $2 == - || -z $2 ]]; then echo "-"; else printf "$1" "$2"; fi
}
declare -A RPS=()
for i in "${SEL[@]}"; do RPS[${NAMES[$i]}]=$(col "${NAMES[$i]}" 1); done
# ratio_num CASE BASE [FIELD [INVERT]]: the median over rounds of FIELD(CASE) / FIELD(BASE)
# within the same round (rounds are minutes apart and the machine's speed drifts: a same-round
# ratio cancels the drift); FIELD 1 (req/s) by default; INVERT=1: FIELD(BASE) / FIELD(CASE)
# (for a cost, e.g. nginx CPU per request: the throughput ratio that cost implies).
ratio_num() {
    local r f=${3:-1} inv=${4:-0}
    for ((r = 1; r <= ROUNDS; r++)); do
        awk -v a="$(cut -d' ' -f"$f" "$TMP/out/$1.$r.res")" -v b="$(cut -d' ' -f"$f" "$TMP/out/$2.$r.res")" -v inv="$inv" \
            'BEGIN { if (inv) { t = a; a = b; b = t } print (b > 0 ? a / b : 0) }'
    done | median
}
ratio() { [[ -n $2 && -n ${RPS[$2]:-} ]] && awk -v r="$(ratio_num "$1" "$2")" 'BEGIN { printf "%.2fx", r }' || echo "-"; }
pct_nonzero() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f%%", (b > 0 ? 100 * a / b : 0) }'; }

elapsed=$(($(date +%s) - START_TIME))
echo "### Benchmark: allowed-path throughput"
echo
echo "nginx $("$NGINX_BIN" -v 2>&1 | sed 's#.*/##'), $(nproc) CPUs ($(awk -F': ' '/model name/ { print $2; exit }' /proc/cpuinfo)), kernel $(uname -r);"
echo "module $SO (built $SO_TIME, sha256 $SO_SHA..., git $git_rev)."
echo "nginx: 1 worker pinned to CPU $NGINX_CPU (\"2 nginx workers\" rows: a second nginx, 2 workers not pinned), access_log off, keep-alive;"
echo "wrk -t1 -c$CONNS -d${DURATION}s pinned to CPU $WRK_CPU, $PIPELINE requests per write (HTTP/1.1 pipelining);"
echo "${WARMUP}s warm-up before each run; $ROUNDS rounds run round-robin, medians reported; every shared-memory zone ${ZONE_SIZE} (limit_req's and ratelimit's);"
echo "\"$(keys_label)\" rows: GET /x?k=<random 1..$KEYS> keyed on \$arg_k$([[ $FILL == 1 ]] && echo ", every key sent once before measuring"); other rows: GET /x keyed on a constant."
if ((${#CASE_REDIS[@]})); then
    echo "Redis $("$REDIS_BIN" --version | awk '{ print $3 }' | sed 's/v=//') (--save '' --appendonly no); standalone server $([[ -n $REDIS_CPU ]] && echo "pinned to CPU $REDIS_CPU" || echo "not pinned"), cluster nodes $([[ -n $REDIS_CLUSTER_CPU ]] && echo "pinned to CPU $REDIS_CLUSTER_CPU" || echo "not pinned");"
    echo "ratelimit_redis ... timeout=100ms, ratelimit_on_error deny; one standalone server, a cluster of 1 primary, a cluster of 3 primaries."
fi
echo
echo "| case | keys | req/s | vs plain | vs plain + headers | vs limit_req | p99 under load | p99 alone | nginx CPU/req | nginx CPU | wrk CPU | Redis CPU | Redis CPU per 1000 checks | CPUs busy (of ${ncpu}00%) | other CPU | spread | non-2xx / socket errors / error.log lines |"
echo "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
for i in "${SEL[@]}"; do
    name=${NAMES[$i]}
    kind=${KIND[$i]}
    w=${WORKERS[$i]}
    keys=1
    [[ $kind == many ]] && keys=$(keys_label)
    [[ ${CHECK[$i]} == plain* ]] && { [[ $kind == many ]] && keys="(random URLs)" || keys="-"; }
    vs_lr="-"
    [[ ${CHECK[$i]} != plain* ]] && vs_lr=$(ratio "$name" "$(lr_of "$kind" "$w")")
    vs_ph="-"
    [[ $kind == one && $w == 1 && ${CHECK[$i]} == module* && ${CHECK[$i]} != module-noheaders && -n ${RPS[plain-headers]:-} ]] &&
        vs_ph=$(ratio "$name" plain-headers)
    spread=$(cat "$TMP/out/$name".*.res | awk -v m="${RPS[$name]}" '
        NR == 1 { lo = hi = $1 } { if ($1 < lo) lo = $1; if ($1 > hi) hi = $1 }
        END { printf "%.1f%%", (m > 0 ? 100 * (hi - lo) / m : 0) }')
    errs=$(cat "$TMP/out/$name".*.res | awk '{ a += $6; b += $8; c += $13; n += $9 } END { print a + 0, b + 0, c + 0, n + 0 }')
    read -r e_non2xx e_sock e_log e_n <<<"$errs"
    errcol="$e_non2xx / $e_sock / $e_log"
    [[ ${CHECK[$i]} == module-reject ]] && errcol="$errcol (429 expected: $(pct_nonzero "$e_non2xx" "$e_n") of responses)"
    rcpu="-"
    if [[ -n ${CASE_REDIS[$(zname "$name")]:-} ]]; then
        rcpu="$(fmt '%.0f' "$(col "$name" 10)")%"
        [[ ${CASE_REDIS[$(zname "$name")]} == cluster3 ]] && rcpu="$rcpu ($(colv "$name" 14)% per primary)"
    fi
    rms=$(fmt '%.2f ms' "$(col "$name" 11)")
    printf '| %s | %s | %s | %s | %s | %s | %s | %s | %.2f us | %s%% | %s%% | %s | %s | %s%% | %s%% | %s | %s |\n' \
        "$(label_of "$name")" "$keys" "$(awk -v r="${RPS[$name]}" 'BEGIN { printf "%d", r + 0.5 }')" \
        "$(ratio "$name" "$(plain_of "$kind" "$w")")" "$vs_ph" "$vs_lr" "$(fmt '%.2f ms' "$(col "$name" 2)")" "$(fmt '%.3f ms' "$(col "$name" 12)")" \
        "$(col "$name" 3)" "$(col "$name" 4)" "$(col "$name" 5)" "$rcpu" "$rms" "$(col "$name" 17)" "$(col "$name" 7)" "$spread" "$errcol"
done
cat <<EOF

- req/s, p99 and CPU columns: medians over the rounds. "vs plain" and "vs limit_req": the median over rounds
  of the ratio within a round (the machine's speed drifts between rounds), against plain nginx receiving the
  same URLs (one-key rows: GET /x; $(keys_label) rows: the random URLs; with the same number of workers) and
  limit_req with the same key kind. "vs plain + headers" (one-key rows that send RateLimit headers): against plain
  nginx sending the same two headers with add_header (the same response bytes; on loopback, where the kernel's
  send and wake-up dominate the cost of a request, ~75 more bytes per response cost more than the module's own
  work: compare it with "ratelimit_headers off" vs plain).
- "p99 under load", "p99 alone": the p99 of latency.py (one connection, one request at a time, ~20 us of Python
  client included) during the measured run, beside wrk's $CONNS connections x $PIPELINE pipelined requests (mostly
  the wait behind them, so it follows req/s), and alone for ${LAT_DURATION}s after it (what a lone request waits).
- "nginx CPU/req": the workers' user+system CPU time per request; "nginx CPU", "wrk CPU", "Redis CPU": their
  share of one CPU during the run (2 workers: the sum). nginx near 100% per worker and wrk below means nginx
  sets the pace; wrk near 100% means the client does, which narrows req/s differences: compare "nginx CPU/req"
  too. "Redis CPU per 1000 checks": Redis's CPU time (all its nodes) per 1000 requests answered. "CPUs busy":
  all CPUs together, irq and softirq included (near ${ncpu}00%: the machine, not one process, is the limit). "other CPU":
  what else kept the CPUs the case uses busy (other processes; not irq/softirq, which is mostly the
  benchmark's own loopback traffic), in % of one CPU; a run above ${OTHER_MAX}% is measured again (at most
  ${RETRIES} times). "spread": (max - min) / median of req/s over the rounds.
- "non-2xx / socket errors / error.log lines": summed over the measured runs; error.log lines at level error
  or above (a Redis error would show there and as a 503).
- ratelimit quotas (never reached): gcra/token/leaky requests=1000000000 period=1s burst=1000;
  sliding/fixed requests=1000000000 period=1s; log with one key requests=1000000 period=1s (an 8 MB ring),
  log with $(keys_label) keys requests=10 period=1s (136-byte slots: a key is drawn ~0.1 times a second).
  Redis, $(keys_label) keys: gcra requests=10 period=1d burst=1000, sliding requests=1000 period=1d (state that
  lasts, so that Redis holds ~$(keys_label) keys); Redis, one key: as in shared memory; "rejected (429)": gcra
  requests=1 period=1h, so every request after the first is rejected (logged at ratelimit_log_level info,
  below the log's level: the row measures rejecting, not writing an error.log line per request).
  limit_req: rate=100000000r/s, limit_req burst=1000000 nodelay (a burst because limit_req counts all the
  requests of one millisecond against it).
  sync=100ms rows: the same quotas as the Redis rows; "lease, 300000r/s burst=3000000": a quota the one-key
  load nears (a lease's units drain with the global level: on a key used far below its rate they drain
  away before they are spent, and requests wait for grants).
EOF
echo
echo "Sanity checks:"
printf '  %s\n' "${SANITY[@]}"
if ((${#FILLED[@]})); then echo "Zones filled before measuring:"; printf '  %s\n' "${FILLED[@]}"; fi
echo "Runs measured again because other work kept the CPUs busy (> ${OTHER_MAX}% of a CPU): $RETRIED;"
echo "measurements kept although disturbed (other CPU > ${OTHER_MAX}%): $(cat "$TMP"/out/*.res | awk -v m="$OTHER_MAX" '$7 > m { n++ } END { print n + 0 }');"
echo "seconds spent waiting for idle CPUs before measuring: $WAITED."
echo
echo "Targets (reported, not enforced). \"req/s\": same-round req/s ratio, median over rounds; \"CPU\": the"
echo "baseline's nginx CPU per request / the case's (the throughput ratio nginx's own cost implies), same way:"
target() {  # target LABEL CASE BASE MIN
    local r c
    [[ -n ${RPS[$2]:-} && -n ${RPS[$3]:-} ]] || return 0
    r=$(ratio_num "$2" "$3")
    c=$(ratio_num "$2" "$3" 3 1)
    printf '  %-40s %-20s req/s %.3fx %-8s CPU %.3fx %s\n' "$1" "$2" "$r" \
        "$(awk -v r="$r" -v m="$4" 'BEGIN { print ((r >= m) ? "met" : "NOT met") }')" "$c" \
        "$(awk -v r="$c" -v m="$4" 'BEGIN { print ((r >= m) ? "met" : "NOT met") }')"
}
for i in "${SEL[@]}"; do
    [[ ${CHECK[$i]} == module* && ${CHECK[$i]} != module-reject && ${KIND[$i]} == one && -z ${CASE_REDIS[$(zname "${NAMES[$i]}")]:-} ]] &&
        target "one key >= 0.97x plain:" "${NAMES[$i]}" plain 0.97
done
for i in "${SEL[@]}"; do
    [[ ${CHECK[$i]} == module && ${KIND[$i]} == one && -z ${CASE_REDIS[$(zname "${NAMES[$i]}")]:-} ]] &&
        target "one key >= 0.97x plain + same headers:" "${NAMES[$i]}" plain-headers 0.97
done
for i in "${SEL[@]}"; do
    [[ ${CHECK[$i]} == module* && ${CHECK[$i]} != module-reject && ${KIND[$i]} == many && -z ${CASE_REDIS[$(zname "${NAMES[$i]}")]:-} ]] &&
        target "$(keys_label) keys >= 1.0x limit_req $(keys_label) keys:" "${NAMES[$i]}" limit_req-1M 1.0
done
for i in "${SEL[@]}"; do
    [[ ${CHECK[$i]} == module && ${WORKERS[$i]} == 1 && ${NAMES[$i]} == redis-* ]] &&
        target "Redis, allowed >= 0.75x plain:" "${NAMES[$i]}" "$(plain_of "${KIND[$i]}" 1)" 0.75
done
if ((${#CASE_REDIS[@]})); then
    echo
    echo "Redis: its CPU per 1000 checks, and the p99 latency the check adds (the row's p99 - plain's, same key kind"
    echo "and workers; from latency.py under load and alone):"
    for i in "${SEL[@]}"; do
        name=${NAMES[$i]}
        srv=${CASE_REDIS[$(zname "$name")]:-}
        [[ -n $srv ]] || continue
        base=$(plain_of "${KIND[$i]}" "${WORKERS[$i]}")
        printf '  %-20s Redis %6s ms CPU per 1000 checks, %5s%% of a CPU (%s%% per node), %s checks per script call;' \
            "$name" "$(col "$name" 11)" "$(col "$name" 10)" "$(colv "$name" 14)" "$(col "$name" 15)"
        if [[ -n $base ]]; then
            printf ' p99 added: under load %s, alone %s\n' \
                "$(awk -v a="$(col "$name" 2)" -v b="$(col "$base" 2)" 'BEGIN { if (a == "nan" || b == "nan") print "-"; else printf "%+.3f ms", a - b }')" \
                "$(awk -v a="$(col "$name" 12)" -v b="$(col "$base" 12)" 'BEGIN { if (a == "nan" || b == "nan") print "-"; else printf "%+.3f ms", a - b }')"
        else
            echo
        fi
    done
    c1=""
    for w in $INSTANCES; do
        sfx=""; ((w > 1)) && sfx="-${w}w"
        a="cluster1-gcra-1M$sfx" b="cluster3-gcra-1M$sfx"
        [[ -n ${RPS[$a]:-} && -n ${RPS[$b]:-} ]] || continue
        [[ -z $c1 ]] && { echo; echo "Redis Cluster, $(keys_label) random keys, checks/s (= req/s) against 1 primary vs 3 primaries:"; c1=1; }
        printf '  %d nginx worker(s): 1 primary %.0f/s (Redis %s%%), 3 primaries %.0f/s (Redis %s%% per primary): %.2fx;\n' \
            "$w" "${RPS[$a]}" "$(colv "$a" 14)" "${RPS[$b]}" "$(colv "$b" 14)" "$(ratio_num "$b" "$a")"
        printf '      nginx CPU %s%% vs %s%%, wrk CPU %s%% vs %s%%, all CPUs busy %s%% vs %s%% (of %s00%%); Redis CPU per 1000 checks %s vs %s ms\n' \
            "$(col "$a" 4)" "$(col "$b" 4)" "$(col "$a" 5)" "$(col "$b" 5)" "$(col "$a" 17)" "$(col "$b" 17)" "$ncpu" \
            "$(col "$a" 11)" "$(col "$b" 11)"
        # What Redis alone could serve if each primary had a CPU of its own: primaries / (CPU per check).
        printf '      extrapolated, not measured: with a CPU per primary, Redis could serve ~%.0f/s (1 primary) vs ~%.0f/s (3 primaries): %.2fx\n' \
            "$(awk -v m="$(col "$a" 11)" 'BEGIN { print (m > 0 ? 1e6 / m : 0) }')" \
            "$(awk -v m="$(col "$b" 11)" 'BEGIN { print (m > 0 ? 3e6 / m : 0) }')" \
            "$(awk -v a="$(col "$a" 11)" -v b="$(col "$b" 11)" 'BEGIN { print (b > 0 ? 3 * a / b : 0) }')"
    done
fi
# Sync zones: each sync row beside the same algorithm in shared memory and in Redis per request
# (same key kind, same run), with the Redis commands and Redis CPU (INFO) per 1000 requests.
SYNC_ORDER=()
for n in gcra redis-gcra sync-gcra sync-lease-gcra sync-lease-gcra-near gcra-1M redis-gcra-1M sync-gcra-1M sync-lease-gcra-1M; do
    [[ -n ${RPS[$n]:-} ]] && SYNC_ORDER+=("$n")
done
if printf '%s\n' "${SYNC_ORDER[@]}" | grep -q '^sync-'; then
    echo
    echo "Sync zones (sync=100ms), against the same limit in shared memory and in Redis per request, same run"
    echo "(ratios: median over rounds of the same-round ratio; Redis: INFO commandstats and INFO cpu before/after each run;"
    echo "calls: the script calls the module sends, FCALL or EVALSHA; commands: every command Redis ran, inside scripts too):"
    echo
    echo "| case | keys | req/s | vs plain | vs shared memory | vs Redis per request | Redis calls per 1000 requests | Redis commands per 1000 requests (in scripts too) | Redis CPU per 1000 requests | non-2xx |"
    echo "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
    for name in "${SYNC_ORDER[@]}"; do
        i=${IDX[$name]}
        keys=1
        [[ ${KIND[$i]} == many ]] && keys=$(keys_label)
        shm=gcra redis=redis-gcra
        [[ ${KIND[$i]} == many ]] && { shm=gcra-1M; redis=redis-gcra-1M; }
        vs_shm="-" vs_redis="-"
        [[ $name != "$shm" ]] && vs_shm=$(ratio "$name" "$shm")
        [[ $name != "$redis" ]] && vs_redis=$(ratio "$name" "$redis")
        printf '| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n' "$(label_of "$name")" "$keys" \
            "$(awk -v r="${RPS[$name]}" 'BEGIN { printf "%d", r + 0.5 }')" "$(ratio "$name" "$(plain_of "${KIND[$i]}" 1)")" \
            "$vs_shm" "$vs_redis" "$(fmt '%.2f' "$(col "$name" 20)")" "$(fmt '%.1f' "$(col "$name" 18)")" \
            "$(fmt '%.3f ms' "$(col "$name" 19)")" \
            "$(cat "$TMP/out/$name".*.res | awk '{ a += $6 } END { print a + 0 }')"
    done
    echo
    echo "Sync targets (reported, not enforced):"
    target "hot key >= 0.95x shared memory:" sync-gcra gcra 0.95
    target "hot key >= 0.95x shared memory:" sync-lease-gcra gcra 0.95
    target "hot key >= 0.95x shared memory:" sync-lease-gcra-near gcra 0.95
    target "$(keys_label) keys >= 0.85x shared memory:" sync-gcra-1M gcra-1M 0.85
    for name in sync-gcra sync-lease-gcra sync-lease-gcra-near; do
        [[ -n ${RPS[$name]:-} ]] || continue
        c=$(col "$name" 20)
        printf '  %-40s %-20s %s Redis calls per 1000 requests %s\n' "hot key: <= 10 Redis calls per 1000:" "$name" "$c" \
            "$(awk -v c="$c" 'BEGIN { print ((c != "nan" && c <= 10) ? "met" : "NOT met") }')"
    done
fi

echo
echo "Reproduce: $REPRO"
echo "Total time: $((elapsed / 60))m$((elapsed % 60))s"
