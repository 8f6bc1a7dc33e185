# Lease zones with many keys (issue 33, step 9): a cold key (no request within one interval of
# the one before it) is asked per request, for exactly what the request costs: one key sent
# to Redis per request, no lease ahead, nothing to give back; a key seen twice within an
# interval gets a lease (fewer keys sent than requests). Limits hold either way (never over),
# on count leases (a window, a slow bucket) and where a bucket's lease is a share.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use RLTest;
use RLTest::Sync;
use Test::More;
use Time::HiRes qw(sleep time);

my $day = 86400;
avoid_window_edge($day, 60);    # the fixed windows of a day are not crossed
my $redis = start_redis();
my $rp    = $redis->port;

my %Z = (
    # count lease on a window
    cw => { name => 'cw', algo => 'fixed', requests => 3,    period => $day, sync => 0.1, mode => 'lease' },
    hw => { name => 'hw', algo => 'fixed', requests => 1000, period => $day, sync => 0.1, mode => 'lease' },
    # count lease on a bucket too slow to share (r 2T < C)
    cb => { name => 'cb', algo => 'gcra', requests => 3, period => 3600, burst => 2, sync => 0.1, mode => 'lease' },
    # shares: r 2T = 20 >= C = 20
    cs => { name => 'cs', algo => 'gcra', requests => 100, period => 1, burst => 19, sync => 0.1, mode => 'lease' },
);
my @zones = map { $Z{$_} } sort keys %Z;
my $zone_lines = join '', map { '    ' . zone_line($_, 'r') . "\n" } @zones;
my $locations  = join '', map { "        location = /$_->{name} { ratelimit zone=$_->{name}; empty_gif; }\n" } @zones;
my $n = start_nginx(<<"EOF");
    ratelimit_redis r 127.0.0.1:$rp timeout=500ms;
$zone_lines
    server {
        listen 127.0.0.1:%%PORT%%;
        add_header X-Status \$ratelimit_status always;
$locations
        location = /metrics { ratelimit_metrics; }
    }
EOF

# The state of the zone's one key in Redis (its value's bytes).
sub state_of {
    my ($z) = @_;
    my ($key) = grep { !/:call:/ } $redis->keys_matching("rl:{$z->{name}:*");
    return undef unless defined $key;
    my ($ok, $v) = $redis->cmd('GET', $key);
    return $ok ? $v : undef;
}

# Whether a key of the zone holds a share book after its state (96 bytes: sync_command.h).
sub book_held {
    my ($z) = @_;
    for my $key (grep { !/:call:/ } $redis->keys_matching("rl:{$z->{name}:*")) {
        my ($ok, $v) = $redis->cmd('GET', $key);
        return 1 if $ok && defined $v && length $v == 96;
    }
    return 0;
}

