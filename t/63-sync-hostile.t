# Sync zones against a Redis whose replies cannot be trusted (issue 23): RLTest::Proxy in front
# of a real redis-server rewrites one sync reply, then passes genuine ones. The reproductions
# of the issue, each a check that failed on the code before the fix:
#  1. lease: a reply granting 0 with a retry of 2^52 us: Retry-After stays within what the
#     policy can require, and the key admits again within a few intervals of genuine replies;
#  2. optimistic: a reply carrying an impossible state (gcra a or b = 2^52, token a = -2^52):
#     the same two checks (a rejected key has no delta: only a refresh asks Redis again);
#  3. one reply's clock (now = 2^52, now = 0): no more admitted than the limit, the Redis key's
#     TTL within its window, Retry-After within the policy's;
#  4. replies lost after Redis applied the calls (about 2 s of them): Redis counts exactly what
#     was admitted (optimistic: each call is sent again with its id, and the script applies it
#     once), at most twice (lease: grants for requests that stopped waiting drain);
#  5. the refusals logged, sanitized, at most once a second, counted in the metrics; no crash
#     or alert (the harness checks the error logs).
# runs alone: it measures time (a key admits again within a few intervals)
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use RLTest;
use RLTest::Sync;
use Test::More;
use Time::HiRes qw(time sleep);

my $BIG = 4503599627370496;    # 2^52
my $T   = 0.1;                 # sync=100ms
my $few = 2.5;                 # "a few intervals" of genuine replies, with a loaded machine's slack

my $redis = start_redis();
my $p     = start_proxy(upstream => $redis);
my $pp    = $p->port;

# 1r/m burst=2: a full bucket takes 180 s to drain; the longest wait the policy can require
my $max_wait = 180;
my %zones = (
    sl    => 'rate=1r/m burst=2 sync=100ms sync_mode=lease',
    so_ga => 'rate=1r/m burst=2 sync=100ms',
    so_gb => 'rate=1r/m burst=2 sync=100ms',
    so_ta => 'rate=1r/m burst=2 sync=100ms algo=token',
    sf    => 'requests=3 period=1m algo=fixed sync=100ms',
    sg0   => 'rate=1r/m burst=2 sync=100ms',
    lo    => 'rate=1r/m burst=2 sync=100ms',
    ll    => 'rate=1r/m burst=2 sync=100ms sync_mode=lease',
    rd    => 'rate=100r/s sync=100ms',
    sc    => 'requests=1000 period=1d algo=fixed sync=100ms',
);
my $zone_lines = join '', map { "    ratelimit_zone $_ key=\$arg_k $zones{$_} redis=r;\n" } sort keys %zones;
my $locations  = join '', map { "        location = /$_ { ratelimit zone=$_; empty_gif; }\n" } sort keys %zones;
my $n = start_nginx(<<"EOF2");
    ratelimit_redis r 127.0.0.1:$pp timeout=500ms;
$zone_lines
    server {
        listen 127.0.0.1:%%PORT%% reuseport;
        add_header X-Status \$ratelimit_status always;
        add_header X-Who \$pid always;
$locations
        location = /metrics { ratelimit_metrics; }
    }
EOF2
ok(defined $n->wait_decided(sub { '/rd?k=' . fresh_key('ready') }), 'nginx decides through the proxy');
# A second host on the same Redis, without the proxy: what one host's bad reply did to the
# shared state shows there.
my $rp = $redis->port;
my $n2 = start_nginx(<<"EOF2");
    ratelimit_redis r 127.0.0.1:$rp timeout=500ms;
    ratelimit_zone sf key=\$arg_k $zones{sf} redis=r;
    server {
        listen 127.0.0.1:%%PORT%% reuseport;
        location = /sf { ratelimit zone=sf; empty_gif; }
        location = /metrics { ratelimit_metrics; }
    }
EOF2

