# stream{} with Redis: two nginx (2 workers each) share one limit. Per request (a standalone
# Redis, and a Cluster): TCP connections hammered at both at once, exactly burst + 1 admitted;
# UDP sessions from fresh ports decided in Redis, exactly the limit reaches the backend. Sync
# (optimistic): decided in shared memory, at most the documented overshoot (a window: hosts x
# the limit), and Redis counts exactly what both admitted; then both reject; datagrams too.
# ratelimit_on_error allow, deny and local with Redis down. A blackholed Redis: a connection
# waits at most `timeout`, and nothing it sent reaches the backend before its verdict.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use RLTest;
use RLTest::Sync qw(zone_count settle);
use RLTest::StreamClient qw(tcp_outcome tcp_storm tcp_open read_some udp_socket);
use RLTest::ClientHello qw(client_hello);
use RLTest::TcpBackend;
use RLTest::UdpBackend;
use Test::More;
use Time::HiRes qw(time sleep);

my $margin_ms = 400;    # scheduling slack of a loaded 2-core test machine
my $redis   = start_redis();
my $cluster = start_redis_cluster(primaries => 3);
my $seeds   = $cluster->seeds;
my $udp     = RLTest::UdpBackend->start(replies => 0);
my $ua      = $udp->addr;
my $rp      = $redis->port;
my $held    = RLTest::TcpBackend->start(greet => "hi\n");
my $ba      = $held->addr;

my $stream = <<"EOF";
    log_format rl '\$server_port \$status \$ratelimit_status';
    access_log %%DIR%%/stream.log rl;

    ratelimit_redis main 127.0.0.1:$rp timeout=500ms;
    ratelimit_redis cl cluster $seeds timeout=500ms;
    ratelimit_zone pr  key=\$binary_remote_addr rate=1r/m burst=9 redis=main;
    ratelimit_zone cz  key=\$binary_remote_addr rate=1r/m burst=9 redis=cl;
    ratelimit_zone sy  key=\$binary_remote_addr requests=10 period=1h algo=fixed redis=main sync=50ms;
    ratelimit_zone us  key=\$binary_remote_addr rate=1r/m burst=2 redis=main;
    ratelimit_zone dsy key=\$binary_remote_addr requests=10 period=1h algo=fixed redis=main sync=50ms;
    ratelimit_zone rc  key=\$binary_remote_addr concurrency=1 redis=main hold=5s;
    ratelimit_zone rs  key=\$ssl_preread_server_name rate=1r/m burst=4 redis=main;

    server { listen 127.0.0.1:%%PORT%%;  ratelimit zone=pr; return "ok\\n"; }
    server { listen 127.0.0.1:%%PORT1%%; ratelimit zone=cz; return "ok\\n"; }
    server { listen 127.0.0.1:%%PORT2%%; ratelimit zone=sy; return "ok\\n"; }
    server { listen 127.0.0.1:%%PORT3%% udp reuseport; ratelimit zone=us; proxy_pass $ua; proxy_responses 0; }
    server { listen 127.0.0.1:%%PORT4%% udp reuseport; ratelimit zone=dsy at=datagram; proxy_pass $ua; proxy_timeout 1s; }
    server { listen 127.0.0.1:%%PORT5%%; ratelimit zone=rc; proxy_pass $ba; }
    server { listen 127.0.0.1:%%PORT6%%; ssl_preread on; ratelimit zone=rs at=preread;
             return "[\$ssl_preread_server_name]\\n"; }
EOF
my $n1 = start_nginx(undef, nports => 7, stream => $stream);
my $n2 = start_nginx(undef, nports => 7, stream => $stream);
my @p1 = $n1->ports;
my @p2 = $n2->ports;

sub summary { my ($c) = @_; return join ' ', map { "$_=$c->{$_}" } sort keys %$c }

# Per request: 6 clients at once, 10 connections each, over both hosts.
{
    my $c = tcp_storm([$p1[0], $p2[0]], 6, 10);
    is(summary($c), 'closed=50 ok=10', 'Redis per request: exactly 10 of 60 connections to two hosts admitted');
    $c = tcp_storm([$p1[1], $p2[1]], 6, 10);
    is(summary($c), 'closed=50 ok=10', 'Redis Cluster: exactly 10 of 60 admitted');
    my @keys = $cluster->scan('rl:{cz:*');
    is(scalar @keys, 1, 'Cluster: one key, on its slot\'s primary');
    # at=preread in Redis, keyed on the SNI name: the wait resumes the preread stage.
    my $hello = client_hello(sni => 'r.example');
    $c = tcp_storm([$p1[6], $p2[6]], 6, 5, send => $hello);
    $c->{closed} += delete $c->{reset} // 0;    # (a close with the ClientHello unread: nginx 1.25.5+)
    is(summary($c), '[r.example]=5 closed=25', 'at=preread in Redis: exactly 5 of 30 ClientHellos named r.example admitted');
}

