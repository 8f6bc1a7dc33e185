# stream{}, in-flight zones (concurrency=N): stream limit_conn's behaviour under the mapping of
# "Coming from limit_conn" (nginx-tests' stream_limit_conn.t, _complex.t and _dry_run.t): a
# connection holds a slot from the pre-access phase until it ends, whatever ends it; the next
# one of its key is closed without data ($status 503, the line `limiting connections by zone`);
# another zone, or a zone with a larger number, passes; a chain of servers proxying to each other
# on one host holds a slot at each; a key with $server_port counts per port; dry run lets it
# through, says so in the log and $ratelimit_status; a rate zone beside it: all or nothing.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use RLTest;
use RLTest::StreamClient qw(tcp_outcome tcp_open read_some);
use RLTest::TcpBackend;
use Test::More;

my $backend = RLTest::TcpBackend->start(greet => "hi\n");
my $be = $backend->addr;

my $n = start_nginx(undef, nports => 10, stream => <<"EOF");
    log_format rl '\$server_port \$status \$ratelimit_status';
    access_log %%DIR%%/stream.log rl;

    ratelimit_zone one   key=\$binary_remote_addr concurrency=1;
    ratelimit_zone five  key=\$binary_remote_addr concurrency=5;
    ratelimit_zone other key=\$binary_remote_addr concurrency=1;
    ratelimit_zone port  key=\$binary_remote_addr\$server_port concurrency=1;
    ratelimit_zone dry   key=\$binary_remote_addr concurrency=1;
    ratelimit_zone pair  key=\$binary_remote_addr concurrency=1;
    ratelimit_zone rate  key=\$binary_remote_addr rate=1r/m burst=1;

    server { listen 127.0.0.1:%%PORT%%;  ratelimit zone=one;   proxy_pass $be; }
    server { listen 127.0.0.1:%%PORT1%%; ratelimit zone=five;  proxy_pass $be; }
    server { listen 127.0.0.1:%%PORT2%%; ratelimit zone=other; proxy_pass $be; }
    # a chain: PORT3 (other) -> PORT (one); PORT4 (one) -> PORT (one)
    server { listen 127.0.0.1:%%PORT3%%; ratelimit zone=other; proxy_pass 127.0.0.1:%%PORT%%; }
    server { listen 127.0.0.1:%%PORT4%%; ratelimit zone=one;   proxy_pass 127.0.0.1:%%PORT%%; }
    server { listen 127.0.0.1:%%PORT5%%; ratelimit zone=port;  proxy_pass $be; }
    server { listen 127.0.0.1:%%PORT6%%; ratelimit zone=port;  proxy_pass $be; }
    server { listen 127.0.0.1:%%PORT7%%; ratelimit zone=dry; ratelimit_dry_run on; proxy_pass $be; }
    server { listen 127.0.0.1:%%PORT8%%; ratelimit zone=pair; ratelimit zone=rate; proxy_pass $be; }
EOF
my @p = $n->ports;

# A connection through nginx: 'hi' (the backend's greeting: it passed), 'closed' (no data), ...
sub try { my ($port) = @_; return tcp_outcome($port, want => 3) }
# A connection held open once it passed (its greeting read), or undef.
sub hold {
    my ($port) = @_;
    my $s = tcp_open($port);
    my ($data) = read_some($s, want => 3, timeout => 3);
    return $data eq "hi\n" ? $s : undef;
}
sub logged {
    my ($port, $count) = @_;
    return join ', ', map { s/^\d+ //r } $n->log_lines('stream.log', qr/^$port /, $count);
}
# Closes a held connection and waits until nginx logged its end: its slot is back by then (the
# access log is written as the session is finalized, just before its pool and slot go).
sub release {
    my ($s, $port, $count) = @_;
    close $s if $s;
    my @l = $n->log_lines('stream.log', qr/^$port /, $count);
    return @l >= $count;
}

# stream_limit_conn.t: passed; a long connection; rejected in the same zone; another zone and
# a larger number pass; the long connection closed.
is(try($p[0]), 'hi', 'passed');
ok(release(undef, $p[0], 1), '... and logged');
my $long = hold($p[0]);
ok($long, 'a long connection holds the slot');
is(try($p[0]), 'closed', 'rejected: same zone, same key');
is(try($p[2]), 'hi', 'passed: another zone');
is(try($p[1]), 'hi', 'passed: a zone of the same key with a larger number');
like($n->error_log, qr/\[error\] \d+#\d+: \*\d+ limiting connections by zone "one" while initializing session, client: 127\.0\.0\.1, server: 127\.0\.0\.1:$p[0]$/m,
     "the line: stream limit_conn's");
ok(release($long, $p[0], 3), 'the long connection closed');
is(logged($p[0], 3), '200 PASSED, 503 REJECTED, 200 PASSED', 'access log: PASSED, REJECTED (503), PASSED');
is(try($p[0]), 'hi', 'its slot is back: passed again');
ok(release(undef, $p[0], 4), '... and ended');

# The proxy chain on one host: PORT3 (other) -> PORT (one) passes; PORT4 (one) -> PORT (one):
# the second hop finds the slot of 127.0.0.1 taken by the first, and the client gets nothing.
is(try($p[3]), 'hi', 'chain: passed through two zones');
ok(release(undef, $p[0], 5) && release(undef, $p[3], 1), 'chain: both hops ended');
is(try($p[4]), 'closed', 'chain: rejected at the second hop of the same zone');
ok(release(undef, $p[4], 1), 'chain: ended');
is((split /, /, logged($p[0], 6))[5], '503 REJECTED', 'chain: the second hop rejected it');
is(logged($p[4], 1), '200 PASSED', 'chain: the first hop passed it');

# $binary_remote_addr$server_port: a slot per port.
{
    my $held = hold($p[5]);
    ok($held, 'complex key: one held on the first port');
    is(try($p[5]), 'closed', 'complex key: rejected on the same port');
    is(try($p[6]), 'hi', 'complex key: passed on the other port');
    close $held;
}

# stream_limit_conn_dry_run.t: passed, then a second at once passes too and is logged as dry run.
{
    my $held = hold($p[7]);
    is(try($p[7]), 'hi', 'dry run: passed although the slot is held');
    like($n->error_log, qr/limiting connections, dry run, by zone "dry" while initializing session, client: 127\.0\.0\.1/,
         'dry run: the line');
    ok(release($held, $p[7], 2), 'dry run: both ended');
    # (in either order: the second usually ends first, but nothing makes it)
    is(join(', ', sort split /, /, logged($p[7], 2)), '200 PASSED, 200 REJECTED_DRY_RUN',
       'dry run: $ratelimit_status PASSED for the first, REJECTED_DRY_RUN for the second');
}

# With a rate zone: all or nothing. The rate admits 2 (burst 1); one held takes the slot and a
# unit; a second, rejected for want of a slot, takes no unit; so once the slot is back the
# second unit is there for one more, and then the rate rejects.
{
    my $held = hold($p[8]);
    ok($held, 'pair: one held (slot 1/1, rate 1 of 2)');
    is(try($p[8]), 'closed', 'pair: rejected for want of a slot: the rate is not consumed');
    ok(release($held, $p[8], 2), 'pair: the held one ends');
    is(try($p[8]), 'hi', 'pair: the rate\'s second unit is still there');
    ok(release(undef, $p[8], 3), 'pair: it ended, its slot is back');
    is(try($p[8]), 'closed', 'pair: then the rate rejects');
    like($n->error_log, qr/limiting connections, excess: 1\.99\d by zone "rate"/, 'pair: the last by the rate zone');
}

done_testing;
