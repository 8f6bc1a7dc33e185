# ratelimit_api (issue 21, part 1) on the stores t/77 leaves out:
#  - sync zones (sync=100ms, optimistic and lease), two nginx hosts on one Redis: GET shows this
#    host's view (lease: the units it holds) and the global state in Redis ("global"); with Redis
#    down, the view alone and why (200); DELETE resets this host's view and deletes the global
#    state, and the key starts afresh for this host.
#  - Convergence after a DELETE: a key rejected on both hosts, DELETE on host A, the time until
#    host B admits it again (printed; asserted within a generous bound: B's view, rejecting,
#    asks Redis for the key's state again within a few intervals).
#  - A concurrency zone in Redis: in-flight slots shown while requests hold them (backend),
#    DELETE frees them (a request beyond the limit then enters).
#  - A Redis Cluster zone: keys whose state lives on each of three primaries, GET and DELETE of
#    each (routed to the key's node).
# runs alone: it measures time (convergence after a DELETE)
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use RLTest;
use RLTest::Backend qw(start_backend);
use RLTest::Sync qw(wait_sync);
use Test::More;
use JSON::PP qw(decode_json);
use Time::HiRes qw(time sleep);

my $T = 0.1;    # the sync zones' interval

my $redis = start_redis();
my $rp    = $redis->port;
my $be    = start_backend();
my $bp    = $be->port;