# Requests to $path every 100 ms for $secs: -> (first second at which one was admitted or undef,
# the largest Retry-After seen, the statuses)
sub poll {
    my ($path, $secs) = @_;
    my ($first, $most, @st) = (undef, 0);
    my $t0 = time;
    while (time - $t0 < $secs) {
        my ($s, $h) = $n->get($path);
        push @st, $s // 'ERR';
        my $ra = $h->{'retry-after'} // 0;
        $most = $ra if $ra > $most;
        if (($s // 0) == 200) { $first = time - $t0; last }
        sleep $T;
    }
    return ($first, $most, join(',', @st));
}

# Waits until the proxy has rewritten (or lost) $want replies in all.
sub wait_rewritten {
    my ($want, $timeout) = @_;
    return wait_until(sub { $p->rewritten >= $want }, timeout => $timeout // 3);
}

my $done = 0;

# ---------------------------------------------------------------- 1. lease: a retry of 2^52
{
    $p->mode('sync_rewrite', "granted=0,retry=$BIG", 1, 'sl');
    my ($s, $h) = $n->get('/sl?k=a');
    ok(wait_rewritten(++$done), 'lease: one reply rewritten to granted 0, retry 2^52 us');
    my $ra = $h->{'retry-after'} // 0;
    cmp_ok($ra, '<=', $max_wait, "lease: Retry-After $ra within the policy's longest wait ($max_wait s)");
    my ($first, $most, $st) = poll('/sl?k=a', 4);
    ok(defined $first && $first <= $few, 'lease: the key admits again within a few intervals of genuine replies ('
       . (defined $first ? sprintf('%.2fs', $first) : 'never') . ")") or diag($st);
    cmp_ok($most, '<=', $max_wait, "lease: every Retry-After since within $max_wait s ($most)");
}

# ---------------------------------------------------------------- 2. optimistic: impossible states
for my $c (['so_ga', "a=$BIG", 'gcra a = 2^52'], ['so_gb', "b=$BIG", 'gcra b = 2^52'], ['so_ta', "a=-$BIG", 'token a = -2^52']) {
    my ($z, $spec, $what) = @$c;
    $p->mode('sync_rewrite', $spec, 1, $z);
    my ($s) = $n->get("/$z?k=o");
    is($s, 200, "optimistic, $what: the first request admitted (a fresh view)");
    ok(wait_rewritten(++$done), "optimistic, $what: its sync reply rewritten");
    wait_sync($n, $z, rounds => 2);
    my ($s2, $h2) = $n->get("/$z?k=o");
    my $ra = $h2->{'retry-after'} // 0;
    cmp_ok($ra, '<=', $max_wait, "optimistic, $what: Retry-After $ra within the policy's longest wait");
    my ($first, $most, $st) = poll("/$z?k=o", 4);
    ok(defined $first && $first <= $few, "optimistic, $what: the key admits again within a few intervals ("
       . (defined $first ? sprintf('%.2fs', $first) : 'never') . ")") or diag("$s2 then $st");
    cmp_ok($most, '<=', $max_wait, "optimistic, $what: every Retry-After since within $max_wait s ($most)");
}

# ---------------------------------------------------------------- 3. one reply's clock
{
    avoid_window_edge(60, 8);    # the case runs in one window of a minute
    $p->mode('sync_rewrite', "now=$BIG", 1, 'sf');
    my ($s) = $n->get('/sf?k=c');
    my $admitted = ($s // 0) == 200 ? 1 : 0;
    ok(wait_rewritten(++$done), 'clock: one reply says now = 2^52 (the year 2112)');
    wait_sync($n, 'sf', rounds => 2);
    my $most = 0;
    for (1 .. 5) {
        my ($s2, $h2) = $n->get('/sf?k=c');
        $admitted++ if ($s2 // 0) == 200;
        my $ra = $h2->{'retry-after'} // 0;
        $most = $ra if $ra > $most;
    }
    is($admitted, 3, 'clock: exactly 3 admitted of requests=3 (1, then 5 within a few hundred ms)');
    cmp_ok($most, '<=', 60, "clock: Retry-After within the window ($most)");
    wait_sync($n, 'sf', rounds => 4);
    my @keys = grep { !/:call:/ } $redis->keys_matching('rl:{sf:*');
    is(scalar @keys, 1, 'clock: one key in Redis');
    my (undef, $pttl) = $redis->cmd('PTTL', $keys[0] // 'none');
    ok(defined $pttl && $pttl > 0 && $pttl <= 60000, "clock: the Redis key's TTL within its window (${\ ($pttl // 'none')} ms)");
    my ($c, $k) = zone_count($redis, { name => 'sf', algo => 'fixed', requests => 3, period => 60 });
    is($c, 3, "clock: Redis counts the 3 admitted (the refused reply's call sent again with its id: applied once)");
    # host 2: its view comes from the shared state at its first round
    my ($s1) = $n2->get('/sf?k=c');
    wait_sync($n2, 'sf', rounds => 3);
    my ($most2, @st2) = (0);
    for (1 .. 3) {
        my ($s2, $h2) = $n2->get('/sf?k=c');
        push @st2, $s2;
        my $ra = $h2->{'retry-after'} // 0;
        $most2 = $ra if $ra > $most2;
    }
    is(join(',', @st2), '429,429,429', "clock, host 2: rejected once its view holds the shared state (after $s1)");
    cmp_ok($most2, '<=', 60, "clock, host 2: Retry-After within the window ($most2)");

    $p->mode('sync_rewrite', 'now=0', 1, 'sg0');
    ($s) = $n->get('/sg0?k=z');
    is($s, 200, 'clock 0: the first request admitted');
    ok(wait_rewritten(++$done), 'clock 0: one reply says now = 0 (1970)');
    wait_sync($n, 'sg0', rounds => 2);
    my ($s2, $h2) = $n->get('/sg0?k=z');
    my $ra = $h2->{'retry-after'} // 0;
    cmp_ok($ra, '<=', $max_wait, "clock 0: Retry-After $ra within the policy's longest wait");
    my @st = ($s2);
    for (1 .. 4) { my ($s3, $h3) = $n->get('/sg0?k=z'); push @st, $s3; my $r3 = $h3->{'retry-after'} // 0; $ra = $r3 if $r3 > $ra }
    cmp_ok($ra, '<=', $max_wait, "clock 0: every Retry-After within $max_wait s ($ra)");
    is(scalar(grep { $_ == 200 } $s, @st), 3, 'clock 0: exactly 3 admitted (burst=2)') or diag("@st");
}

# ---------------------------------------------------------------- 3b. Redis's clock really moves
# Every reply an hour ahead from now on (for 3 s): a step beyond 30 s is refused until three
# replies in a row agree on it; then accepted for good (not refused round after round), and
# the zone decides in Redis (PASSED, not ERROR).
sub out_of_bounds {
    my (undef, undef, $body) = $n->get('/metrics');
    my ($v) = ($body // '') =~ /nginx_ratelimit_redis_errors_total\{redis="r",reason="out_of_bounds"\} (\d+)/;
    return $v // 0;
}
{
    $n->get('/sc?k=s') for 1 .. 2;
    my $before = out_of_bounds();
    $p->mode('sync_rewrite', 'now+=3600000000', 1000, 'sc');
    my ($t0, @late) = (time);
    while (time - $t0 < 3) {
        my (undef, $h) = $n->get('/sc?k=s');
        push @late, $h->{'x-status'} // '' if time - $t0 > 1.5;
        sleep $T;
    }
    my $rewritten = $p->rewritten - $done;
    $p->mode('pass');
    my $refusals = out_of_bounds() - $before;
    ok($rewritten >= 4, "clock step: $rewritten replies an hour ahead");
    cmp_ok($refusals, '<=', 4, "clock step: refused until confirmed, then accepted ($refusals refusals in 3 s)");
    # (a loaded machine may time a round out: ERROR then, for other reasons)
    ok(scalar(grep { $_ eq 'PASSED' } @late), 'clock step: the zone decides in Redis again') or diag("@late");
    # ... and back: Redis's clock steps back an hour, the same way
    sleep 0.5;
    $done = $p->rewritten;
}

# ---------------------------------------------------------------- 4. lost replies
# Redis applies each sync call, the reply is lost: each key's delta goes again in the next
# round. For ~2 s (about 20 rounds) at 1r/m burst=2, a handful of requests admitted.
for my $z (qw(lo ll)) {
    my $mode = $z eq 'lo' ? 'optimistic' : 'lease';
    my $before = $p->rewritten;
    $p->mode('sync_lose');
    my $admitted = 0;
    my $t0 = time;
    for my $i (1 .. 3) {
        my ($s) = $n->get("/$z?k=l");
        $admitted++ if ($s // 0) == 200;
        sleep 0.3;
    }
    sleep 2 - (time - $t0) if time - $t0 < 2;
    $p->mode('pass');
    my $lost = $p->rewritten - $before;
    wait_sync($n, $z, rounds => 6);    # the deltas whose replies were lost go again
    my ($count) = zone_count($redis, { name => $z, algo => 'gcra', requests => 1, period => 60, burst => 2 });
    note("lost replies, $mode: $admitted admitted, $lost replies lost in 2 s, Redis counts $count units");
    cmp_ok($admitted, '>=', 1, "lost replies, $mode: requests admitted meanwhile ($admitted)");
    if ($mode eq 'optimistic') {
        # each call sent again with its id: Redis replays its reply, applies nothing more
        is($count, $admitted, "lost replies, $mode: Redis counts exactly what was admitted ($count of $admitted)");
    } else {
        # units granted to a request that stopped waiting go to the lease, and drain when they
        # cannot be given back (under later units): more than admitted, never a delta twice
        cmp_ok($count, '<=', 2 * $admitted, "lost replies, $mode: Redis counts at most twice what was admitted ($count of $admitted)");
    }
    my ($s, $h) = $n->get("/$z?k=l");
    cmp_ok($h->{'retry-after'} // 0, '<=', $max_wait, "lost replies, $mode: Retry-After within the policy's longest wait");
}

# ---------------------------------------------------------------- 5. logged, counted
{
    my $log = $n->error_log;
    my @refused = grep { /sync of zone "[^"]*".*(refused|outside)/ } split /\n/, $log;
    ok(scalar @refused, 'the refused replies are logged') or diag(substr($log, -2000));
    my %per_second;
    $per_second{ substr($_, 0, 19) }++ for grep { /ratelimit redis "r"/ } split /\n/, $log;
    my @busy = grep { $per_second{$_} > 2 } keys %per_second;    # 2 workers: one line each at most
    ok(!@busy, 'at most one line a second per worker') or diag(join "\n", @busy);
    ok(!grep({ /[\x00-\x08\x0b-\x1f\x7f]/ } @refused), 'logged sanitized');
    my ($s, undef, $body) = $n->get('/metrics');
    my ($bounds) = ($body // '') =~ /nginx_ratelimit_redis_errors_total\{redis="r",reason="out_of_bounds"\} (\d+)/;
    ok(defined $bounds && $bounds >= 5, 'refused replies counted in nginx_ratelimit_redis_errors_total{reason="out_of_bounds"} ('
       . ($bounds // 'none') . ')');
}

done_testing;
