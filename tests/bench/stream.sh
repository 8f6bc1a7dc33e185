#!/usr/bin/env bash
# Throughput of ngx_stream_ratelimit_module (stream{}): new TCP connections per second against a
# stream `return`, with one key and 1M keys, at accept and at preread, in shared memory and in
# Redis, against plain nginx and stream `limit_conn`; connections rejected before a TLS handshake
# against completed handshakes; a rejecting flood, logged and not; UDP sessions and datagrams,
# admitted and dropped. With nginx's CPU per connection beside each figure: the client may be
# the bottleneck.
#
# A benchmark, not a test: it prints Markdown tables and whether the targets of issue 31 are
# met, and never fails because of a figure (it exits non-zero only if it cannot set up what it
# measures).
#
#   tests/bench/stream.sh                 (./build.sh build first: build/ngx_stream_ratelimit_module.so)
#   DURATION=5 ROUNDS=3 tests/bench/stream.sh
#   ROWS='^accept|^udp-dgram' tests/bench/stream.sh   (those rows, with the rows they are compared with)
#
# Settings (environment):
#   DURATION   seconds measured per row and round                               (3)
#   WARMUP     seconds of load before each measurement                          (1)
#   ROUNDS     measurements per row, round-robin; the median is reported         (2)
#   ROWS       regular expression on the row names (stream_bench.py's rows()); the rows each
#              selected row is compared with are always kept                    (all)
#   CONNS      TCP connections the client keeps in flight                       (64)
#   UDP_SOCKETS  UDP sockets (source ports) the client sends from, for sessions  (64)
#   KEYS       distinct keys of the "1M" rows                                   (1000000)
#   ZONE_SIZE  size of the many-key zones, limit_conn's and this module's alike  (256m)
#   FILL       1: before measuring, every key once into each many-key zone      (1)
#   FILL_MAX   seconds at most spent filling one zone (the share filled is reported)  (20)
#   NGINX_BIN  nginx binary                                                     (/usr/sbin/nginx)
#   SO         the module                       (build/ngx_stream_ratelimit_module.so; copied first)
#   STREAM_SO  nginx's stream module, loaded first  (/usr/lib/nginx/modules/ngx_stream_module.so)
#   NGINX_CPU, CLIENT_CPU   CPUs the nginx worker and the client are pinned to  (0, 1)
#   REDIS_CPU  CPU(s) redis-server is pinned to (a taskset list); empty: not pinned  (CLIENT_CPU)
#   KEEP       1: keep the temporary directory (configurations, logs, raw counters)
#   QUIET_WAIT seconds at most to wait for idle CPUs before each measurement    (30)
#   OTHER_MAX  % of a CPU taken by other work during a run above which it is redone  (15)
#   RETRIES    how many times at most a disturbed run is redone                (1)
#   MAX_TIME   seconds after which it stops waiting and redoing, and just measures  (1800)
#   INSTR      1: then the one-key rows under callgrind (valgrind): nginx's user-space
#              instructions per connection, session or datagram                 (1)
#   INSTR_SECS seconds of the client per row under callgrind                    (2)
#
# Method: one nginx (worker_processes 1, pinned to NGINX_CPU, no access log, error log at
# `error`) serves every row, each a stream server on its own 127.0.0.1 port; the client
# (stream_client.c, built with cc -O2 into build/bench/, pinned to CLIENT_CPU) loads one row at a
# time: CONNS TCP connections in flight, each connecting, sending a TLS ClientHello (preread and
# rejected-TLS rows) or making a whole TLS handshake (handshake rows) or sending nothing, and
# reading until nginx closes: a byte received is an admitted connection, none a rejected one.
# Keys: "1" rows come from 127.0.0.1 (one key); "1M" rows from KEYS source addresses
# 127.1.0.0 and up (loopback routes all of 127.0.0.0/8; keyed on $binary_remote_addr), or, for
# preread, ClientHellos naming k<i>.example ($ssl_preread_server_name), drawn at random, in
# zones filled beforehand (FILL). Every limit admits everything, except the rejecting rows
# (requests=1 period=1h: everything after the first connection). UDP: sessions (UDP_SOCKETS
# sockets, each waiting for its `return` reply before its next datagram: a session each), a
# flood of sessions from UDP_SOCKETS ports (rejected), and a flood of datagrams in one session
# proxied to a socket of the client (at=datagram); the datagrams nginx handled are those sent
# less those the kernel dropped at its socket (/proc/net/udp). The nginx worker's CPU time is
# read from /proc around each run and divided by the connections, sessions or datagrams it
# handled; the client reports its own. On loopback the kernel's side of a TCP connection costs
# both ends ~30-60 us, so the client (one CPU) is usually the bottleneck and nginx idles: compare
# the rows per nginx CPU second then. The module's own work (a few thousand instructions) is
# within the noise of those figures: INSTR=1 counts it under callgrind (one nginx process, no
# master, counting inside its event loop; per one-key row: a warm-up, counters zeroed,
# INSTR_SECS seconds of the client with one connection or session in flight, dumped as
# callgrind/cg.ROW, kept with KEEP=1 for callgrind_annotate). Each row is first checked on an
# nginx of its own with an access log ($ratelimit_status, $limit_conn_status,
# $ratelimit_dropped; a datagram limit that admits everything leaves no trace, so there it
# drops what exceeds a burst of 9): the run stops if a row does not do what it claims.
# A run whose "other" CPU (busy time of both CPUs not nginx's, the client's or Redis's; irq and
# softirq apart) exceeds OTHER_MAX is redone; disturbed runs kept are left out of the medians.
#
# Files: stream_bench.py drives the run and prints the report (`python3
# tests/bench/stream_bench.py --report DIR/out` prints a run kept with KEEP=1 again); it uses
# bench.py's helpers (Redis, CPU counters, ports, the quiet wait).
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
exec python3 -B "$HERE/stream_bench.py" "$@"
