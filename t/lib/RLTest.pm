package RLTest;
# Harness of the end-to-end tests of ngx_http_ratelimit_module. Core Perl only: every test
# file starts its own nginx (own temp prefix, free loopback ports), talks raw HTTP/1.1 to it
# and stops it at the end, whatever happens. `use RLTest;` exports what the test files use;
# it lives in one package per file under t/lib/RLTest/:
#
#   Util        repo_root module_so slurp spew conf_line_of free_port fresh_key worker_rss
#               avoid_window_edge wait_window_offset; wait_until, settle_value (a condition,
#               a value awaited with a deadline, not slept for); temp dirs; processes: run_cmd (a command with a deadline),
#               stop_child, pid_alive
#   Nginx       start_nginx nginx_t nginx_bin; $n->port/ports/dir/conf/conf_file/error_log,
#               reload stop master_pid worker_pids wait_log log_lines allow_log; $n->get/get_port/
#               keepalive; Redis-test helpers timed resumes_within wait_decided remaining
#               wait_consumed settle_remaining; key_state and api (ratelimit_api); the teardown
#               check (bad_log_lines)
#   Http        http_request parse_sf_list gif_body_ok (request_text parse_head dechunk)
#   KeepAlive   one keep-alive connection: new($port), get, close
#   Clients     statuses run_clients codes tally
#   Redis       start_redis; $r->cli/cmd/keys_matching/wait_asleep/kill_now/restart/stop;
#               the RESP client; start_redis(tls => {...}): a TLS-only server, and the
#               harness's clients speak TLS to it (see its header)
#   RedisCluster  start_redis_cluster: nodes, slots, migrations, failovers (see its header);
#               tls => {...}: every node, the bus and replication over TLS
#   TLS         RLTest::TLS->new: a test PKI made with the openssl CLI (a CA; server, client,
#               expired, wrong-name and untrusted-CA certificates; see its header);
#               $pki->redis_tls(...) is the tls => {...} of start_redis/start_redis_cluster.
#               Not exported: `RLTest::TLS->new` after `use RLTest;`
#   Proxy       start_proxy: a misbehaving Redis in front of a real one (see its header)
#   FakeRedis   a scripted Redis (a hostile Cluster node, Sentinel or TLS server), `use
#               RLTest::FakeRedis qw(start_fake_redis ...);` (see its header)
#   Sentinel    start_sentinel_set: a master, replicas and Sentinels; sentinel_addrs, master,
#               master_addr, kill_master, wait_switch, extra_sentinel (a lone Sentinel naming
#               any server, e.g. a replica, as a master); tls => {...}: servers, replication
#               and Sentinels TLS-only, the harness's clients speaking TLS (see its header)
#   SentinelNode  one redis-sentinel process (RLTest::Sentinel starts them)
#   DNS         start_dns: an authoritative DNS server whose answers the test changes: set,
#               fail, queries, wait_queries, lookup (see its header)
#   SentinelChecks  alternate, exact_on_master, kill_master_under_load: the checks t/71 and
#               t/73 share (two instances in front of a Sentinel set; see its header)
#   Sync        sync-zone helpers, `use RLTest::Sync;` (see its header)
#   Grpc        a gRPC upstream ending calls with a chosen trailer, and a gRPC client
#               (/usr/bin/python3 with python3-grpcio), `use RLTest::Grpc qw(grpc_missing
#               start_grpc grpc_call);` (see its header)
#   Browser     a page in headless Chromium (t/lib/cdp_page.py) and a stand-in for
#               ratelimit_api serving the dashboard, `use RLTest::Browser qw(...);` (see its header)
#   stream{}    start_nginx(undef, stream => ...) (see RLTest::Nginx's header); not exported,
#               each `use`d by the stream tests (see their headers): TcpBackend and UdpBackend
#               (servers behind stream servers that count what arrives and answer; both made
#               of Child, a counting server in a forked child), StreamClient (TCP connections
#               that say how they ended; UDP sockets from fresh ports), ClientHello (a TLS
#               ClientHello with SNI for ssl_preread), ProxyProtocol (PROXY v1 and v2 headers)
#
# This file itself: every test file is bounded in time (RLTEST_TIMEOUT seconds, default
# 150: then it dies, and the END below stops what it started), and the teardown check: at
# done_testing (or at exit without it) every nginx is stopped and one more test checks every
# error.log the file produced (start_nginx, nginx_t) for [alert], [crit], "exited on signal"
# and sanitizer reports, and the sanitizer log files (ASAN_OPTIONS/UBSAN_OPTIONS log_path)
# written since the file started. start_nginx(..., allow_alerts => 1) or
# allow_log => qr/.../ (or $n->allow_log(qr/.../)) lets an instance log alerts on purpose.
# RLTEST_KEEP=1 keeps the temporary directories and prints where they are. NGINX_BIN and
# RATELIMIT_SO choose the nginx binary and the module (default: build/ of this tree).
use strict;
use warnings;
use Exporter 'import';
use RLTest::Util qw(repo_root module_so slurp spew conf_line_of free_port fresh_key worker_rss
  wait_until settle_value avoid_window_edge wait_window_offset kept_dirs run_cmd pid_alive);