# ---------------------------------------------------------------- a cold key: one per-request ask
for my $z (@Z{qw(cw cb cs)}) {
    my $before = sync_total($n, $z->{name}, 'keys');
    ok($before >= 0, "$z->{name}: the zone's keys sent are counted");
    my $rounds = sync_total($n, $z->{name}, 'rounds');
    my ($s, $h) = $n->get("/$z->{name}?k=once");
    is("$s " . ($h->{'x-status'} // ''), '200 PASSED', "$z->{name}: a key asked once is admitted");
    # Five rounds (two intervals idle: a lease would have been given back by then): one key
    # sent in all, the ask. Shares (a unit drains in 10 ms there): no share book is ever
    # written for it (a share's book stays two epochs, 400 ms).
    my $book = 0;
    my $done = wait_until(sub { $book ||= book_held($z); sync_total($n, $z->{name}, 'rounds') >= $rounds + 5 },
        timeout => 5);
    ok($done, "$z->{name}: 5 more rounds done");
    is(sync_total($n, $z->{name}, 'keys') - $before, 1,
        "$z->{name}: one key sent for a key asked once (no lease ahead, nothing given back)");
    ok(!$book, "$z->{name}: no share book written for it (a count ask)");
    next if $z->{name} eq 'cs';
    is(zone_count($redis, $z), 1, "$z->{name}: Redis's state moved by exactly one grant");
    is(length(state_of($z) // ''), 24, "$z->{name}: its value is a state alone");
}

# ---------------------------------------------------------------- cold keys never over
# Requests more than an interval apart: each is asked alone; the limit holds exactly.
for my $z (@Z{qw(cw cb)}) {
    my ($ok200, $no) = (0, 0);
    my $c = $n->keepalive;
    for my $i (1 .. 5) {
        my ($s) = $c->get("/$z->{name}?k=spaced");
        $ok200++ if ($s // 0) == 200;
        $no++ if ($s // 0) == 429;
        sleep 0.15 if $i < 5;    # the gap that keeps the key cold: more than the interval
    }
    is("$ok200/$no", '3/2', "$z->{name}: a cold key's requests, one by one: exactly the limit of 3 admitted");
    my ($ok, $got) = settle($redis, $z, 4, extra => 0, timeout => 1, after => 0);  # the key "once" and these 3
    ok($ok, "$z->{name}: Redis holds what was admitted, no more") or diag("it holds $got");
}

# ---------------------------------------------------------------- a hot key gets a lease
{
    my $z = $Z{hw};
    my $before = sync_total($n, 'hw', 'keys');
    my $r = run_clients($n->port, "/hw?k=hot", 2, 40, keepalive => 1, record => 'X-Status');
    is($r->{200} // 0, 80, 'hw: a hot key far below its limit: all 80 admitted');
    my ($ok, $got) = settle($redis, $z, 80, timeout => 3);
    ok($ok, 'hw: its unspent lease given back: Redis holds the 80') or diag("it holds $got");
    my $sent = sync_total($n, 'hw', 'keys') - $before;
    cmp_ok($sent, '<', 40, "hw: a hot key rides a lease: $sent keys sent for 80 requests");
}
for my $z (@Z{qw(cw cb)}) {
    my $r = run_clients($n->port, "/$z->{name}?k=hotsmall", 2, 10, keepalive => 1);
    is($r->{200} // 0, 3, "$z->{name}: a hot key: exactly the limit of 3 admitted, never over");
    my ($ok, $got) = settle($redis, $z, 7, extra => 0, timeout => 3);  # 4 before, and these 3
    ok($ok, "$z->{name}: Redis holds the 3 more") or diag("it holds $got");
}
{
    # shares: a hot key takes a share (its book in Redis beside the state), far below the limit
    my $z = $Z{cs};
    my $before = sync_total($n, 'cs', 'keys');
    my $c = $n->keepalive;
    my $ok200 = 0;
    for (1 .. 15) {
        my ($s) = $c->get('/cs?k=hot');
        $ok200++ if ($s // 0) == 200;
    }
    is($ok200, 15, 'cs: a hot key below its burst: all 15 admitted');
    ok(wait_until(sub { book_held($z) }, timeout => 3), 'cs: the hot key holds a share (a book in its Redis value)');
    my $sent = sync_total($n, 'cs', 'keys') - $before;
    cmp_ok($sent, '<', 15, "cs: fewer keys sent than requests ($sent for 15)");
}

# ---------------------------------------------------------------- a count call's reply lost
# A cold key's call (the count form) has no id and is not sent again: its request is decided by
# the fallback, and Redis keeps the unit it admitted (more limiting, never less). Behind a proxy
# that replaces each sync reply by an error once Redis ran the call.
{
    my $p = start_proxy(upstream => $redis);
    my $z = { name => 'lc', algo => 'gcra', requests => 3, period => 3600, burst => 2, sync => 0.1, mode => 'lease' };
    my $n2 = start_nginx(<<"EOF2");
    ratelimit_redis r2 127.0.0.1:${\ $p->port } timeout=300ms;
    ${\ zone_line($z, 'r2') }
    server {
        listen 127.0.0.1:%%PORT%%;
        add_header X-Status \$ratelimit_status always;
        location = /lc { ratelimit zone=lc; empty_gif; }
    }
EOF2
    ok(wait_until(sub { my ($s) = $n2->get('/lc?k=warm'); ($s // 0) == 200 }, timeout => 5), 'lc: the zone answers');
    my $before = $p->count_calls;
    $p->mode('sync_lose');
    my ($s, $h) = $n2->get('/lc?k=lost');
    sleep 1;    # ten intervals: a call sent again with its id would go every interval
    $p->mode('pass');
    is("$s " . ($h->{'x-status'} // ''), '200 ERROR', 'lc: the cold key\'s reply lost: decided by the fallback');
    is($p->count_calls - $before, 1, 'lc: its count call was not sent again (one in ten intervals)');
}

done_testing;
