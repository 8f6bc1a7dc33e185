# settle= (issue 20) in Redis: two nginx hosts (two workers each) sharing one Redis, a Redis
# Cluster, and a sync zone. A settle reaches Redis after the response (one script call, only
# when settle != quantity): the tests wait for it to land (ratelimit_api asks Redis) before the
# next decision that must see it.
#  - Failed logins (quantity=0 settle=$login_failed), per request in Redis and in a Cluster:
#    many concurrent successes on both hosts never counted (and send no settle), then 5
#    failures alternating between the hosts, then 429 on both.
#  - A sync zone (sync=100ms, optimistic): failures alternating between the hosts, paced, admit
#    at least the 5 and at most H * R = 10 (the stated bound of a window), then both hosts
#    reject.
#  - Tokens from a response header: debt in Redis, the exact Retry-After on the other host.
#  - A Cluster key's slot migrated while its request runs: the settle follows the MOVED.
#  - Refund on 502 with the upstream down: the quota is intact.
#  - Script calls: none for a settle equal to its quantity, one for a charge.
#  - A settle Redis does not take (Redis killed while the request runs): counted once in
#    nginx_ratelimit_settle_failures_total, and logged.
#  - A settle whose reply is lost after Redis ran it (a proxy drops the reply and the
#    connection): its retry, with the same call id, charges (or refunds) nothing more. Lost once:
#    applied once, no failure counted; lost on both tries: applied once, counted and logged.
# runs alone: it measures time (failures paced between two hosts over sync rounds)
use strict;
use warnings;
BEGIN { $ENV{RLTEST_TIMEOUT} ||= 240 }
use FindBin;
use lib "$FindBin::Bin/lib";
use RLTest;
use RLTest::Backend qw(start_backend);
use Test::More;
use POSIX qw(ceil);
use Time::HiRes qw(time sleep);

my $day = 86400;
avoid_window_edge($day, 120);
alarm($ENV{RLTEST_TIMEOUT});

my $H   = 2;       # hosts
my $T   = 0.1;     # sync interval
my $L   = 0.25;    # round trip + timer lateness allowed for, per sync, on a loaded machine
my $lag = 2 * ($T + $L);

my $redis = start_redis();
my $rp    = $redis->port;
my $quiet = start_redis();    # only the zone whose script calls are counted
my $flaky = start_redis();    # killed while a request waits for its settle
my $lost  = start_proxy(upstream => $redis);    # throws away settle replies Redis ran
my $c     = start_redis_cluster(primaries => 3);
my $seeds = $c->seeds;
my $b     = start_backend();
my $up    = 'http://127.0.0.1:' . $b->port;
my $dead  = free_port();