# UDP sessions decided in Redis: 12 fresh ports over both hosts, 3 reach the backend.
{
    my @socks = map { udp_socket($_ % 2 ? $p1[3] : $p2[3]) } 1 .. 12;
    send($socks[$_ - 1], "u$_", 0) for 1 .. 12;
    $udp->wait_for(sub { $_[0]{datagrams} >= 3 }, 3);
    is($udp->settled(3), 3, 'UDP sessions in Redis: exactly burst + 1 of 12 reached the backend');
    is(scalar($n1->log_lines('stream.log', qr/^$p1[3] /, 6)) + scalar($n2->log_lines('stream.log', qr/^$p2[3] /, 6)), 12,
       'every session logged');
    $udp->reset;
}

# Sync (optimistic): decided in shared memory; the window's overshoot is bounded by hosts x
# limit, and Redis ends up counting exactly what both hosts admitted.
{
    avoid_window_edge(3600, 30);    # its units are counted in one hour's window
    my $z = { name => 'sy', algo => 'fixed', requests => 10, period => 3600, sync => 0.05 };
    my $c = tcp_storm([$p1[2], $p2[2]], 6, 10);
    my $admitted = $c->{ok} // 0;
    ok($admitted >= 10 && $admitted <= 20, "sync: $admitted of 60 admitted (10 to 20: a window's bound for two hosts)")
      or diag(summary($c));
    is((settle($redis, $z, $admitted))[1], $admitted, 'sync: Redis counts exactly what both admitted');
    # Once each host's view holds the other's units, both reject: a host admits again only
    # while its view lags (each such admission is counted in Redis too).
    my $more = 0;
    for my $port ($p1[2], $p2[2]) {
        for (1 .. 20) {
            last if tcp_outcome($port) eq 'closed';
            $more++;
            sleep 0.1;
        }
    }
    is(tcp_outcome($p1[2]) . ' ' . tcp_outcome($p2[2]), 'closed closed', "sync: then both hosts reject ($more more admitted meanwhile)");
    is((settle($redis, $z, $admitted + $more))[1], $admitted + $more, 'sync: Redis counts those too');
    cmp_ok($admitted + $more, '<=', 20, 'sync: within the bound in all');
}

# Datagrams in a sync zone: one session per host, 30 datagrams each; Redis counts what passed.
{
    avoid_window_edge(3600, 30);    # its units are counted in one hour's window
    my $z = { name => 'dsy', algo => 'fixed', requests => 10, period => 3600, sync => 0.05 };
    my ($a, $b) = (udp_socket($p1[4]), udp_socket($p2[4]));
    for my $i (1 .. 30) { send($a, "a$i", 0); send($b, "b$i", 0) }
    $udp->wait_for(sub { $_[0]{datagrams} >= 10 }, 3);
    my $seen = $udp->settled(20, 1);
    ok($seen >= 10 && $seen <= 20, "datagrams, sync: $seen of 60 passed (10 to 20)");
    is((settle($redis, $z, $seen))[1], $seen, 'datagrams, sync: Redis counts exactly what passed');
}

