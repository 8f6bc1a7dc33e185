# ratelimit_redis ... resolve: the host name of a Redis resolved in the workers through nginx's
# resolver, again as its TTL (resolver valid=) passes and after a connection fails; nginx -t and
# a start do not need the DNS server; when the name moves to another address (same port, another
# loopback address: a real change) the workers follow without a reload; failed answers (SERVFAIL,
# silence) keep the last good address; resolve without a resolver is an nginx -t error; a
# cluster seed given by name. The DNS server is RLTest::DNS (Net::DNS::Nameserver).
# runs alone: it measures time (resolver and failover delays)
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use RLTest;
use Test::More;
use Time::HiRes qw(time sleep);

my $timeout_ms = 100;
my $margin_ms  = 300;
my $t_start    = time;

# Two Redis servers on the same port, at 127.0.0.2 and 127.0.0.3.
my $rport = free_port();
my $r2 = start_redis(bind => '127.0.0.2', port => $rport);
my $r3 = start_redis(bind => '127.0.0.3', port => $rport);
is($r2->cli('PING') . ' ' . $r3->cli('PING'), 'PONG PONG', "Redis at 127.0.0.2:$rport and 127.0.0.3:$rport");
my $dport = free_port();    # the DNS server comes later: nginx must start without it
my $cluster = start_redis_cluster(primaries => 3);
my ($seed_port) = map { /:(\d+)$/ } split ' ', $cluster->seeds;

my $http = <<"EOF2";
    resolver 127.0.0.1:$dport valid=1s ipv6=off;
    resolver_timeout 1s;
    ratelimit_redis r redis.test:$rport resolve timeout=${timeout_ms}ms;
    ratelimit_redis c cluster cluster.redis.test:$seed_port resolve timeout=${timeout_ms}ms;
    ratelimit_zone z  key=\$arg_k requests=5 period=1h burst=4 redis=r;
    ratelimit_zone w  key=\$arg_k requests=1000000 period=1h burst=999999 redis=r;
    ratelimit_zone zc key=\$arg_k requests=5 period=1h burst=4 redis=c;
    server {
        listen 127.0.0.1:%%PORT%%;
        add_header X-Status \$ratelimit_status always;
        add_header X-Who \$pid always;
        location /a      { ratelimit zone=z; empty_gif; }
        location /a_deny { ratelimit_on_error deny; ratelimit zone=z; empty_gif; }
        location /w      { ratelimit zone=w; empty_gif; }
        location /c      { ratelimit zone=zc; empty_gif; }
    }
EOF2

# 1. nginx -t and the start do not resolve the name (no DNS server yet).
{
    my $t0 = time;
    my ($rc, $out) = nginx_t($http);
    is($rc, 0, 'nginx -t with resolve: the name is not resolved (no DNS server runs)') or diag($out);
    ok(time - $t0 < 5, sprintf('... in %.1fs', time - $t0));
}
my $n = start_nginx($http);
my @workers = $n->worker_pids;
{
    my @r = map { [$n->timed('/a?k=' . fresh_key('nodns'))] } 1 .. 3;
    is(join(' ', map { "$_->[0] $_->[1]" } @r), join(' ', ('200 ERROR') x 3), 'no DNS answer yet: on_error allow applies');
    my ($slowest) = sort { $b <=> $a } map { $_->[2] } @r;
    ok($slowest < $timeout_ms + $margin_ms, "... within the timeout (slowest ${slowest}ms): requests never wait for the resolver");
    my ($s) = $n->timed('/a_deny?k=' . fresh_key('nodns'));
    is($s, 503, '... on_error deny: 503');
}

# 2. The DNS server starts: redis.test is 127.0.0.2. The workers resolve it by themselves.
my $d = start_dns(port => $dport);
$d->set('redis.test', '127.0.0.2', ttl => 1);
$d->set('cluster.redis.test', '127.0.0.1', ttl => 1);
is(join(',', $d->lookup('redis.test')), '127.0.0.2', 'the DNS server answers redis.test = 127.0.0.2');

# the state key of client key $k in zone z, on $r: how many (0 or 1)
sub keys_of_zone { my ($r, $zone) = @_; return scalar(() = $r->keys_matching("rl:{$zone:*")) }

