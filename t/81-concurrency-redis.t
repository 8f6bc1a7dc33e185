# Concurrency zones in Redis (issue 19): `ratelimit_zone ... concurrency=N redis=NAME hold=TIME`.
# Two nginx with two workers each in front of one Redis, then of a 3-primary cluster: 64 clients
# on one key with N = 10, and the backend (RLTest::Backend) never has more than 10 of the key
# at once, has 10 most of the time, and Redis holds no member once every request ended. A host
# killed (-9, master and workers) while holding slots: the other host gets them within `hold`.
# A request longer than 3 x hold keeps its slot all along (the refresh). Redis down:
# ratelimit_on_error allow / deny / local; Redis back: the zone converges. In the cluster, a
# key's hash slot migrated while its requests run (MOVED), or left half-migrated (ASK): their
# slots are kept past hold by refreshes that follow the redirection, and given back on the new
# owner as soon as they end.
# runs alone: it loads the machine and measures time (64 clients, hold expiry)
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use RLTest;
use RLTest::Backend qw(start_backend read_response);
use Test::More;
use POSIX ();
use Time::HiRes qw(time sleep);

my $b  = start_backend();
my $bp = $b->port;

# (timeout=2s on the ratelimit_redis lines: a loaded machine must not time a call out, which
# would decide by ratelimit_on_error)
sub conf {
    my ($redis_line) = @_;
    return <<"EOF";
    $redis_line
    ratelimit_zone cc key=\$arg_key concurrency=10 redis=rs hold=2s;
    ratelimit_zone ck key=\$arg_key concurrency=4 redis=rs hold=2s;
    ratelimit_zone c1 key=\$arg_key concurrency=1 redis=rs hold=2s;
    ratelimit_zone cw key=\$arg_key concurrency=1000000 redis=rs hold=2s;
    ratelimit_zone cm key=\$arg_key concurrency=2 redis=rs hold=4s;
    proxy_set_header X-Worker \$pid;
    server {
        listen 127.0.0.1:%%PORT%% reuseport;
        ratelimit_on_error deny;
        add_header X-Status \$ratelimit_status always;
        add_header X-Who \$pid always;
        location /many { ratelimit zone=cc; proxy_pass http://127.0.0.1:$bp/hold; }
        location /kill { ratelimit zone=ck; proxy_pass http://127.0.0.1:$bp/hold; }
        location /one  { ratelimit zone=c1; proxy_pass http://127.0.0.1:$bp/hold; }
        location /moved { ratelimit zone=cm; proxy_pass http://127.0.0.1:$bp/hold; }
        location /warm { ratelimit zone=cw; empty_gif; }
    }
EOF
}

# (status, X-Status) of a quick request (the backend answers at once).
sub probe {
    my ($n, $path, $key) = @_;
    my ($st, $h) = $n->get($path . ($path =~ /\?/ ? '&' : '?') . "key=$key&ms=0");
    return ($st // 'ERR', $h->{'x-status'} // '');
}
sub held { return join ' ', map { $_->{held} ? 'held' : $_->{status} } @_ }

# Probes $path?key=$key on $n every $every s for $secs s: ('status X-Status' seen, comma
# separated, tries, { seen => count }).
sub probe_for {
    my ($n, $path, $key, $secs, $every) = @_;
    my (%seen, $tries);
    my $t0 = time;
    while (time - $t0 < $secs) {
        my ($st, $x) = probe($n, $path, $key);
        $seen{"$st $x"}++;
        $tries++;
        sleep $every;
    }
    return (join(',', sort keys %seen), $tries, \%seen);
}

# The members of every sorted set (the concurrency keys) in a standalone Redis or a cluster,
# and of which keys: (total, 'key:count ...'). live => 1: only the members not expired, the
# slots the script counts as taken (a score past Redis's clock, in us); an expired one stays
# in its set until the next call of its key.
sub members {
    my ($r, %o) = @_;
    my @keys;
    if ($r->isa('RLTest::RedisCluster')) {
        @keys = $r->scan('*');
    } else {
        my $cursor = 0;
        do {
            my ($ok, $v) = $r->cmd('SCAN', $cursor, 'COUNT', 1000);
            die "SCAN failed\n" unless $ok && ref $v eq 'ARRAY';
            $cursor = $v->[0];
            push @keys, map { [$_, undef] } @{ $v->[1] };
        } while ($cursor ne '0');
    }
    my ($total, @which) = (0);
    for my $kp (@keys) {
        my ($k, $p) = @$kp;
        my @c = $p ? ($p) : ();
        my (undef, $type) = $r->cmd(@c, 'TYPE', $k);
        next unless ($type // '') eq 'zset';
        my $n;
        if ($o{live}) {
            my (undef, $t) = $r->cmd(@c, 'TIME');
            (undef, $n) = $r->cmd(@c, 'ZCOUNT', $k, sprintf('(%.0f', $t->[0] * 1e6 + $t->[1]), '+inf');
        } else {
            (undef, $n) = $r->cmd(@c, 'ZCARD', $k);
        }
        $total += $n;
        push @which, "$k:$n" if $n;
    }
    return ($total, join ' ', @which);
}

# Until Redis holds no member (the releases are pipelined after the requests end); 3 s at most,
# then once more 0.3 s later. Returns (total, which).
sub members_settle {
    my ($r) = @_;
    my @m;
    my $got = settle_value(sub { @m = members($r); $m[0] }, 0, timeout => 3, after => 0.3);
    return @m;
}

# 64 clients on one key, N = 10, through both hosts: exact, and full most of the time.
sub load_64 {
    my ($what, $r, @n) = @_;
    my $key = "many_$what";
    $b->reset($key);
    # Requests of 400 ms; each client pauses 100 ms before each request (64 clients on 2 cores:
    # without a pause the clients' own work starves the hosts): the 54 clients waiting still try
    # every 2 ms on average. The share of time at N is taken over the steady middle of the run,
    # from 3.3 s to 0.5 s before the clients stop (forking 64 of them may take a while): the
    # counters are reset then (and what they held until then kept), and read at the end of it.
    my ($pre, $mid);
    my $until = time + 4.8;
    my $res = run_clients([map { $_->port } @n], sub { sleep 0.1; "/many?key=$key&ms=400" }, 64, 1000000, keepalive => 0,
        until => $until, record => 'X-Status',
        during => sub {
            my $w = $until - 3.3 - time;
            sleep $w if $w > 0;
            $pre = $b->reset($key);
            $w = $until - 0.5 - time;
            sleep $w if $w > 0;
            $mid = $b->stats($key);
        });
    my $s = $b->stats($key);
    my $max = $pre->{max} > $s->{max} ? $pre->{max} : $s->{max};
    is(codes($res), '200,429', "$what: 64 clients, only 200 and 429") or diag(explain $res);
    is($max, 10, "$what: the backend never had more than N=10 of the key at once");
    is($pre->{served} + $s->{served}, $res->{200} // 0, "$what: every admitted request reached the backend");
    is($res->{':values'}{ERROR} // 0, 0, "$what: every request was decided in Redis (no ERROR)");
    my ($at_n, $all) = (0, 0);
    $all += $_ for values %{ $mid->{levels} };
    $at_n = $mid->{levels}{10} // 0;
    my $share = $all > 0 ? $at_n / $all : 0;
    ok($share > 0.5, sprintf("$what: 10 in progress %.0f%% of the time in the middle of the run (%d admitted)", 100 * $share, $res->{200} // 0))
      or diag(explain $mid->{levels});
    my ($left, $which) = members_settle($r);
    is($left, 0, "$what: Redis holds no member once every request ended") or diag($which);
}

# ------------------------------------------------------------------------- one Redis

my $redis = start_redis();
my $rp = $redis->port;
my $http = conf("ratelimit_redis rs 127.0.0.1:$rp timeout=2s;");
my $n1 = start_nginx($http, workers => 2);
my $n2 = start_nginx($http, workers => 2);
ok(defined $n1->wait_decided(sub { '/warm?key=' . fresh_key('w') }) && defined $n2->wait_decided(sub { '/warm?key=' . fresh_key('w') }),
    'every worker of both hosts decides in Redis');

# 1. Exact across two hosts.
load_64('redis', $redis, $n1, $n2);

# 2. A request longer than 3 x hold (2 s) keeps its slot: the refresh extends it.
{
    my $e = $b->enter($n1->port, '/one', 'long');
    ok($e->{held}, 'long: a request of a zone of 1 is held on host 1');
    my ($m0, $w0) = members($redis);
    is($m0, 1, 'long: Redis holds its member');
    my $score0 = zscore_of($redis);
    my ($seen, $tries, $all) = probe_for($n2, '/one', 'long', 7, 0.2);
    is($seen, '429 REJECTED', "long: for 7 s (3.5 x hold) host 2 is refused the key ($tries tries)") or diag(explain $all);
    ok(zscore_of($redis) > $score0, 'long: the member\'s expiry was moved on (refreshed)');
    is($b->finish('long', $e), '200', 'long: the request completes');
    # its slot is given back in Redis after its response (pipelined): awaited before host 2 asks
    wait_until(sub { (members($redis))[0] == 0 });
    my ($st, $x) = probe($n2, '/one', 'long');
    is("$st $x", '200 PASSED', 'long: then the slot is free');
    is((members_settle($redis))[0], 0, 'long: no member left');
}

# The score of the only member of the only sorted set.
sub zscore_of {
    my ($r) = @_;
    my (undef, $keys) = $r->cmd('KEYS', '*');
    for my $k (@{ $keys || [] }) {
        my (undef, $t) = $r->cmd('TYPE', $k);
        next unless ($t // '') eq 'zset';
        my (undef, $z) = $r->cmd('ZRANGE', $k, 0, -1, 'WITHSCORES');
        return $z->[1] if ref $z eq 'ARRAY' && @$z == 2;
    }
    return -1;
}

# 3. kill -9 of a host holding slots: the other gets them within hold (2 s).
{
    my @e = map { $b->enter($n1->port, '/kill', 'kd') } 1 .. 4;
    is(held(@e), 'held held held held', 'kill: host 1 holds the 4 slots of a key');
    my ($st, $x) = probe($n2, '/kill', 'kd');
    is("$st $x", '429 REJECTED', 'kill: host 2 is refused');
    my @pids = ($n1->master_pid, $n1->worker_pids);
    kill 'KILL', @pids;
    my $t_kill = time;
    ($st, $x) = probe($n2, '/kill', 'kd');
    is("$st $x", '429 REJECTED', 'kill: right after the kill the dead host\'s slots still count');
    my $got;
    while (time - $t_kill < 5) {
        ($st) = probe($n2, '/kill', 'kd');
        if ($st eq '200') { $got = time - $t_kill; last }
        sleep 0.05;
    }
    ok(defined $got && $got <= 2.5, sprintf('kill: host 2 admitted again %.2f s after the kill (hold 2 s)', $got // 99));
    # The dead host's members were taken and refreshed at different times: all are gone once
    # hold has passed since the kill.
    my $wait = $t_kill + 2.3 - time;
    sleep $wait if $wait > 0;
    close $_->{sock} for @e;
    my $gone_by = time + 3;
    sleep 0.05 while time < $gone_by && grep { pid_alive($_) } @pids;
    ok(!grep({ pid_alive($_) } @pids), 'kill: host 1 is gone');
    # the slot of host 2's request admitted above is given back after its response: awaited
    wait_until(sub { (members($redis, live => 1))[0] == 0 });
    my @f = map { $b->enter($n2->port, '/kill', 'kd') } 1 .. 4;
    is(held(@f), 'held held held held', 'kill: hold after the kill, host 2 takes all 4 slots');
    ($st, $x) = probe($n2, '/kill', 'kd');
    is("$st $x", '429 REJECTED', 'kill: and no more');
    is($b->finish('kd', @f), '200 200 200 200', 'kill: (done)');
    is((members_settle($redis))[0], 0, 'kill: no member left once the dead host\'s expired and the others ended');
}
$n2->stop;

# ------------------------------------------------------------------------- Redis down

{
    my $fport = free_port();
    my $fr = start_redis(port => $fport);
    my $n = start_nginx(<<"EOF", workers => 2);
    ratelimit_redis rf 127.0.0.1:$fport timeout=200ms;
    ratelimit_zone cz key=\$arg_key concurrency=2 redis=rf hold=2s;
    proxy_set_header X-Worker \$pid;
    server {
        listen 127.0.0.1:%%PORT%%;
        add_header X-Status \$ratelimit_status always;
        add_header X-Who \$pid always;
        location /allow { ratelimit_on_error allow; ratelimit zone=cz; proxy_pass http://127.0.0.1:$bp/hold; }
        location /deny  { ratelimit_on_error deny;  ratelimit zone=cz; proxy_pass http://127.0.0.1:$bp/hold; }
        location /local { ratelimit_on_error local; ratelimit zone=cz; proxy_pass http://127.0.0.1:$bp/hold; }
        location /warm  { ratelimit_on_error deny;  ratelimit zone=cz; empty_gif; }
    }
EOF
    ok(defined $n->wait_decided(sub { '/warm?key=' . fresh_key('w') }), 'faults: both workers decide in Redis');
    my @e = (map({ $b->enter($n->port, '/deny', 'fa') } 1 .. 2));
    is(held(@e), 'held held', 'faults: Redis up, two held');
    my ($st, $x) = probe($n, '/deny', 'fa');
    is("$st $x", '429 REJECTED', 'faults: the third rejected in Redis');
    is($b->finish('fa', @e), '200 200', 'faults: (done)');

    $fr->kill_now('KILL');
    my @allow = map { $b->enter($n->port, '/allow', 'fd') } 1 .. 3;
    is(held(@allow), 'held held held', 'Redis down, on_error allow: every request passes (3 of a zone of 2)');
    ($st, $x) = probe($n, '/deny', 'fd2');
    is("$st $x", '503 ERROR', 'Redis down, on_error deny: 503');
    my @local = map { $b->enter($n->port, '/local', 'fl') } 1 .. 2;
    is(held(@local), 'held held', 'Redis down, on_error local: N=2 pass');
    ($st, $x) = probe($n, '/local', 'fl');
    is($st, 429, 'Redis down, on_error local: the third rejected (shared memory enforces N)');

    $fr = start_redis(port => $fport, args => ['--enable-debug-command', 'local']);
    my $t = $n->resumes_within(sub { '/warm?key=' . fresh_key('r') });
    ok($t < 1.5, sprintf('Redis back: decided in Redis again after %.2f s', $t));
    is($b->finish('fd', @allow), '200 200 200', 'Redis back: the requests let through complete');
    is($b->finish('fl', @local), '200 200', 'Redis back: the local ones complete');
    for my $k (qw(fl fb)) {
        # the slots of the requests before (warm-up, the last key's) given back (pipelined after
        # their responses): counted out of this key's members
        wait_until(sub { (members($fr))[0] == 0 });
        my @g = map { $b->enter($n->port, '/deny', $k) } 1 .. 2;
        is(held(@g), 'held held', "Redis back: key $k has its two slots in Redis");
        ($st, $x) = probe($n, '/deny', $k);
        is("$st $x", '429 REJECTED', "Redis back: key $k, the third rejected in Redis");
        my ($m) = members($fr);
        is($m, 2, "Redis back: key $k, two members");
        is($b->finish($k, @g), '200 200', "Redis back: key $k (done)");
    }
    my ($left, $which) = members_settle($fr);
    is($left, 0, 'Redis back: no member left once the requests ended') or diag($which);

    # Redis stalls past the timeout: the request goes on (allow) without a slot; the slot Redis
    # grants when it wakes is taken back at once, while the request still runs.
    my $pid = fork // die;
    if (!$pid) { $fr->cli('DEBUG', 'SLEEP', '0.6'); POSIX::_exit(0) }
    ok($fr->wait_asleep, 'late: Redis sleeps');
    my @late = ($b->enter($n->port, '/allow', 'late'));
    is(held(@late), 'held', 'late: the request goes on (on_error allow)');
    waitpid $pid, 0;
    # within a second: the key itself would expire after hold (2 s) anyway
    my $late_left = settle_value(sub { (members($fr))[0] }, 0, timeout => 1, after => 0.2);
    is($late_left, 0, 'late: the slot Redis granted late was given back at once, the request still running');
    is($b->finish('late', @late), '200', 'late: (done)');

    my @bad = grep { /\[(?:crit|alert|emerg)\]/ } split /\n/, $n->error_log;
    is(scalar @bad, 0, 'faults: no crit, alert or emerg') or diag(join "\n", @bad);
    $n->stop;
    $fr->stop;
}
$redis->stop;

# ---------------------------------------------------------------- 3-primary cluster

# The in-flight slots of a key whose hash slot moves to another primary while its requests run
# (zone cm: N = 2, hold 4 s, refreshed every 1.33 s): their releases and refreshes, sent where
# the worker's map says, get MOVED (or ASK, the slot half-migrated) and follow it.
sub slot_moves {
    my ($c, $n) = @_;
    my @prim = $c->primaries;
    # The key's sorted set (the one of zone cm not seen before: a slot not given back leaves
    # the last one's), its slot, its owner and another primary.
    my %seen;
    my $where = sub {
        my @z = grep { !$seen{ $_->[0] } } $c->scan('rl:{cm:*');
        return () unless @z == 1;
        my ($key, $src) = @{ $z[0] };
        $seen{$key} = 1;
        my $slot = $c->keyslot($key);
        my ($dst) = grep { $_->port != $src->port } @prim;
        return ($key, $slot, $src, $dst);
    };
    # (ASKING first: the target of a slot still migrating answers for the keys it has.)
    my $on = sub { my ($node, @cmd) = @_; $c->cmd($node, 'ASKING'); my (undef, $v) = $c->cmd($node, @cmd); return $v };
    my $zcard = sub { my ($node, $key) = @_; return $on->($node, 'ZCARD', $key) // -1 };
    # Within 1.5 s (a member lives 2.7 s at least past its last refresh): the key's members are
    # gone from $node and the key admits again.
    my $freed = sub {
        my ($what, $node, $key, $k) = @_;
        my $t0 = time;
        my $left = settle_value(sub { $zcard->($node, $key) }, 0, timeout => 1.5, after => 0);
        my ($st, $x) = probe($n, '/moved', $k);
        is("$left $st $x", '0 200 PASSED',
            sprintf("$what: the slots were given back on the new owner at once (%.2f s), the key admits", time - $t0));
    };

    # MOVED: the slot migrates while two requests hold the key; they end right after.
    {
        my @e = map { $b->enter($n->port, '/moved', 'mvd') } 1 .. 2;
        is(held(@e), 'held held', 'MOVED: two requests hold the key (N = 2)');
        my ($key, $slot, $src, $dst) = $where->();
        ok(defined $key, 'MOVED: its sorted set found');
        my ($st, $x) = probe($n, '/moved', 'mvd');
        is("$st $x", '429 REJECTED', 'MOVED: a third is refused');
        $c->migrate_slot($slot, $dst);
        is($zcard->($dst, $key) . ' ' . $c->countkeysinslot($src, $slot), '2 0', 'MOVED: the slot and its members moved');
        is($b->finish('mvd', @e), '200 200', 'MOVED: the requests end');
        $freed->('MOVED', $dst, $key, 'mvd');
    }

    # MOVED, then refreshes: requests that run past hold after the move keep their slots.
    {
        my @e = map { $b->enter($n->port, '/moved', 'mvr') } 1 .. 2;
        is(held(@e), 'held held', 'MOVED refresh: two requests hold the key');
        my ($key, $slot, $src, $dst) = $where->();
        $c->migrate_slot($slot, $dst);
        my ($seen, $tries, $all) = probe_for($n, '/moved', 'mvr', 5.5, 0.25);
        is($seen, '429 REJECTED', "MOVED refresh: for 5.5 s (hold 4 s) after the move the key stays full ($tries tries)") or diag(explain $all);
        is($zcard->($dst, $key), 2, 'MOVED refresh: both members on the new owner');
        is($b->finish('mvr', @e), '200 200', 'MOVED refresh: the requests end');
        $freed->('MOVED refresh', $dst, $key, 'mvr');
    }

    # ASK: the key's sorted set moved, its slot left migrating: every release and refresh is
    # answered ASK (the map does not change); the slots are kept past hold, then given back.
    {
        my @e = map { $b->enter($n->port, '/moved', 'ask') } 1 .. 2;
        is(held(@e), 'held held', 'ASK: two requests hold the key');
        my ($key, $slot, $src, $dst) = $where->();
        my $z0 = $on->($src, 'ZRANGE', $key, 0, -1, 'WITHSCORES');
        $c->begin_migration($slot, $dst, $key);
        is($zcard->($dst, $key) . ' ' . $c->countkeysinslot($src, $slot), '2 0', 'ASK: the sorted set moved, the slot is migrating');
        my ($seen, $tries, $all) = probe_for($n, '/moved', 'ask', 5.5, 0.25);
        is($seen, '429 REJECTED', "ASK: for 5.5 s (hold 4 s) the key stays full ($tries tries)") or diag(explain $all);
        my $z1 = $on->($dst, 'ZRANGE', $key, 0, -1, 'WITHSCORES');
        ok(ref $z0 eq 'ARRAY' && ref $z1 eq 'ARRAY' && @$z1 == 4 && $z1->[1] > $z0->[1] && $z1->[3] > $z0->[3],
            'ASK: the members were refreshed on the target');
        my ($me) = grep { $_->{port} == $src->port } $c->view($src);
        ok(exists $me->{migrating}{$slot}, 'ASK: the slot is still migrating (so every call was answered ASK)');
        is($b->finish('ask', @e), '200 200', 'ASK: the requests end');
        $freed->('ASK', $dst, $key, 'ask');
        $c->finish_migration($slot);
    }
}

{
    # (no failover here: a node slow to answer on a loaded machine must not be failed, the cluster down)
    my $c = start_redis_cluster(primaries => 3, node_timeout => 5000);
    my $chttp = conf('ratelimit_redis rs cluster ' . $c->seeds . ' timeout=2s;');
    my $c1 = start_nginx($chttp, workers => 2);
    my $c2 = start_nginx($chttp, workers => 2);
    ok(defined $c1->wait_decided(sub { '/warm?key=' . fresh_key('w') }) && defined $c2->wait_decided(sub { '/warm?key=' . fresh_key('w') }),
        'cluster: every worker of both hosts decides in the cluster');
    load_64('cluster', $c, $c1, $c2);
    slot_moves($c, $c1);
    for my $h ($c1, $c2) {
        my @bad = grep { /\[(?:error|crit|alert|emerg)\]/ && !/limiting connections/ } split /\n/, $h->error_log;
        is(scalar @bad, 0, 'cluster: no error in the log') or diag(join "\n", @bad[0 .. ($#bad < 9 ? $#bad : 9)]);
    }
}

done_testing;
