# ratelimit_api (issue 21, part 1): GET .../zones lists every zone (store, policies, keys,
# capacity, evictions); GET .../zones/NAME?key=K shows one key's state (remaining, reset,
# retry-after for one unit, block, in-flight slots) in shared memory, in Redis and for a
# concurrency zone, and reading consumes nothing; DELETE (write=on) makes the key start afresh,
# its block lifted, in shared memory and in Redis; addr= takes a textual address for
# $binary_remote_addr zones; errors are JSON: 404 unknown zone, 400 bad key, 405 write off or
# another method, 503 when Redis is down; a storm of DELETEs is logged once a second per worker
# (issue 30). Every body is parsed with JSON::PP.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use RLTest;
use RLTest::Backend qw(start_backend);
use Test::More;
use JSON::PP qw(decode_json);

my $redis = start_redis();
my $rp = $redis->port;
my $b  = start_backend();
my $bp = $b->port;

my $http = <<"EOF";
    ratelimit_redis main 127.0.0.1:$rp prefix=t77: timeout=2s;    # a loaded machine: no on_error by a timeout
    ratelimit_zone shm  key=\$arg_k requests=5 period=1h burst=4;
    ratelimit_zone blk  key=\$arg_k requests=1 period=1h block=1h;
    ratelimit_zone ip   key=\$binary_remote_addr requests=3 period=1h burst=2;
    ratelimit_zone red  key=\$arg_k requests=5 period=1h burst=4 redis=main;
    ratelimit_zone cc   key=\$arg_key concurrency=2;
    server {
        listen 127.0.0.1:%%PORT%%;
        location /shm { ratelimit zone=shm; empty_gif; }
        location /blk { ratelimit zone=blk; empty_gif; }
        location /ip  { ratelimit zone=ip; empty_gif; }
        location /red { ratelimit zone=red; empty_gif; }
        location /cc  { ratelimit zone=cc; proxy_pass http://127.0.0.1:$bp/hold; }
        location /api/ { ratelimit_api write=on; }
        location /ro/  { ratelimit_api; }
    }
EOF
my $n = start_nginx($http);
my $port = $n->port;

# (status, decoded body or undef) of a request to the API; the body must be JSON.
sub api {
    my ($method, $path) = @_;
    my ($st, $h, $body) = http_request($port, $path, undef, $method);
    my $json = eval { decode_json($body // '') };
    ok(defined $json, "$method $path: the body is JSON") or diag("body: " . ($body // 'none'));
    is($h->{'content-type'} // '', 'application/json', "$method $path: Content-Type application/json");
    return ($st // 'ERR', $json // {});
}

my $nx = $n;
sub hit { my ($path, $count) = @_; return join ' ', map { ($nx->get($path))[0] // 'ERR' } 1 .. $count }

# ------------------------------------------------------------- the zones

{
    is(hit('/shm?k=a', 2), '200 200', 'two requests of key a');
    my ($st, $j) = api('GET', '/api/zones');
    is($st, 200, 'GET /zones answers');
    my %z = map { $_->{name} => $_ } @{ $j->{zones} || [] };
    is_deeply([sort keys %z], [qw(blk cc ip red shm)], 'every zone is listed');
    is($z{shm}{store}, 'shared memory', 'shm: its store');
    is($z{red}{store}, 'redis', 'red: its store');
    is($z{red}{redis}, 'main', 'red: its ratelimit_redis');
    is($z{cc}{store}, 'in-flight', 'cc: its store');
    is($z{shm}{policies}[0]{algorithm}, 'gcra', 'shm: its algorithm');
    is($z{shm}{policies}[0]{requests}, 5, 'shm: its requests');
    is($z{shm}{policies}[0]{period_ms}, 3600000, 'shm: its period');
    is($z{blk}{policies}[0]{block_ms}, 3600000, 'blk: its block');
    is($z{cc}{policies}[0]{concurrency}, 2, 'cc: its concurrency');
    is($z{shm}{keys}, 1, 'shm: one key in use');
    cmp_ok($z{shm}{capacity}, '>', 1000, 'shm: its capacity');
    is($z{shm}{evictions}, 0, 'shm: no evictions');
}

# ------------------------------------------------------------- a key in shared memory

{
    my ($st, $j) = api('GET', '/api/zones/shm?key=a');
    is($st, 200, 'GET a key');
    is($j->{found}, JSON::PP::true, 'the key is found');
    is($j->{limit}, 5, 'its limit');
    is($j->{remaining}, 3, 'two of five used: three remain');
    cmp_ok($j->{reset_ms}, '>', 0, 'it resets later');
    is($j->{retry_after_ms}, 0, 'one more would pass now');
    is($j->{blocked_until}, undef, 'no block');
    ($st, $j) = api('GET', '/api/zones/shm?key=a');
    is($j->{remaining}, 3, 'reading again: reading consumed nothing');
    is(hit('/shm?k=a', 1), '200', 'a request after the readings');
    ($st, $j) = api('GET', '/api/zones/shm?key=a');
    is($j->{remaining}, 2, 'the request counted: two remain');

    ($st, $j) = api('GET', '/api/zones/shm?key=never');
    is($j->{found}, JSON::PP::false, 'an unknown key is not found');
    is($j->{remaining}, 5, 'an unknown key has its whole limit');
    my ($st2, $l) = api('GET', '/api/zones');
    my ($shm) = grep { $_->{name} eq 'shm' } @{ $l->{zones} };
    is($shm->{keys}, 1, 'reading an unknown key made no slot');

    is(hit('/shm?k=a', 3), '200 200 429', 'key a runs out');
    ($st, $j) = api('GET', '/api/zones/shm?key=a');
    is($j->{remaining}, 0, 'nothing remains');
    cmp_ok($j->{retry_after_ms}, '>', 600000, 'one more unit in about 12 minutes');
    cmp_ok($j->{retry_after_ms}, '<=', 720000, '... not later');

    ($st, $j) = api('DELETE', '/ro/zones/shm?key=a');
    is($st, 405, 'DELETE where write is off: 405');
    like($j->{error} // '', qr/write=on/, '... saying why');
    is(hit('/shm?k=a', 1), '429', 'the key is still limited');

    ($st, $j) = api('DELETE', '/api/zones/shm?key=a');
    is($st, 200, 'DELETE with write=on');
    is($j->{reset}, JSON::PP::true, '... reset');
    ($st, $j) = api('GET', '/api/zones/shm?key=a');
    is($j->{remaining}, 5, 'after DELETE the key has its whole limit');
    is(hit('/shm?k=a', 1), '200', 'and passes');
}

# ------------------------------------------------------------- a block

{
    is(hit('/blk?k=b', 2), '200 429', 'key b rejected: its block starts');
    my ($st, $j) = api('GET', '/api/zones/blk?key=b');
    ok(defined $j->{blocked_until}, 'blocked_until is shown');
    cmp_ok($j->{blocked_for_ms} // 0, '>', 3500000, 'blocked for about an hour');
    cmp_ok(abs(($j->{blocked_until} // 0) - (time * 1000 + 3600000)), '<', 5000, 'blocked_until is unix ms');
    api('DELETE', '/api/zones/blk?key=b');
    ($st, $j) = api('GET', '/api/zones/blk?key=b');
    is($j->{blocked_until}, undef, 'DELETE lifts the block');
    is(hit('/blk?k=b', 1), '200', 'the key passes again');
}

# ------------------------------------------------------------- errors and keys

{
    my ($st, $j) = api('GET', '/api/zones/nope?key=a');
    is($st, 404, 'unknown zone: 404');
    like($j->{error} // '', qr/unknown zone/, '... saying so');
    ($st, $j) = api('GET', '/api/zones/shm');
    is($st, 400, 'no key: 400');
    like($j->{error} // '', qr/missing key/, '... saying so');
    ($st, $j) = api('GET', '/api/zones/shm?key=a%zz');
    is($st, 400, 'malformed percent-encoding: 400');
    ($st, $j) = api('GET', '/api/zones/shm?key=' . ('x' x 5000));
    is($st, 400, 'a key of more than 4096 bytes: 400');
    ($st, $j) = api('GET', '/api/zones/ip?addr=not.an.address');
    is($st, 400, 'addr= that is not an address: 400');
    ($st, $j) = api('POST', '/api/zones/shm?key=a');
    is($st, 405, 'POST: 405');
    ($st, $j) = api('DELETE', '/api/zones');
    is($st, 405, 'DELETE of the list: 405');

    # $arg_k is the argument as sent (not decoded): the zone's key is the 8 bytes "sp%20ace".
    is(hit('/shm?k=sp%20ace', 1), '200', 'a key with a percent sign');
    ($st, $j) = api('GET', '/api/zones/shm?key=sp%2520ace');
    is($j->{found}, JSON::PP::true, 'key= percent-encoded (%25 for its %) finds it');
    is($j->{remaining}, 4, '... with its state');
    ($st, $j) = api('GET', '/api/zones/shm?key=sp%20ace');
    is($j->{found}, JSON::PP::false, 'key=sp%20ace is the key "sp ace", another one');

    is(hit('/ip', 2), '200 200', 'two requests from 127.0.0.1');
    ($st, $j) = api('GET', '/api/zones/ip?addr=127.0.0.1');
    is($st, 200, 'addr= answers');
    is($j->{found}, JSON::PP::true, 'addr=127.0.0.1 is the binary address key');
    is($j->{remaining}, 1, '... with its state');
    ($st, $j) = api('GET', '/api/zones/ip?key=%7F%00%00%01');
    is($j->{remaining}, 1, 'the same key percent-encoded');
    ($st, $j) = api('GET', '/api/zones/ip?addr=127.0.0.2');
    is($j->{found}, JSON::PP::false, 'another address is another key');
    ($st, $j) = api('GET', '/api/zones/ip?addr=::1');
    is($st, 200, 'an IPv6 address is taken');
    is($j->{remaining}, 3, '... and is another key');
}

# ------------------------------------------------------------- a concurrency zone

{
    my $e = $b->enter($port, '/cc', 'ck');
    ok($e->{held}, 'a slow request holds a slot');
    my ($st, $j) = api('GET', '/api/zones/cc?key=ck');
    is($j->{in_flight}, 1, 'one request in flight');
    is($j->{remaining}, 1, 'one slot left');
    is($j->{policy}{algorithm}, 'concurrency', 'its policy');
    is($b->finish('ck', $e), '200', 'the slow request ends');
    ($st, $j) = api('GET', '/api/zones/cc?key=ck');
    is($j->{in_flight}, 0, 'no request in flight once it ended');
}

# ------------------------------------------------------------- a storm of DELETEs (issue 30)

{
    # DELETEs across three second boundaries (bounded: 20 s, 20000 requests): each worker logs
    # a zone's resets once a second at most, and says how many of the second before it did not.
    my $re = qr/ratelimit_api: a key of zone "shm" reset(?: \(and (\d+) more not logged\))?/;
    my $before = () = $n->error_log =~ /$re/g;
    my ($start, $sent, $failed) = (time, 0, 0);
    while (time < $start + 3 && $sent < 20000) {
        my ($st) = http_request($port, "/api/zones/shm?key=storm$sent", undef, 'DELETE');
        $failed++ unless ($st // '') eq '200';
        $sent++;
    }
    my $secs = time - $start + 2;    # the seconds the storm touched (and one: a worker's cached clock)
    is($failed, 0, "a storm of $sent DELETEs: each answered 200");
    my ($log, @lines, $counted) = ($n->error_log);
    while ($log =~ /$re/g) { push @lines, $1 // 0 }
    splice @lines, 0, $before;
    $counted += 1 + $_ for @lines;
    cmp_ok(scalar(@lines), '<=', $secs * $n->{workers},
        "... logged in " . scalar(@lines) . " lines: at most one a second per worker ($secs s, $n->{workers} workers)");
    cmp_ok(scalar(@lines), '>=', 2, '... at least one line in each of two seconds');
    ok((grep { $_ > 0 } @lines), '... a line says how many resets of the second before went unlogged');
    cmp_ok($counted, '<=', $sent, "... the lines account for $counted resets, none more than sent");
}

# ------------------------------------------------------------- a key in Redis

{
    is(hit('/red?k=r', 2), '200 200', 'two requests of key r through Redis');
    my ($st, $j) = api('GET', '/api/zones/red?key=r');
    is($st, 200, 'GET a Redis key');
    is($j->{store}, 'redis', 'from Redis');
    is($j->{remaining}, 3, 'three of five remain');
    is($j->{retry_after_ms}, 0, 'one more would pass');
    ($st, $j) = api('GET', '/api/zones/red?key=r');
    is($j->{remaining}, 3, 'reading again: reading consumed nothing');
    is(hit('/red?k=r', 3), '200 200 200', 'key r takes the rest');
    ($st, $j) = api('GET', '/api/zones/red?key=r');
    is($j->{remaining}, 0, 'nothing remains');
    cmp_ok($j->{retry_after_ms}, '>', 600000, 'one more unit in about 12 minutes');
    is(hit('/red?k=r', 1), '429', 'key r is limited');
    ok(scalar($redis->keys_matching('t77:*')) > 0, 'its state is in Redis');

    ($st, $j) = api('DELETE', '/api/zones/red?key=r');
    is($st, 200, 'DELETE a Redis key');
    cmp_ok($j->{redis_keys_deleted} // 0, '>=', 1, 'its Redis key deleted');
    is(scalar(grep { !/:block$/ && !/:reset$/ } $redis->keys_matching('t77:*')), 0, 'no state left in Redis');
    is(scalar(grep { /:reset$/ } $redis->keys_matching('t77:*')), 1, "the reset's time kept beside the key (issue 30)");
    ($st, $j) = api('GET', '/api/zones/red?key=r');
    is($j->{remaining}, 5, 'the key starts afresh');
    is(hit('/red?k=r', 1), '200', 'and passes (no rejection remembered)');

    my @before = sort $redis->keys_matching('t77:*');
    ($st, $j) = api('GET', '/api/zones/red?key=unknown');
    is($j->{remaining}, 5, 'an unknown Redis key has its whole limit');
    is_deeply([sort $redis->keys_matching('t77:*')], \@before, 'reading an unknown key wrote nothing to Redis');

    $redis->kill_now;
    ($st, $j) = api('GET', '/api/zones/red?key=r');
    is($st, 503, 'Redis down: 503');
    like($j->{error} // '', qr/redis/i, '... with the reason');
    ($st, $j) = api('DELETE', '/api/zones/red?key=r');
    is($st, 503, 'DELETE with Redis down: 503');
    ($st, $j) = api('GET', '/api/zones/shm?key=a');
    is($st, 200, 'shared-memory zones still answer');
}

unlike($n->error_log, qr/\[(alert|emerg|crit)\]/, 'no alert in the error log');
done_testing();