{
    my $t = $n->resumes_within(sub { '/a?k=' . fresh_key('up') }, 8);
    ok($t < 5, sprintf('the DNS server up: limiting starts in %.2fs', $t));
    ok(defined $n->wait_decided(sub { '/w?k=' . fresh_key('w') }, 5), 'every worker resolved the name and decides');
    ok($d->queries('redis.test') >= 1, 'nginx asked the DNS server (' . $d->queries('redis.test') . ' queries)');
    my ($b2, $b3) = (keys_of_zone($r2, 'z'), keys_of_zone($r3, 'z'));
    my $k = fresh_key('exact');
    my @s = map { ($n->timed("/a?k=$k"))[0] } 1 .. 6;
    is("@s", '200 200 200 200 200 429', 'at 127.0.0.2: 5 admitted, then rejected');
    is(keys_of_zone($r2, 'z') - $b2, 1, 'the state is in the Redis at 127.0.0.2');
    is(keys_of_zone($r3, 'z') - $b3, 0, '... not in the one at 127.0.0.3');
}

# 3. redis.test moves to 127.0.0.3 (the old Redis still runs): the workers follow, no reload.
{
    my $q0 = $d->queries('redis.test');
    $d->set('redis.test', '127.0.0.3', ttl => 1);
    my $t0 = time;
    my ($moved, $b3) = (undef, keys_of_zone($r3, 'z'));
    # every worker must have moved: fresh keys until the new Redis got several in a row
    my $in_a_row = 0;
    while (time - $t0 < 8) {
        my $before = keys_of_zone($r3, 'z');
        $n->get('/a?k=' . fresh_key('mv'));
        $in_a_row = keys_of_zone($r3, 'z') > $before ? $in_a_row + 1 : 0;
        if ($in_a_row >= 6) { $moved = time; last }
        sleep 0.05;
    }
    ok(defined $moved, sprintf('redis.test = 127.0.0.3: the workers followed in %.2fs', defined $moved ? $moved - $t0 : 99));
    ok($d->queries('redis.test') > $q0, 'the name was asked again (' . ($d->queries('redis.test') - $q0) . ' queries)');
    my ($b2, $c3) = (keys_of_zone($r2, 'z'), keys_of_zone($r3, 'z'));
    my $k = fresh_key('exact');
    my @s = map { ($n->timed("/a?k=$k"))[0] } 1 .. 6;
    is("@s", '200 200 200 200 200 429', 'at 127.0.0.3: 5 admitted, then rejected');
    is(keys_of_zone($r3, 'z') - $c3, 1, 'the state is in the Redis at 127.0.0.3');
    is(keys_of_zone($r2, 'z') - $b2, 0, '... none goes to 127.0.0.2 any more');
    is(join(' ', $n->worker_pids), join(' ', @workers), 'no reload, no new worker');
}

# 4. The DNS server fails (SERVFAIL, then silence): the last good address keeps working, also
# after its connection failed (the Redis at 127.0.0.3 down for a while, then back).
my $b2_before_fail = keys_of_zone($r2, 'z');
for my $mode (qw(servfail timeout)) {
    $d->fail('redis.test', $mode);
    my $q0 = $d->queries('redis.test');
    # the name's cache (valid=1s) runs out and it is asked again, and fails (nginx's resolver
    # resends an unanswered query only every few seconds)
    my $asked = $d->wait_queries('redis.test', $q0 + 1, 8);
    ok($asked >= $q0 + 1, "DNS $mode: nginx asked again and got no answer (" . ($asked - $q0) . ' queries)');
    sleep 0.3;    # the failed answer (or the resolver's timeout) has reached the workers
    my ($b3) = keys_of_zone($r3, 'z');
    my $k = fresh_key("dns$mode");
    my @s = map { join ' ', ($n->timed("/a?k=$k"))[0, 1] } 1 .. 6;
    is("@s", join(' ', ('200 PASSED') x 5, '429 REJECTED'), "DNS $mode: still limited at the last good address");
    is(keys_of_zone($r3, 'z') - $b3, 1, "DNS $mode: ... in the Redis at 127.0.0.3");
    # the Redis goes away while DNS fails: the connection fails, the name is asked again and
    # fails again; when the Redis is back, the workers reconnect to the last good address
    $r3->kill_now('KILL');
    my @down;
    for (1 .. 6) { push @down, ($n->timed('/a?k=' . fresh_key('down')))[1]; sleep 0.2 }
    is(join(' ', grep { $_ ne 'ERROR' } @down), '', "DNS $mode, the Redis down: on_error meanwhile");
    $r3->restart;
    my $t = $n->resumes_within(sub { '/a?k=' . fresh_key('rs') }, 5);
    ok($t < 2.5, sprintf("DNS $mode, the Redis back: limiting resumes at the last good address in %.2fs", $t));
    ok(defined $n->wait_decided(sub { '/w?k=' . fresh_key('w') }, 5), "DNS $mode: every worker decides again");
    ok(keys_of_zone($r3, 'z') >= 1, "DNS $mode: ... in the Redis at 127.0.0.3");
    is(keys_of_zone($r2, 'z') - $b2_before_fail, 0, "DNS $mode: nothing went to 127.0.0.2");
}

