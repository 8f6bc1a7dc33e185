# stream{}, at=accept (the default): a new TCP connection decided in the pre-access phase,
# before anything is read. burst + 1 connections pass, the next are closed without data (as
# nginx-tests' stream_limit_conn.t), or reset with `ratelimit_reject reset`; $status is
# ratelimit_status; the log line is limit_req's shape with nginx's stream context; dry run; log
# level; empty keys exempt; PROXY protocol and realip keys; delay= holds a connection before it
# is read.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use RLTest;
use RLTest::StreamClient qw(tcp_talk tcp_outcome);
use RLTest::ProxyProtocol qw(pp_v1 pp_v2);
use RLTest::TcpBackend;
use Test::More;

my $backend = RLTest::TcpBackend->start;
my $be = $backend->addr;

my $n = start_nginx(undef, nports => 10, stream => <<"EOF");
    log_format rl '\$server_port \$status \$ratelimit_status \$remote_addr';
    access_log %%DIR%%/stream.log rl;

    ratelimit_zone basic  key=\$binary_remote_addr rate=1r/m burst=2;
    ratelimit_zone rst    key=\$binary_remote_addr rate=1r/m;
    ratelimit_zone dry    key=\$binary_remote_addr rate=1r/m;
    ratelimit_zone warned key=\$binary_remote_addr rate=1r/m;
    ratelimit_zone ex     key=\$exkey rate=1r/m;
    ratelimit_zone pp     key=\$proxy_protocol_addr rate=1r/m burst=1;
    ratelimit_zone rip    key=\$binary_remote_addr rate=1r/m;
    ratelimit_zone slow   key=\$binary_remote_addr rate=2r/s burst=3;

    map \$server_port \$exkey {
        %%PORT4%%  "";
        default    \$binary_remote_addr;
    }

    server { listen 127.0.0.1:%%PORT%%;  ratelimit zone=basic; return "ok\\n"; }
    server { listen 127.0.0.1:%%PORT1%%; ratelimit zone=rst; ratelimit_reject reset; ratelimit_status 502;
             return "ok\\n"; }
    server { listen 127.0.0.1:%%PORT2%%; ratelimit zone=dry; ratelimit_dry_run on; return "ok\\n"; }
    server { listen 127.0.0.1:%%PORT3%%; ratelimit zone=warned; ratelimit_log_level warn; return "ok\\n"; }
    server { listen 127.0.0.1:%%PORT4%%; ratelimit zone=ex; return "ok\\n"; }
    server { listen 127.0.0.1:%%PORT5%%; ratelimit zone=ex; return "ok\\n"; }
    server { listen 127.0.0.1:%%PORT6%% proxy_protocol; ratelimit zone=pp; return "\$proxy_protocol_addr\\n"; }
    server { listen 127.0.0.1:%%PORT7%% proxy_protocol; set_real_ip_from 127.0.0.1;
             ratelimit zone=rip; return "\$remote_addr\\n"; }
    server { listen 127.0.0.1:%%PORT8%%; ratelimit zone=slow delay=1; proxy_pass $be; }
EOF
my @p = $n->ports;

# What each connection got: 'ok' (the server's data, then its close), 'closed' (closed with no
# data), 'reset', or what else happened.
sub outcomes { my ($port, $count, %o) = @_; return join ' ', map { tcp_outcome($port, %o) } 1 .. $count }

