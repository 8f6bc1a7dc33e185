# stream{} over UDP. at=accept decides each new session (a client address and port): clients from
# fresh ports at 10x the limit, and the backend sees exactly the limit; a rejected session gets
# nothing back and its next datagram opens a new session, decided again. at=datagram decides each
# datagram of an admitted session: one session at 10x, the backend sees exactly the limit,
# $ratelimit_dropped counts the rest, a line a second says so; dry run passes them all. An
# in-flight zone holds a slot per session until it ends (nginx-tests' stream_udp_limit_conn.t).
# Listens are reuseport: a client's datagrams reach one worker, so it is one session.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use RLTest;
use RLTest::StreamClient qw(udp_socket);
use IO::Select;
use RLTest::UdpBackend;
use Test::More;
use Time::HiRes qw(sleep);

my $echo  = RLTest::UdpBackend->start(replies => 1);
my $quiet = RLTest::UdpBackend->start(replies => 0);
my ($ea, $qa) = ($echo->addr, $quiet->addr);

my $n = start_nginx(undef, stream => <<"EOF");
    log_format rl '\$server_port \$status \$ratelimit_status \$ratelimit_dropped';
    access_log %%DIR%%/stream.log rl;

    ratelimit_zone sess  key=\$binary_remote_addr rate=1r/m burst=4;
    ratelimit_zone dg    key=\$binary_remote_addr rate=1r/m burst=9;
    ratelimit_zone dgdry key=\$binary_remote_addr rate=1r/m burst=9;
    ratelimit_zone uconc key=\$binary_remote_addr concurrency=1;

    server { listen 127.0.0.1:%%PORT%% udp reuseport; proxy_pass $ea; proxy_responses 1; proxy_timeout 3s;
             ratelimit zone=sess; }
    server { listen 127.0.0.1:%%PORT1%% udp reuseport; proxy_pass $ea; proxy_timeout 1s;
             ratelimit zone=dg at=datagram; }
    server { listen 127.0.0.1:%%PORT2%% udp reuseport; proxy_pass $ea; proxy_timeout 1s;
             ratelimit zone=dgdry at=datagram; ratelimit_dry_run on; }
    server { listen 127.0.0.1:%%PORT3%% udp reuseport; proxy_pass $qa; proxy_timeout 1s;
             ratelimit zone=uconc; }
EOF
my @p = $n->ports;