my $http = <<"EOF";
    ratelimit_redis main 127.0.0.1:$rp timeout=500ms prefix=t83:;
    ratelimit_redis rc cluster $seeds timeout=500ms;
    ratelimit_redis quiet 127.0.0.1:${\ $quiet->port} timeout=500ms;
    ratelimit_redis flaky 127.0.0.1:${\ $flaky->port} timeout=500ms;
    ratelimit_redis lost 127.0.0.1:${\ $lost->port} timeout=500ms prefix=t83lost:;
    map \$status \$login_failed { 401 1; 403 1; default 0; }
    map \$status \$charged { ~^50[234] 0; default 1; }
    ratelimit_zone lr  key=\$arg_user requests=5 period=24h algo=fixed redis=main;
    ratelimit_zone lc  key=\$arg_user requests=5 period=24h algo=fixed redis=rc;
    ratelimit_zone ls  key=\$arg_user requests=5 period=24h algo=fixed redis=main sync=100ms;
    ratelimit_zone ll  key=\$arg_user requests=5 period=24h algo=fixed redis=main sync=100ms sync_mode=lease;
    ratelimit_redis gone 127.0.0.1:$dead timeout=100ms;
    ratelimit_zone gz  key=\$arg_user requests=100 period=1h redis=gone;
    ratelimit_zone ld  key=\$arg_user requests=5 period=24h algo=fixed;
    ratelimit_zone tok key=\$arg_k requests=100 period=100s burst=99 redis=main;
    ratelimit_zone ref key=\$arg_k requests=3 period=24h algo=fixed redis=main;
    ratelimit_zone lq  key=\$arg_user requests=5 period=24h algo=fixed redis=quiet;
    ratelimit_zone lf  key=\$arg_user requests=5 period=24h algo=fixed redis=flaky;
    ratelimit_zone lp  key=\$arg_user requests=5 period=24h algo=fixed redis=lost;
    ratelimit_zone rp  key=\$arg_k requests=3 period=24h algo=fixed redis=lost;
    proxy_set_header X-Worker \$pid;
    server {
        listen 127.0.0.1:%%PORT%% reuseport;
        add_header X-Status \$ratelimit_status always;
        add_header X-Who \$pid always;
        location /lr    { ratelimit zone=lr quantity=0 settle=\$login_failed; proxy_pass $up; }
        location /lc    { ratelimit zone=lc quantity=0 settle=\$login_failed; proxy_pass $up; }
        location /ls    { ratelimit zone=ls quantity=0 settle=\$login_failed; proxy_pass $up; }
        location /ll    { ratelimit zone=ll quantity=0 settle=\$login_failed; proxy_pass $up; }
        location /ld    { ratelimit_on_error deny; ratelimit zone=ld quantity=0 settle=1; ratelimit zone=gz; proxy_pass $up; }
        location /tok   { ratelimit zone=tok quantity=0 settle=\$upstream_http_x_tokens; proxy_pass $up; }
        location /lf    { ratelimit zone=lf quantity=0 settle=\$login_failed; proxy_pass $up; }
        location /lp    { ratelimit zone=lp quantity=0 settle=\$login_failed; proxy_pass $up; }
        location /rp    { ratelimit zone=rp settle=\$charged; proxy_pass http://127.0.0.1:$dead; }
        location /rpok  { ratelimit zone=rp settle=\$charged; proxy_pass $up; }
        location = /metrics { ratelimit_metrics; }
        location /lq    { ratelimit zone=lq quantity=0 settle=\$login_failed; proxy_pass $up; }
        location /ref   { ratelimit zone=ref settle=\$charged; proxy_pass http://127.0.0.1:$dead; }
        location /refok { ratelimit zone=ref settle=\$charged; proxy_pass $up; }
        location /api/  { ratelimit_api; }
    }
EOF
my @n = (start_nginx($http), start_nginx($http));
my @ports = map { $_->port } @n;

# A key's remaining units as host $i's ratelimit_api shows them (Redis's state for a
# per-request zone, the host's view for a sync zone).
sub api { my ($i, @zk) = @_; return $n[$i]->key_state(@zk) }
sub remaining { my $s = api(@_); return $s->{remaining} // "status $s->{status}" }

# Script calls the Redis of zone lq ran (FCALL or EVALSHA), from INFO commandstats.
sub script_calls {
    my $info = $quiet->cli('INFO', 'commandstats');
    my $sum = 0;
    $sum += $1 while $info =~ /cmdstat_(?:fcall|evalsha|eval):calls=(\d+)/g;
    return $sum;
}

# (status, X-Status) of one request to host $i.
sub req {
    my ($i, $path) = @_;
    my ($st, $h) = $n[$i]->get($path);
    return ($st // 'ERR', $h->{'x-status'} // '');
}

# ------------------------------------------------------------------ failed logins, exact
for my $case (['lr', 'one Redis'], ['lc', 'a Redis Cluster']) {
    my ($z, $what) = @$case;
    my $user = fresh_key("u$z");
    my $r = run_clients(\@ports, "/$z?user=$user&key=$z&status=200", 8, 10, keepalive => 0, record => 'X-Status');
    is(codes($r), '200', "$what: 80 concurrent successes on both hosts all admitted") or diag(explain $r);
    is(join(',', sort keys %{ $r->{':values'} }), 'PASSED', "$what: all decided in Redis");
    is(remaining(0, $z, $user), 5, "$what: the successes counted nothing");
    my @s;
    for my $i (1 .. 5) {
        my ($st, $x) = req($i % 2, "/$z?user=$user&key=$z&status=401");
        push @s, "$st/$x";
        # the settle lands in Redis after the response: the other host sees it
        is(settle_value(sub { remaining(1 - $i % 2, $z, $user) }, 5 - $i), 5 - $i,
            "$what: failure $i on host " . ($i % 2 + 1) . ', seen by the other host');
    }
    is("@s", join(' ', ('401/PASSED') x 5), "$what: 5 failures alternating between the hosts admitted");
    my @after = map { join '/', req($_, "/$z?user=$user&key=$z&status=401") } 0, 1;
    push @after, join '/', req(1, "/$z?user=$user&key=$z&status=200");
    is("@after", '429/REJECTED 429/REJECTED 429/REJECTED', "$what: then rejected on both hosts, a success too");
}

# A settle equal to the quantity sends nothing; a charge is one more script call.
{
    my $user = fresh_key('calls');
    req(0, "/lq?user=$user&key=calls&status=200");    # the key's first call out of the way
    my $c0 = script_calls();
    req(0, "/lq?user=$user&key=calls&status=200") for 1 .. 10;
    is(settle_value(sub { script_calls() - $c0 }, 10), 10, 'Redis: 10 successes (settle 0 = quantity 0): 10 script calls, no settle sent');
    $c0 = script_calls();
    req(0, "/lq?user=$user&key=calls&status=401");
    is(settle_value(sub { script_calls() - $c0 }, 2), 2, 'Redis: a failure: its decision and one settle call');
    is(remaining(1, 'lq', $user), 4, 'Redis: which charged the failure');
}

# ------------------------------------------------------------------ failed logins, sync
{
    my $user = fresh_key('uls');
    my $r = run_clients(\@ports, "/ls?user=$user&key=ls&status=200", 8, 10, keepalive => 0);
    is(codes($r), '200', 'sync: 80 concurrent successes on both hosts all admitted');
    sleep $lag;
    # failures alternating between the hosts, each after the last one's round: a host's view
    # lags by what the other admitted since the host last sent the key
    my ($admitted, @s, $tries) = (0);
    for my $i (1 .. 12) {
        $tries = $i;
        my ($st) = req($i % 2, "/ls?user=$user&key=ls&status=401");
        push @s, $st;
        $admitted++ if $st eq '401';
        last if @s >= 2 && "@s[-2, -1]" eq '429 429';
        sleep $lag;
    }
    ok($admitted >= 5, "sync: at least the 5 failures admitted ($admitted), the successes counted nothing");
    ok($admitted <= $H * 5, "sync: at most H x R = 10 admitted ($admitted)");
    diag("sync (optimistic, sync=100ms): $admitted failures admitted of limit 5 across 2 hosts, paced ${lag}s: @s");
    # until each host's view holds the failures the other admitted (its rounds fetched them)
    wait_until(sub { remaining(0, 'ls', $user) eq '0' && remaining(1, 'ls', $user) eq '0' });
    my @after = map { (req($_, "/ls?user=$user&key=ls&status=401"))[0] } 0, 1, 0, 1;
    is("@after", '429 429 429 429', 'sync: then both hosts reject');
}

# ------------------------------------------------------------------ failed logins, sync lease
# A lease admits only units Redis granted: quantity=0 takes one while the request runs and its
# settle gives it back (a success) or keeps it (a failure): never more than 5 failures.
{
    my $user = fresh_key('ull');
    my @ok = map { (req($_ % 2, "/ll?user=$user&key=ll&status=200"))[0] } 1 .. 20;
    is("@ok", join(' ', ('200') x 20), 'sync lease: 20 successes on both hosts, one after the other, all admitted');
    my ($admitted, @s) = (0);
    for my $i (1 .. 10) {
        my ($st) = req($i % 2, "/ll?user=$user&key=ll&status=401");
        push @s, $st;
        $admitted++ if $st eq '401';
    }
    is($admitted, 5, "sync lease: exactly the 5 failures admitted, the successes counted nothing (@s)");
    # until the global state in Redis holds the 5 (the hosts' rounds sent them)
    wait_until(sub { (api(0, 'll', $user)->{global}{remaining} // -1) == 0 });
    my @after = map { (req($_, "/ll?user=$user&key=ll&status=401"))[0] } 0, 1, 0, 1;
    is("@after", '429 429 429 429', 'sync lease: then both hosts reject');
}

# ------------------------------------------------------------------ on_error deny
# Redis away and ratelimit_on_error deny: the 503s settle nothing in the limits that admitted.
{
    my $user = fresh_key('uld');
    my @s = map { (req($_ % 2, "/ld?user=$user&key=ld&status=401"))[0] } 1 .. 6;
    is("@s", join(' ', ('503') x 6), 'on_error deny: Redis away, 503');
    is(remaining(0, 'ld', $user), 5, 'on_error deny: the 503s charged nothing (settle=1 on a limit that admitted)');
}

# ------------------------------------------------------------------ tokens from a header
{
    # a bucket of 100 refilling 1 a second: 150 tokens on host 1 -> host 2 rejects, Retry-After
    # 51 s (room for one unit) less the time since the settle
    my $k = fresh_key('tok');
    my $t0 = time;
    my ($st) = req(0, "/tok?k=$k&key=tok&hdr=X-Tokens:150");
    is($st, 200, 'tokens: a fresh key admitted on host 1');
    my ($h, $seen);
    my $deadline = time + 3;
    while (time < $deadline) {
        (my $s, $h) = $n[1]->get("/tok?k=$k&key=tok&hdr=X-Tokens:0");
        if (($s // '') eq '429') { $seen = 1; last }
        sleep 0.02;
    }
    my $span = time - $t0;
    ok($seen, sprintf('tokens: host 2 rejects once the settle landed (within %.2f s)', $span));
    my $ra = $h->{'retry-after'} // '';
    ok($ra ne '' && $ra <= 51 && $ra >= ceil(51 - $span), "tokens: Retry-After $ra: the 51 s of debt less ${\ sprintf '%.2f', $span} s");
    my $s = api(1, 'tok', $k);
    $span = (time - $t0) * 1000;
    ok(defined $s->{retry_after_ms} && $s->{retry_after_ms} <= 51000 && $s->{retry_after_ms} >= 51000 - $span - 1,
        "tokens: retry_after_ms in Redis $s->{retry_after_ms}");
}

# ------------------------------------------------------------------ a settle after a migration
# The key's hash slot moves to another primary while the request runs: its settle, sent where
# the worker's map says, gets MOVED and follows it (no failed try, no second try 500 ms later).
{
    my $user = fresh_key('mv');
    my %before = map { $_->[0] => 1 } $c->scan('rl:{lc:*');
    my ($st) = req(0, "/lc?user=$user&key=lcmv&status=401");
    is(settle_value(sub { remaining(1, 'lc', $user) }, 4), 4, "cluster migration: a first failure charged ($st)");
    my @new = grep { !$before{ $_->[0] } && $_->[0] !~ /:call:/ } $c->scan('rl:{lc:*');  # (not a settle's call id)
    is(scalar @new, 1, 'cluster migration: the key\'s state found');
    my ($key, $src) = @{ $new[0] };
    my $slot = $c->keyslot($key);
    my ($dst) = grep { $_->port != $src->port } $c->primaries;
    my $e = $b->enter($ports[0], "/lc?user=$user&status=401", 'lcmv', ms => 600000);
    ok($e->{held}, 'cluster migration: a second failure held by the upstream');
    $c->migrate_slot($slot, $dst);
    is($c->cli($dst, 'EXISTS', $key) . ' ' . $c->countkeysinslot($src, $slot), '1 0', 'cluster migration: the slot moved with the key');
    is($b->finish('lcmv', $e), 401, 'cluster migration: the request ends (401)');
    is(settle_value(sub { remaining(1, 'lc', $user) }, 3), 3, 'cluster migration: its settle charged the key on the new owner');
    unlike($n[0]->error_log, qr/a settle failed/, 'cluster migration: no settle try failed (the MOVED was followed)');
}

# ------------------------------------------------------------------ refund on 502
{
    my $k = fresh_key('ref');
    my @s;
    for my $i (1 .. 6) {
        push @s, (req($i % 2, "/ref?k=$k"))[0];
        settle_value(sub { remaining(0, 'ref', $k) }, 3);
    }
    is("@s", join(' ', ('502') x 6), 'refund: 6 requests with the upstream down: 502, none rejected (limit 3)');
    is(settle_value(sub { remaining(1, 'ref', $k) }, 3), 3, 'refund: the key still has its 3 units in Redis');
    my @ok = map { (req($_ % 2, "/refok?k=$k&key=ref"))[0] } 1 .. 4;
    is("@ok", '200 200 200 429', 'refund: then 3 admitted, the 4th rejected');
}

for my $i (0, 1) {
    my @bad = grep { /\[(error|crit|alert|emerg)\]/ && !/limiting request|connect\(\) failed|redis "gone"/ } split /\n/, $n[$i]->error_log;
    is(scalar @bad, 0, 'host ' . ($i + 1) . ': no errors in the log') or diag(join "\n", @bad[0 .. ($#bad < 9 ? $#bad : 9)]);
}

# ------------------------------------------------------------------ a settle Redis does not take
{
    # a failed login decided in Redis; Redis killed while the upstream holds it: its settle
    # cannot reach Redis (tried twice): counted once in the metric, and logged
    my $user = fresh_key('lf');
    my $e = $b->enter($ports[0], "/lf?user=$user&status=401", 'lf', ms => 600000);
    ok($e->{held}, 'settle failure: a failed login decided and held by the upstream');
    $flaky->kill_now;
    my $st = $b->finish('lf', $e);
    is($st, 401, 'settle failure: it ends (401) with its Redis gone');
    my $count = sub {
        my (undef, undef, $body) = $n[0]->get('/metrics');
        return ($body // '') =~ /^nginx_ratelimit_settle_failures_total\{zone="lf"\} (\d+)$/m ? $1 : 'none';
    };
    is(settle_value($count, 1, timeout => 5, after => 1), 1, 'settle failure: counted once in nginx_ratelimit_settle_failures_total');
    # (the spec: "retried once, then counted in the metric and logged")
    ok(defined $n[0]->wait_log(qr/\[error\].*settle/, 3), 'settle failure: logged');
    is(settle_value(sub { (($n[1]->get('/metrics'))[2] // '') =~ /^nginx_ratelimit_settle_failures_total\{zone="lr"\} (\d+)$/m ? $1 : 'none' }, 0),
        0, 'settle failure: none for the zones whose settles all landed');
}

# ------------------------------------------------------------------ a settle's reply lost
# Redis ran the settle; the proxy throws its reply away and closes the connection. nginx sends
# it again 500 ms later (on a new connection) with the same call id: Redis answers with the
# first reply and applies nothing. The proxy counts the settle calls Redis answered, so each
# case knows the retry did reach Redis.
{
    my $failures = sub {
        my ($zone) = @_;
        my (undef, undef, $body) = $n[0]->get('/metrics');
        return ($body // '') =~ /^nginx_ratelimit_settle_failures_total\{zone="$zone"\} (\d+)$/m ? $1 : 'none';
    };
    my $lost_re = qr/\[error\].*settle of zone "(?:lp|rp)" was lost/;

    # a failed login's charge, its reply lost once
    my $user = fresh_key('lp');
    $lost->mode('settle_drop', 1);
    my ($st) = req(0, "/lp?user=$user&key=lp&status=401");
    is($st, 401, 'reply lost: a failed login admitted');
    is(settle_value(sub { $lost->settles }, '2 1', timeout => 5), '2 1',
        'reply lost: Redis ran the charge, its reply was lost, the retry reached Redis');
    is(remaining(1, 'lp', $user), 4, 'reply lost: the failure charged once (5 - 1)');
    is($failures->('lp'), 0, 'reply lost: the retry answered, no settle failure counted');

    # a refund of a 502, its reply lost once
    my $k = fresh_key('rp');
    my @ok = map { (req($_ % 2, "/rpok?k=$k&key=rp"))[0] } 1 .. 2;
    is("@ok", '200 200', 'refund, reply lost: 2 of 3 units taken');
    $lost->mode('settle_drop', 1);
    ($st) = req(0, "/rp?k=$k");
    is($st, 502, 'refund, reply lost: the upstream down, 502');
    is(settle_value(sub { $lost->settles }, '4 2', timeout => 5), '4 2',
        'refund, reply lost: Redis ran the refund, its reply was lost, the retry reached Redis');
    is(remaining(1, 'rp', $k), 1, 'refund, reply lost: given back once (3 - 2 admitted)');
    is($failures->('rp'), 0, 'refund, reply lost: no settle failure counted');
    ok(!defined $n[0]->wait_log($lost_re, 0.5), 'reply lost once: no settle logged as lost');

    # lost on both tries: applied once all the same, but not confirmed: counted and logged
    $user = fresh_key('lp');
    $lost->mode('settle_drop', 2);
    ($st) = req(0, "/lp?user=$user&key=lp&status=401");
    is($st, 401, 'reply lost twice: a failed login admitted');
    is(settle_value(sub { $lost->settles }, '6 4', timeout => 5), '6 4', 'reply lost twice: both tries reached Redis');
    is(settle_value(sub { $failures->('lp') }, 1, timeout => 5), 1, 'reply lost twice: counted once as a settle failure');
    ok(defined $n[0]->wait_log($lost_re, 3), 'reply lost twice: logged');
    is(remaining(1, 'lp', $user), 4, 'reply lost twice: charged once all the same');
}

done_testing;
