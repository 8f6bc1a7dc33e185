# The Cluster node table is bounded (issue 30, finding 3): a hostile seed node (RLTest::FakeRedis)
# answers each CLUSTER SLOTS with 20,000 ranges naming 20,000 node addresses never seen before
# (127.x.y.z, port 1: loopback, refused), 100 answers in a row, while requests keep the map
# being asked again (each is routed to a refused node: a refresh soon after). A worker keeps
# 1024 nodes at most (kMaxNodes, cluster.cpp) and drops those the map no longer names, so its
# memory stays flat, and /ping, a location without limits, keeps answering as fast as before.
# Before the fix each answer added its 20,000 nodes for good (~10 MB), and looking them up
# took the worker seconds.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use RLTest;
use RLTest::FakeRedis qw(start_fake_redis resp_bulk resp_array resp_int);
use Test::More;
use Time::HiRes qw(time sleep);

my $ANSWERS = 100;
my $PER     = 20000;
# The bound: kB the worker may grow from its warm point (the 5th hostile answer: the largest
# reply's memory is taken by then) to its last answer, far below one answer's nodes before the
# fix (~10 MB). Under AddressSanitizer freed memory waits in its quarantine (256 MB) before it
# is reused, so the worker grows until that is full: there the warm point is the 40th answer.
# Past $abort kB of growth the flood stops (a regression must not take the machine's memory).
my $asan = ($ENV{LD_PRELOAD} // '') =~ /libasan/;
my ($warm_at, $max_growth, $abort) = $asan ? (40, 32 * 1024, 640 * 1024) : (5, 8 * 1024, 64 * 1024);

# A flood answer: PER ranges of one slot each (past the 16384 slots: overlapping), each on a
# new node address.
sub flood {
    my ($seq) = @_;
    my @ranges;
    for my $i (0 .. $PER - 1) {
        my $c = 65536 + $seq * $PER + $i;
        my $ip = join '.', 127, ($c >> 16) & 255, ($c >> 8) & 255, $c & 255;
        my $slot = resp_int($i % 16384);
        push @ranges, resp_array($slot, $slot, resp_array(resp_bulk($ip), resp_int(1), resp_bulk('n')));
    }
    return resp_array(@ranges);
}
my $honest = resp_array(resp_array(resp_int(0), resp_int(16383), resp_array(resp_bulk(''), resp_int(0))));
my $f = start_fake_redis(mode => 'cluster',
    answers => { CLUSTER => sub { my ($args, $seq) = @_; RLTest::FakeRedis::get('flood') ? flood($seq) : $honest } });

# One worker: every answer is its (the memory of the worker that took them is measured).
my $n = start_nginx(<<"EOF2", workers => 1);
    ratelimit_redis c cluster ${\ $f->addr } timeout=100ms connect_timeout=100ms;
    ratelimit_zone z key=\$arg_k requests=5 period=1h redis=c;
    server {
        listen 127.0.0.1:%%PORT%%;
        location /z { ratelimit zone=z; empty_gif; }
        location /ping { empty_gif; }
    }
EOF2
my @workers = $n->worker_pids;
my $rss = sub { worker_rss($workers[0]) };

# /ping's time in ms.
sub ping_ms {
    my $t0 = time;
    my ($s) = $n->get('/ping');
    return ($s // 0) == 200 ? (time - $t0) * 1000 : 99999;
}
sub median { my @s = sort { $a <=> $b } @_; return $s[ @s / 2 ] }

# Before: the honest map, /ping's times.
my $deadline = time + 5;
sleep 0.05 while $f->answered('CLUSTER') < 2 && time < $deadline;
my @before = map { my $ms = ping_ms(); sleep 0.02; $ms } 1 .. 30;
my $rss0 = $rss->();

# The flood, driven by requests; worker memory sampled at the warm point and at the end.
$f->set(flood => 1);
my $base = $f->answered('CLUSTER');
my (@during, $rss_warm, $grew_past);
$deadline = time + ($asan ? 110 : 90);
while (time < $deadline) {
    my $got = $f->answered('CLUSTER') - $base;
    $rss_warm //= $rss->() if $got >= $warm_at;
    last if $got >= $ANSWERS;
    $n->get('/z?k=' . fresh_key());
    push @during, ping_ms();
    my $now = $rss->();
    if ($now - $rss0 > $abort) { $grew_past = $now; last }
    sleep 0.01;
}
my $answers = $f->answered('CLUSTER') - $base;
my $rss_end = $rss->();
$f->set(flood => 0);
note("worker RSS (kB): before $rss0, after hostile answer $warm_at " . ($rss_warm // '-') . ", after $answers: $rss_end");
note(sprintf('/ping (ms): before median %.1f max %.1f; during median %.1f max %.1f (%d requests)',
    median(@before), (sort { $b <=> $a } @before)[0], median(@during), (sort { $b <=> $a } @during)[0], scalar @during));

ok(!defined $grew_past, "the worker never grew by $abort kB (the flood would have been stopped)") or diag($grew_past);
cmp_ok($answers, '>=', $ANSWERS, "$answers hostile CLUSTER SLOTS answers of $PER addresses each");
my $growth = $rss_end - ($rss_warm // $rss0);
cmp_ok($growth, '<=', $max_growth, "worker memory flat: grew $growth kB from answer $warm_at to the last (at most $max_growth)");
is(join(' ', $n->worker_pids), join(' ', @workers), 'the same workers run');
# /ping: a location without limits answers as before, the worker never held up for long.
my ($worst) = sort { $b <=> $a } @during;
cmp_ok(median(@during), '<', median(@before) + 50, sprintf('/ping during the flood: median %.1f ms (before %.1f ms)', median(@during), median(@before)));
cmp_ok($worst, '<', 500, sprintf('/ping during the flood: slowest %.1f ms', $worst));
ok(defined $n->wait_log(qr/CLUSTER SLOTS names more slots or nodes than there can be \(1024 nodes kept at most\)/, 1),
   'the cap is logged');

done_testing;