# The access log's lines of a server: "$status $ratelimit_status $remote_addr", in order.
sub logged {
    my ($port, $count) = @_;
    return join ', ', map { s/^\d+ //r } $n->log_lines('stream.log', qr/^$port /, $count);
}

my $ctx = 'while initializing session, client: 127\.0\.0\.1';

# burst=2: three pass, the next two are closed without a byte.
is(outcomes($p[0], 5), 'ok ok ok closed closed', 'burst + 1 connections pass, the next are closed with no data');
is(logged($p[0], 5), '200 PASSED 127.0.0.1, ' x 3 . '503 REJECTED 127.0.0.1, 503 REJECTED 127.0.0.1',
   'access log: $status 200 / 503 (ratelimit_status), $ratelimit_status PASSED / REJECTED');
my @lines = $n->error_log =~ /^(.*limiting connections.*"basic".*)$/mg;
is(scalar @lines, 2, 'one error line per rejected connection');
like($lines[0] // '', qr/\[error\] \d+#\d+: \*\d+ limiting connections, excess: 2\.99\d by zone "basic" $ctx, server: 127\.0\.0\.1:$p[0]$/,
     "the line: limit_req's shape, stream's context (client, server)") or diag($lines[0]);

# ratelimit_reject reset: an RST (ECONNRESET), no TIME_WAIT left behind; ratelimit_status 502.
is(outcomes($p[1], 2), 'ok reset', 'ratelimit_reject reset: the client reads ECONNRESET');
is(logged($p[1], 2), '200 PASSED 127.0.0.1, 502 REJECTED 127.0.0.1', 'ratelimit_status 502 is the session\'s $status');

# Dry run: every connection goes on; the lines say so.
is(outcomes($p[2], 3), 'ok ok ok', 'dry run: nothing closed');
is(logged($p[2], 3), '200 PASSED 127.0.0.1, 200 REJECTED_DRY_RUN 127.0.0.1, 200 REJECTED_DRY_RUN 127.0.0.1',
   'dry run: $ratelimit_status REJECTED_DRY_RUN, $status 200');
like($n->error_log, qr/\[error\] .* limiting connections, dry run, excess: 0\.99\d by zone "dry" $ctx, server: 127\.0\.0\.1:$p[2]$/m,
     'dry run: the line says "dry run"');

# ratelimit_log_level warn.
is(outcomes($p[3], 2), 'ok closed', 'log level warn: rejected');
like($n->error_log, qr/\[warn\] .* limiting connections, excess: 0\.99\d by zone "warned" $ctx/m, 'logged at warn');
unlike($n->error_log, qr/\[error\] .*"warned"/, 'and not at error');

# An empty key is exempt from the zone: unlimited there, while the zone limits its other keys.
is(outcomes($p[4], 4), 'ok ok ok ok', 'empty key: no limit');
is(logged($p[4], 4), join(', ', ('200 EXEMPT 127.0.0.1') x 4), 'empty key: $ratelimit_status EXEMPT');
is(outcomes($p[5], 2), 'ok closed', 'the same zone limits a key that is not empty');

# PROXY protocol: the key is the address the header names (v1 and v2), not the peer's.
is(outcomes($p[6], 3, send => pp_v1('10.0.0.1', '10.0.0.9', 40000, 443)), '10.0.0.1 10.0.0.1 closed',
   'PROXY v1: $proxy_protocol_addr keyed, burst + 1 pass');
is(outcomes($p[6], 3, send => pp_v2('10.0.0.2', '10.0.0.9', 40000, 443)), '10.0.0.2 10.0.0.2 closed',
   'PROXY v2: another key, its own burst + 1');
is(outcomes($p[6], 1, send => pp_v1('2001:db8::7', '2001:db8::9', 40000, 443)), '2001:db8::7', 'PROXY v1 TCP6: a key of its own');

# realip from the PROXY header: $binary_remote_addr is the client the header names, and the
# log line names it.
is(outcomes($p[7], 2, send => pp_v2('10.0.0.3', '10.0.0.9', 40000, 443)), '10.0.0.3 closed', 'realip: keyed on the real client');
is(outcomes($p[7], 1, send => pp_v1('10.0.0.4', '10.0.0.9', 40000, 443)), '10.0.0.4', 'realip: another client passes');
like($n->error_log, qr/limiting connections, excess: 0\.99\d by zone "rip" while initializing session, client: 10\.0\.0\.3, server: /,
     'realip: the line names the real client');
is(logged($p[7], 3), '200 PASSED 10.0.0.3, 503 REJECTED 10.0.0.3, 200 PASSED 10.0.0.4', 'realip: the access log too');

# delay=1 (rate 2r/s, burst 3): the first two at once, the next held before anything is read:
# the backend sees its connection only once the delay is over; beyond the burst, closed.
{
    my @r = map { tcp_talk($p[8], send => "d$_\n", want => 0, timeout => 3) } 1 .. 2;
    my $t0 = Time::HiRes::time();
    my $held = RLTest::StreamClient::tcp_open($p[8], "d3\n");
    ok(!$backend->wait_for(sub { $_[0]{tags}{d3} }, 0.25), 'delay: the delayed connection is not proxied at once');
    my $s = $backend->wait_for(sub { $_[0]{tags}{d3} }, 3);
    my $ms = int((Time::HiRes::time() - $t0) * 1000);
    ok($s && $ms >= 300, "delay: proxied after its delay (${ms} ms, 500 due)");
    close $held;
    is(logged($p[8], 3), '200 PASSED 127.0.0.1, 200 PASSED 127.0.0.1, 200 DELAYED 127.0.0.1',
       'delay: $ratelimit_status DELAYED');
    like($n->error_log, qr/\[warn\] .* delaying connection, excess: 1\.\d{3}, by zone "slow", delay 0\.\d{3}s/,
         'delay: logged a level below the rejections (warn)');
}

done_testing;