# In flight across hosts (concurrency=1 redis=): a connection held on one host takes the slot;
# the other host rejects; once it closes (its member removed from Redis), the other passes.
{
    my $s = tcp_open($p1[5]);
    my ($data) = read_some($s, want => 3, timeout => 3);
    is($data, "hi\n", 'in flight, Redis: a connection held on the first host');
    is(tcp_outcome($p2[5], want => 3), 'closed', 'in flight, Redis: the second host rejects the same key');
    like($n2->error_log, qr/limiting connections by zone "rc" while initializing session, client: 127\.0\.0\.1/,
         'in flight, Redis: the line');
    my $slots = sub { my $k = 0; $k += ($redis->cmd('ZCARD', $_))[1] // 0 for $redis->keys_matching('rl:{rc:*'); $k };
    is($slots->(), 1, 'in flight, Redis: one member in Redis');
    close $s;
    # The slot goes when the first host's session ends (a ZREM, not waited for): awaited.
    is(settle_value($slots, 0), 0, 'in flight, Redis: given back when the connection ended');
    is(tcp_outcome($p2[5], want => 3), 'hi', 'in flight, Redis: the other host passes');
}

# ratelimit_on_error with Redis down (nothing listens on its port).
{
    my $down = free_port();
    my $n = start_nginx(undef, stream => <<"EOF");
    log_format rl '\$server_port \$status \$ratelimit_status';
    access_log %%DIR%%/stream.log rl;
    ratelimit_redis down 127.0.0.1:$down timeout=100ms;
    ratelimit_zone ea key=\$binary_remote_addr rate=1r/m burst=1 redis=down;
    ratelimit_zone ed key=\$binary_remote_addr rate=1r/m burst=1 redis=down;
    ratelimit_zone el key=\$binary_remote_addr rate=1r/m burst=1 redis=down;
    server { listen 127.0.0.1:%%PORT%%;  ratelimit_on_error allow; ratelimit zone=ea; return "ok\\n"; }
    server { listen 127.0.0.1:%%PORT1%%; ratelimit_on_error deny;  ratelimit zone=ed; return "ok\\n"; }
    server { listen 127.0.0.1:%%PORT2%%; ratelimit_on_error local; ratelimit zone=el; return "ok\\n"; }
EOF
    my @p = $n->ports;
    is(join(' ', map { tcp_outcome($p[0]) } 1 .. 3), 'ok ok ok', 'on_error allow: passed');
    is(join(' ', map { tcp_outcome($p[1]) } 1 .. 2), 'closed closed', 'on_error deny: closed');
    is(join(' ', map { tcp_outcome($p[2]) } 1 .. 3), 'ok ok closed', 'on_error local: the zone\'s limit in shared memory');
    my $l = sub { my ($port, $k) = @_; join ', ', map { s/^\d+ //r } $n->log_lines('stream.log', qr/^$port /, $k) };
    is($l->($p[0], 3), '200 ERROR, 200 ERROR, 200 ERROR', 'allow: $ratelimit_status ERROR');
    is($l->($p[1], 2), '503 ERROR, 503 ERROR', 'deny: $status 503, $ratelimit_status ERROR');
    is($l->($p[2], 3), '200 ERROR, 200 ERROR, 503 ERROR', 'local: the third rejected locally (503), all ERROR');
}

# A blackholed Redis: connected, then silent. A connection waits `timeout` (300 ms) at most,
# and what it sent reaches the backend only after its verdict.
{
    my $proxy = start_proxy(upstream => $redis);
    my $backend = RLTest::TcpBackend->start(greet => "hi\n");
    my ($pa, $be) = ($proxy->addr, $backend->addr);
    my $n = start_nginx(undef, stream => <<"EOF");
    log_format rl '\$server_port \$status \$ratelimit_status';
    access_log %%DIR%%/stream.log rl;
    ratelimit_redis bh $pa timeout=300ms;
    ratelimit_zone bz key=\$binary_remote_addr rate=1r/m burst=99 redis=bh;
    server { listen 127.0.0.1:%%PORT%%;  ratelimit_on_error allow; ratelimit zone=bz; proxy_pass $be; }
    server { listen 127.0.0.1:%%PORT1%%; ratelimit_on_error deny;  ratelimit zone=bz; return "ok\\n"; }
    server { listen 127.0.0.1:%%PORT2%%; ssl_preread on; ratelimit_on_error allow; ratelimit zone=bz at=preread;
             return "[\$ssl_preread_server_name]\\n"; }
EOF
    my @p = $n->ports;
    # Decided in Redis through the proxy first (the workers connected at their start).
    is(join(' ', map { tcp_outcome($p[1]) } 1 .. 4), 'ok ok ok ok', 'through the proxy: passed');
    is(scalar(my @l = $n->log_lines('stream.log', qr/^$p[1] 200 PASSED$/, 4)), 4, '... decided in Redis (PASSED)');
    $proxy->mode('silent');

    my $t0 = time;
    my $s = tcp_open($p[0], "late\n");
    ok(!$backend->wait_for(sub { $_[0]{accepted} }, 0.15), 'blackholed: nothing reaches the backend while it waits');
    my ($data) = read_some($s, want => 3, timeout => 3);
    my $ms = int((time - $t0) * 1000);
    close $s;
    is($data, "hi\n", 'on_error allow: proxied after the timeout');
    ok($ms >= 250 && $ms < 300 + $margin_ms, "... after ${ms} ms (timeout 300 ms)");
    ok($backend->wait_for(sub { $_[0]{tags}{late} }, 3), '... with what it had sent before');
    $t0 = time;
    my $r = tcp_outcome($p[1]);
    $ms = int((time - $t0) * 1000);
    is($r, 'closed', 'on_error deny: closed');
    ok($ms >= 250 && $ms < 300 + $margin_ms, "... after ${ms} ms");
    @l = $n->log_lines('stream.log', qr/ ERROR$/, 2);
    is(join(', ', map { s/^\d+ //r } @l), '200 ERROR, 503 ERROR', 'logged: ERROR, 503 for deny');
    # at=preread: the wait comes after the ClientHello, and is as bounded.
    $t0 = time;
    $r = tcp_outcome($p[2], send => client_hello(sni => 'q.example'));
    $ms = int((time - $t0) * 1000);
    is($r, '[q.example]', 'at=preread, on_error allow: the content after the timeout');
    ok($ms >= 250 && $ms < 300 + $margin_ms, "... after ${ms} ms");
}

done_testing;