use RLTest::Http qw(http_request parse_sf_list gif_body_ok);
use RLTest::KeepAlive;
use RLTest::Clients qw(statuses run_clients codes tally);
use RLTest::Nginx qw(nginx_bin start_nginx nginx_t);
use RLTest::Redis qw(start_redis);
use RLTest::RedisCluster qw(start_redis_cluster);
use RLTest::Proxy ();
use RLTest::TLS ();
use RLTest::Sentinel qw(start_sentinel_set);
use RLTest::DNS qw(start_dns);

our @EXPORT = qw(free_port start_nginx nginx_t module_so repo_root nginx_bin
  run_clients avoid_window_edge wait_window_offset slurp spew http_request
  conf_line_of gif_body_ok parse_sf_list statuses start_redis start_proxy fresh_key codes tally
  worker_rss start_redis_cluster run_cmd pid_alive wait_until settle_value start_sentinel_set start_dns);

my $CREATOR = $$;

# Every test file is bounded in time: after RLTEST_TIMEOUT seconds (default 150) it dies,
# and END below stops its nginx.
$SIG{ALRM} = sub { die "RLTest: test file timed out\n" };
alarm($ENV{RLTEST_TIMEOUT} || 150);

# start_proxy(upstream => $redis_or_port, ...) -> RLTest::Proxy, a misbehaving Redis in front of
# a real one (see t/lib/RLTest/Proxy.pm).
sub start_proxy { return RLTest::Proxy->start(@_) }

# ------------------------------------------------------------- teardown check

my $CHECKED = 0;

# Stops every nginx, then the check: one more test (before done_testing) or, if the file ends
# without done_testing, a diagnostic and a failing exit code.
sub _teardown_check {
    my ($as_test) = @_;
    return if $CHECKED++ || $$ != $CREATOR;
    RLTest::Nginx::stop_all();
    my @bad = RLTest::Nginx::bad_log_lines();
    if ($as_test) {
        Test::More::ok(!@bad, 'teardown: no alert, crit, signal or sanitizer report in any error.log')
          or Test::More::diag(join "\n", @bad);
    } elsif (@bad) {
        print STDERR "# RLTest teardown: alert, crit, signal or sanitizer report:\n# ", join("\n# ", @bad), "\n";
        return 1;
    }
    return 0;
}

# done_testing runs the teardown check first (test files call Test::More's done_testing).
{
    require Test::More;
    no warnings 'redefine';
    my $orig = \&Test::More::done_testing;
    *Test::More::done_testing = sub { _teardown_check(1); goto &$orig };
}

# At the end, in this order: every nginx (then the check, if done_testing did not run it),
# the proxies, the Redis clusters, the Sentinels and their servers, the other redis-servers,
# the DNS servers. This END runs before those of
# the packages above (they were compiled first).
END {
    my $rc = $?;
    if ($$ == $CREATOR) {
        my $fail = _teardown_check(0);
        RLTest::Nginx::stop_all();
        RLTest::Proxy::stop_all();
        RLTest::RedisCluster::stop_all();
        RLTest::Sentinel::stop_all();
        RLTest::Redis::stop_all();
        RLTest::DNS::stop_all();
        print STDERR "# RLTEST_KEEP: kept $_\n" for kept_dirs();
        $rc = 255 if $fail && !$rc;
    }
    $? = $rc;
}

1;