my $http = <<"EOF";
    ratelimit_redis r 127.0.0.1:$rp prefix=t78: timeout=2s;   # a loaded machine: no on_error by a timeout
    ratelimit_zone so  key=\$arg_k requests=5 period=1h burst=4 redis=r sync=100ms;
    ratelimit_zone sl  key=\$arg_k requests=5 period=1h burst=4 redis=r sync=100ms sync_mode=lease;
    ratelimit_zone cv  key=\$arg_k requests=3 period=1d algo=fixed redis=r sync=100ms;
    ratelimit_zone cvl key=\$arg_k requests=3 period=1d algo=fixed redis=r sync=100ms sync_mode=lease;
    ratelimit_zone rc  key=\$arg_key concurrency=2 redis=r hold=30s;
    server {
        listen 127.0.0.1:%%PORT%% reuseport;
        location /so  { ratelimit zone=so; empty_gif; }
        location /sl  { ratelimit zone=sl; empty_gif; }
        location /cv  { ratelimit zone=cv; empty_gif; }
        location /cvl { ratelimit zone=cvl; empty_gif; }
        location /rc  { ratelimit zone=rc; proxy_pass http://127.0.0.1:$bp/hold; }
        location /api/ { ratelimit_api write=on; }
        location = /metrics { ratelimit_metrics; }
    }
EOF
my $n1 = start_nginx($http);
my $n2 = start_nginx($http);

# (status, decoded body) of a request to host $n's API; the body must be JSON.
sub api {
    my ($n, $method, $path) = @_;
    my ($st, $h, $body) = http_request($n->port, $path, undef, $method);
    my $json = eval { decode_json($body // '') };
    ok(defined $json, "$method $path: the body is JSON") or diag("body: " . ($body // 'none'));
    return ($st // 'ERR', $json // {});
}

# The same without a test of its own (polling).
sub api_quiet {
    my ($n, $path) = @_;
    my ($st, $h, $body) = http_request($n->port, $path);
    return eval { decode_json($body // '') } // {};
}

sub hit { my ($n, $path, $count) = @_; return join ' ', map { ($n->get($path))[0] // 'ERR' } 1 .. $count }

# Polls host $n's API for $path until $cond->(json) holds, at most $timeout seconds: the json, or undef.
sub wait_api {
    my ($n, $path, $cond, $timeout) = @_;
    my $until = time + ($timeout // 5);
    while (time < $until) {
        my $j = api_quiet($n, $path);
        return $j if $cond->($j);
        sleep 0.05;
    }
    return undef;
}

# The zone's state keys in Redis (not the replies sync calls keep, ":call:<id>").
sub state_keys { my ($z) = @_; return grep { !/:call:/ && !/:reset$/ } $redis->keys_matching("t78:{$z:*") }

# ------------------------------------------------------------- sync, optimistic

{
    is(hit($n1, '/so?k=a', 2), '200 200', 'optimistic: two requests of key a on host 1');
    my $j = wait_api($n1, '/api/zones/so?key=a', sub { ($_[0]{global}{remaining} // -1) == 3 });
    ok($j, 'optimistic: the global state holds the two requests after a round');
    my ($st, $g) = api($n1, 'GET', '/api/zones/so?key=a');
    is($st, 200, 'GET a sync key');
    is($g->{store}, 'sync optimistic', '... of a sync optimistic zone');
    is($g->{found}, JSON::PP::true, "host 1's view holds the key");
    is($g->{remaining}, 3, "host 1's view: three remain");
    is($g->{global}{remaining}, 3, 'the global state: three remain');
    cmp_ok($g->{global}{reset_ms} // 0, '>', 0, '... and a reset');
    ok(!exists $g->{lease_units}, 'no lease units in an optimistic zone');
    ($st, $g) = api($n2, 'GET', '/api/zones/so?key=a');
    is($g->{found}, JSON::PP::false, "host 2's view does not hold the key");
    is($g->{remaining}, 5, "... its view has the whole limit");
    is($g->{global}{remaining}, 3, '... the global state, three');
    ok(scalar(state_keys('so')) > 0, 'the global state is in Redis');

    ($st, $g) = api($n1, 'DELETE', '/api/zones/so?key=a');
    is($st, 200, 'DELETE a sync key');
    is($g->{local_states}, 1, "host 1's view reset");
    cmp_ok($g->{redis_keys_deleted} // 0, '>=', 1, 'the global state deleted');
    is(scalar(state_keys('so')), 0, 'no state of the zone left in Redis');
    ($st, $g) = api($n1, 'GET', '/api/zones/so?key=a');
    is($g->{remaining}, 5, "host 1's view: the whole limit");
    is($g->{global}{remaining}, 5, 'the global state: the whole limit');
    # five rounds of host 1 since (a round sends what its view has not sent yet)
    my $rounds = wait_sync($n1, 'so', rounds => 5);
    $g = api_quiet($n1, '/api/zones/so?key=a');
    is($rounds ? $g->{global}{remaining} : 'no rounds', 5, 'rounds after the DELETE bring back nothing of the old state');
    is(hit($n1, '/so?k=a', 6), '200 200 200 200 200 429', 'host 1 admits the whole limit again');
}

# ------------------------------------------------------------- sync, lease

{
    is(hit($n1, '/sl?k=b', 2), '200 200', 'lease: two requests of key b on host 1 (units granted)');
    my ($st, $g) = api($n1, 'GET', '/api/zones/sl?key=b');
    is($g->{store}, 'sync lease', 'a sync lease zone');
    ok(defined $g->{lease_units}, "host 1's view: the units it holds") or diag(explain($g));
    cmp_ok($g->{global}{remaining}, '<=', 3, 'the global state: at most three left (grants taken from it)');
    ($st, $g) = api($n1, 'DELETE', '/api/zones/sl?key=b');
    is($st, 200, 'DELETE a lease key');
    cmp_ok($g->{redis_keys_deleted} // 0, '>=', 1, 'the global state deleted');
    ($st, $g) = api($n1, 'GET', '/api/zones/sl?key=b');
    is($g->{lease_units}, 0, 'host 1 holds no units of it');
    is($g->{global}{remaining}, 5, 'the global state: the whole limit');
    is(hit($n1, '/sl?k=b', 6), '200 200 200 200 200 429', 'host 1 admits the whole limit again');
}

# ------------------------------------------------------------- convergence after a DELETE

for my $z (qw(cv cvl)) {
    my $mode = $z eq 'cv' ? 'optimistic' : 'lease';
    my $k = "c$z";
    # Host 1 takes the limit; host 2 is sent the key until it rejects too (its view learns it).
    is(hit($n1, "/$z?k=$k", 3), '200 200 200', "$mode: host 1 takes the limit of key $k");
    my $until = time + 5;
    my $last = '';
    $last = ($n2->get("/$z?k=$k"))[0] // 'ERR', sleep 0.05 while $last ne '429' && time < $until;
    is($last, '429', "$mode: host 2 rejects the key too");
    my $settled = wait_api($n2, "/api/zones/$z?key=$k", sub { ($_[0]{global}{remaining} // -1) == 0 });
    ok($settled, "$mode: the global state is spent");
    wait_sync($_, $z, rounds => 3) for $n1, $n2;    # rounds of both hosts since
    is(hit($n1, "/$z?k=$k", 1) . ' ' . hit($n2, "/$z?k=$k", 1), '429 429', "$mode: both hosts reject the key");

    my ($st, $g) = api($n1, 'DELETE', "/api/zones/$z?key=$k");
    my $t0 = time;
    is($st, 200, "$mode: DELETE on host 1");
    my ($admitted, $tries) = (undef, 0);
    while (time - $t0 < 10) {
        $tries++;
        if ((($n2->get("/$z?k=$k"))[0] // '') eq '200') { $admitted = time - $t0; last }
        sleep 0.02;
    }
    ok(defined $admitted, "$mode: host 2 admits the key again after the DELETE on host 1");
    my $bound = 3;    # 30 sync intervals: generous on a loaded machine
    cmp_ok($admitted // 99, '<', $bound, "$mode: ... within ${bound}s") and
        diag(sprintf("%s: host 2 admitted the key %.3f s after the DELETE on host 1 (%d requests; sync interval %.1f s)",
            $mode, $admitted, $tries, $T));
}

# ------------------------------------------------------------- a concurrency zone in Redis

{
    my $e1 = $be->enter($n1->port, '/rc', 'q1');
    ok($e1->{held}, 'a slow request holds a slot');
    my ($st, $j) = api($n1, 'GET', '/api/zones/rc?key=q1');
    is($st, 200, 'GET a Redis concurrency key');
    is($j->{store}, 'redis', 'from Redis');
    is($j->{policy}{algorithm}, 'concurrency', 'its policy');
    is($j->{in_flight}, 1, 'one request in flight');
    is($j->{remaining}, 1, 'one slot left');
    my $e2 = $be->enter($n2->port, '/rc', 'q1');
    ok($e2->{held}, 'a second slow request, on host 2');
    ($st, $j) = api($n1, 'GET', '/api/zones/rc?key=q1');
    is($j->{in_flight}, 2, 'two in flight, across the hosts');
    is($j->{remaining}, 0, 'no slot left');
    ($st, $j) = api($n1, 'GET', '/api/zones/rc?key=q1');
    is($j->{in_flight}, 2, 'reading again: reading took no slot');
    my $e3 = $be->enter($n1->port, '/rc', 'q1');
    is($e3->{status}, 429, 'a third request is rejected');

    ($st, $j) = api($n1, 'DELETE', '/api/zones/rc?key=q1');
    is($st, 200, 'DELETE a Redis concurrency key');
    cmp_ok($j->{redis_keys_deleted} // 0, '>=', 1, 'its slots deleted in Redis');
    ($st, $j) = api($n1, 'GET', '/api/zones/rc?key=q1');
    is($j->{in_flight}, 0, 'no slot taken after the DELETE');
    is($j->{remaining}, 2, 'two slots free');
    my $e4 = $be->enter($n1->port, '/rc', 'q1');
    ok($e4->{held}, 'a request enters although two are still running');
    is($be->finish('q1', $e1, $e2, $e4), '200 200 200', 'the slow requests end');
    my $free = wait_api($n1, '/api/zones/rc?key=q1', sub { ($_[0]{in_flight} // -1) == 0 });
    ok($free, 'no slot left taken once they ended');
}

# ------------------------------------------------------------- Redis down: a sync key's view

{
    $redis->kill_now;
    my ($st, $g) = api($n1, 'GET', '/api/zones/so?key=a');
    is($st, 200, 'Redis down: GET of a sync key still answers');
    is($g->{remaining}, 0, "... with host 1's view");
    is($g->{global}, undef, '... without the global state');
    like($g->{global_error} // '', qr/redis/i, '... saying why');
    ($st, $g) = api($n1, 'DELETE', '/api/zones/so?key=a');
    is($st, 503, 'DELETE of a sync key with Redis down: 503');
}

# ------------------------------------------------------------- a Redis Cluster zone

SKIP: {
    my $c = eval { start_redis_cluster(primaries => 3) };
    skip("no Redis Cluster: $@", 1) unless $c;
    my $seeds = $c->seeds;
    my $nc = start_nginx(<<"EOF");
    ratelimit_redis rc cluster $seeds timeout=2s;
    ratelimit_zone cl key=\$arg_k requests=5 period=1h burst=4 redis=rc;
    server {
        listen 127.0.0.1:%%PORT%%;
        location /cl { ratelimit zone=cl; empty_gif; }
        location /api/ { ratelimit_api write=on; }
    }
EOF
    # one key whose state lives on each primary
    my $l = $c->learn($nc, '/cl', 'rl:{cl:', map { "k$_" } 1 .. 30);
    my %on;
    $on{ $l->{$_}{node}->port } //= $_ for sort { substr($a, 1) <=> substr($b, 1) } keys %$l;
    my @keys = values %on;
    is(scalar @keys, 3, 'keys on each of the three primaries');
    for my $k (@keys) {
        my $node = $l->{$k}{node}->port;
        is(hit($nc, "/cl?k=$k", 2), '200 200', "$k (node $node): two more requests");
        my ($st, $j) = api($nc, 'GET', "/api/zones/cl?key=$k");
        is($st, 200, "$k: GET from its node");
        is($j->{store}, 'redis', "$k: ... a Redis zone");
        is($j->{remaining}, 2, "$k: ... three of five used (one by learn)");
        ($st, $j) = api($nc, 'DELETE', "/api/zones/cl?key=$k");
        is($st, 200, "$k: DELETE");
        is($j->{redis_keys_deleted}, 1, "$k: ... its key deleted");
        my ($ok, $exists) = $c->cmd($l->{$k}{node}, 'EXISTS', $l->{$k}{key});
        is($exists, 0, "$k: ... gone from its node");
        ($st, $j) = api($nc, 'GET', "/api/zones/cl?key=$k");
        is($j->{remaining}, 5, "$k: the whole limit again");
    }
    unlike($nc->error_log, qr/\[(alert|emerg|crit)\]/, 'cluster: no alert in the error log');
}

unlike($n1->error_log . $n2->error_log, qr/\[(alert|emerg|crit)\]/, 'no alert in the error logs');
done_testing();
