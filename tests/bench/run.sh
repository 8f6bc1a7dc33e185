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
#   CASES='tls' tests/bench/run.sh        (the rows over TLS, with their plain-TCP twins)
#   CASES='concurrency' tests/bench/run.sh  (concurrency zones, with the gcra rows of the same store)
#
# Settings (environment):
#   DURATION   seconds measured per case and round            (10)
#   WARMUP     seconds of load before each measurement         (2)
#   ROUNDS     measurements per case; the median is reported   (3)
#   CASES      extended regex on case names (see cases.py); the baselines each selected case
#              is compared with (plain, limit_req of the same key kind; a TLS row's plain-TCP
#              twin; a concurrency row's gcra row in the same store) are always kept  (all)
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
#   METRICS    1: every nginx serves ratelimit_metrics on a port of its own, whose counters give
#              each Redis row's checks and script calls (issue 33's table)          (1)
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
# Redis: the Redis rows keep the zone's state in a redis-server started before nginx
# (--save '' --appendonly no, in $TMP, on a free port; one server shared by the standalone
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
# TLS rows (*-tls-*): the same as their plain-TCP twin (redis-gcra, redis-gcra-1M, sync-gcra,
# sync-gcra-1M) with `ratelimit_redis ... ssl ssl_trusted_certificate=CA`, verified, to a
# redis-server on TLS only (--port 0 --tls-port P --tls-cert-file --tls-key-file
# --tls-ca-cert-file --tls-auth-clients no; pinned as REDIS_CPU; the per-request rows share one,
# each sync row has its own). The bench makes the CA and the server certificate (RSA 2048, SAN
# IP:127.0.0.1) at start with the openssl CLI in $TMP/tls. TLS handshakes: INFO stats'
# total_connections_received of the TLS server before and after each measured run, less the
# bench's own redis-cli runs (each one connection), per 1000 requests (one handshake per
# connection, not per request: ~0 expected), and over the whole run per server.
# Concurrency rows (concurrency, concurrency-1M, redis-concurrency, redis-concurrency-1M): a zone
# with `concurrency=1000000` (at most that many requests of a key in flight; never reached) in
# shared memory or in Redis (hold=30s, the default), keyed as the other rows; requests are short
# (empty_gif), so each request takes a slot and gives it back: that is the cost measured. Each is
# compared with gcra in the same store and key kind (a table after the main one), with every
# command Redis ran per request (INFO commandstats: the script call, the commands inside it, the
# ZREM of each release, the refreshes). A Redis concurrency key lives only while a request
# holds a slot (the release deletes it), so the redis-concurrency-1M zone is not filled.
# The cluster nodes are not pinned by default: pinned together to one CPU, 3 primaries could
# only share the CPU 1 primary has, which rules out by construction what the cluster rows look
# for (whether more primaries bring more throughput); unpinned they may spread over both CPUs.
# With 2 CPUs for nginx, wrk and Redis together, the Redis rows are bound by the machine, not
# by nginx: the "CPUs busy" column (all CPUs, irq and softirq included) shows it.
#
# Files: bench.py drives the run (Redis, nginx, wrk, latency.py, pinning, quiet-wait and retries,
# CPU counters) and keeps the raw counters of each run; cases.py generates the case table
# (products of store x algorithm x key kind x ...: `python3 tests/bench/cases.py --config` lists
# the cases CASES selects, with their nginx configuration) and writes nginx.conf; report.py does
# the arithmetic (figures per run, medians, same-round ratios, targets) and the Markdown report
# (`python3 tests/bench/report.py DIR` rewrites the report of a run kept with KEEP=1).
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
exec python3 -B "$HERE/bench.py"