sub tagged { my ($s, $prefix) = @_; my $t = $s->{tags}; return scalar grep { /^$prefix\d+$/ } keys %$t }
sub logged { my ($port, $count) = @_; return map { s/^\d+ //r } $n->log_lines('stream.log', qr/^$port /, $count) }
sub count_of { my ($what, @l) = @_; return scalar grep { $_ eq $what } @l }

# 50 clients from fresh ports (sockets kept open: no port is used twice), 10x burst + 1.
{
    my @socks = map { udp_socket($p[0]) } 1 .. 50;
    send($socks[$_ - 1], "s$_", 0) for 1 .. 50;
    my $s = $echo->wait_for(sub { tagged($_[0], 's') >= 5 }, 3);
    sleep 0.3;    # anything more would come now
    is(tagged($echo->stats, 's'), 5, 'fresh ports at 10x: the backend saw exactly burst + 1 sessions');
    # Replies read from all at once until none came for 0.5 s.
    my $sel = IO::Select->new(@socks);
    my %replied;
    while (my @ready = $sel->can_read(0.5)) {
        for my $sock (@ready) { $replied{$sock} = 1 if defined recv($sock, my $buf, 100, 0) }
    }
    is(scalar keys %replied, 5, 'those five got their reply, the 45 rejected nothing');
    my @l = logged($p[0], 50);
    is(count_of('200 PASSED 0', @l) . ' ' . count_of('503 REJECTED 0', @l), '5 45', 'access log: 5 PASSED, 45 REJECTED (503)');
    like($n->error_log, qr/\[error\] \d+#\d+: \*\d+ limiting connections, excess: 4\.99\d by zone "sess" while initializing session, udp client: 127\.0\.0\.1, server: 127\.0\.0\.1:$p[0]$/m,
         'the line: the stream context of a UDP session');
    # A rejected session is gone: its client's next datagram opens a new one, decided again.
    send($socks[-1], "again$_", 0) for 1 .. 3;
    @l = logged($p[0], 53);
    is(count_of('503 REJECTED 0', @l), 48, 'a rejected client\'s next datagrams: new sessions, rejected again');
    ok(!$echo->wait_for(sub { tagged($_[0], 'again') }, 0.3), '... none reached the backend');
}

# One session at 10x: 100 datagrams, the backend sees the first 10 (burst 9), the rest dropped.
{
    my $c = udp_socket($p[1]);
    send($c, "g$_ " . ('x' x 20), 0) for 1 .. 100;
    my $s = $echo->wait_for(sub { tagged($_[0], 'g') >= 10 }, 3);
    sleep 0.3;
    $s = $echo->stats;
    is(tagged($s, 'g'), 10, 'one session at 10x: the backend saw exactly 10 datagrams');
    is(join(',', sort { $a <=> $b } map { /^g(\d+)$/ ? $1 : () } keys %{ $s->{tags} }), join(',', 1 .. 10), '... the first 10');
    # The session ends after proxy_timeout (1 s idle): its $ratelimit_dropped.
    is(join(' ', logged($p[1], 1, 5)), '200 - 90', '$ratelimit_dropped: 90 (and no session verdict: only datagrams limited)');
    my @drops = $n->error_log =~ /limiting datagrams by zone "dg", (\d+) dropped since the last line while proxying/g;
    ok(@drops >= 1 && $drops[0] == 1, 'the first drop is logged at once ("1 dropped")') or diag("@drops");
    cmp_ok(scalar @drops, '<=', 4, 'then a line a second at most (' . scalar(@drops) . ' lines)');
    my $sum = 0;
    $sum += $_ for @drops;
    cmp_ok($sum, '<=', 90, "the lines count no more than were dropped ($sum)");
}

# Dry run: all 100 pass; nothing dropped; the line says dry run.
{
    my $c = udp_socket($p[2]);
    send($c, "h$_", 0) for 1 .. 100;
    my $s = $echo->wait_for(sub { tagged($_[0], 'h') >= 100 }, 5);
    is($s ? tagged($s, 'h') : tagged($echo->stats, 'h'), 100, 'dry run: every datagram passed');
    is(join(' ', logged($p[2], 1, 5)), '200 - 0', 'dry run: $ratelimit_dropped 0');
    like($n->error_log, qr/limiting datagrams, dry run, by zone "dgdry", 1 dropped since the last line/, 'dry run: logged as such');
}

# In flight: a session holds its slot until it ends (proxy_timeout 1 s without a reply).
{
    my $a = udp_socket($p[3]);
    send($a, 'c1', 0);
    ok($quiet->wait_for(sub { $_[0]{tags}{c1} }, 3), 'in flight: the first session passes');
    my $b = udp_socket($p[3]);
    send($b, 'c2', 0);
    send($a, 'c1b', 0);    # the same session: no new slot needed
    ok($quiet->wait_for(sub { $_[0]{tags}{c1b} }, 3), 'its next datagram: the same session, passed');
    my @l = logged($p[3], 1);
    is("@l", '503 REJECTED 0', 'a second session (another port) is rejected while the first holds the slot');
    like($n->error_log, qr/\[error\] .* limiting connections by zone "uconc" while initializing session, udp client: 127\.0\.0\.1, server: 127\.0\.0\.1:$p[3]$/m,
         "the line: stream limit_conn's words");
    ok(!$quiet->stats->{tags}{c2}, '... its datagram never reached the backend');
    @l = logged($p[3], 2, 5);
    is($l[1] // '', '200 PASSED 0', 'the first session ends (proxy_timeout)');
    my $c = udp_socket($p[3]);
    send($c, 'c3', 0);
    ok($quiet->wait_for(sub { $_[0]{tags}{c3} }, 3), 'its slot is back: a new session passes');
}

done_testing;