# 5. The DNS server answers again, with 127.0.0.2: the workers move back.
{
    $d->set('redis.test', '127.0.0.2', ttl => 1);
    my $t0 = time;
    my ($moved, $in_a_row) = (undef, 0);
    while (time - $t0 < 8) {
        my $before = keys_of_zone($r2, 'z');
        $n->get('/a?k=' . fresh_key('back'));
        $in_a_row = keys_of_zone($r2, 'z') > $before ? $in_a_row + 1 : 0;
        if ($in_a_row >= 6) { $moved = time; last }
        sleep 0.05;
    }
    ok(defined $moved, sprintf('redis.test = 127.0.0.2 again: the workers moved back in %.2fs', defined $moved ? $moved - $t0 : 99));
}

# 6. A cluster seed by name (cluster.redis.test = 127.0.0.1).
{
    my $t = $n->resumes_within(sub { '/c?k=' . fresh_key('cw') }, 5);
    ok($t < 5, sprintf('cluster seed by name: limiting in the cluster (%.2fs)', $t));
    my $k = fresh_key('cl');
    my @s = map { ($n->timed("/c?k=$k"))[0] } 1 .. 6;
    is("@s", '200 200 200 200 200 429', 'cluster seed by name: 5 admitted, then rejected');
    my @found = $cluster->scan('rl:{zc:*');
    ok(scalar(@found) >= 1, 'cluster seed by name: the state is in the cluster');
    ok($d->queries('cluster.redis.test') >= 1, 'cluster seed by name: resolved by the DNS server');
}

# 7. resolve without a resolver: nginx -t fails, naming the directive; the same without
# resolve but with a resolver is fine.
{
    my ($rc, $out, $file) = nginx_t(<<"EOF3");
    ratelimit_redis r redis.test:$rport resolve;   # BAD
    ratelimit_zone z key=\$arg_k rate=1r/s redis=r;
EOF3
    isnt($rc, 0, 'resolve without a resolver: nginx -t fails');
    like($out, qr/resolver/, '... the message names the resolver') or diag($out);
    like($out, qr/ratelimit_redis/, '... and the directive') or diag($out);
    my $line = conf_line_of($file, '# BAD');
    like($out, qr/\Q$file\E:$line\b/, '... with its file and line') or diag($out);

    ($rc, $out) = nginx_t(<<"EOF4");
    resolver 127.0.0.1:$dport valid=1s;
    ratelimit_redis r 127.0.0.2:$rport resolve;
    ratelimit_zone z key=\$arg_k rate=1r/s redis=r;
EOF4
    is($rc, 0, 'resolve with an IP address: accepted') or diag($out);
}

is(join(' ', $n->worker_pids), join(' ', @workers), 'the same workers run: none crashed');
unlike($n->error_log, qr/exited on signal|\[alert\]|\[emerg\]/, 'no crash, alert or emerg in the log');
diag(sprintf 'took %.1fs', time - $t_start);
done_testing;
