# Redis Cluster: the state spreads over the primaries by its hash tag (discovered from one
# seed), two nginx hosts sharing the cluster admit exactly the limit for every algorithm, a
# request with limits on three different primaries is all or nothing, hostile keys (braces,
# huge, binary) cannot break the key layout nor share state, and the mode is checked by the
# workers (cluster against a standalone server and the reverse: logged with the directive's
# place, on_error applies; an unreachable cluster is not an error).
# runs alone: it loads the machine (hundreds of concurrent requests, slot migrations timed)
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use RLTest;
use Test::More;
use Time::HiRes qw(time sleep);

my $timeout_ms = 150;
my $margin_ms  = 250;    # scheduling slack of a loaded 2-core test machine
my $t_start    = time;

my $c     = start_redis_cluster(primaries => 3);
my @prim  = $c->primaries;
my $seeds = $c->seeds;
is(scalar @prim, 3, 'the cluster has three primaries');
my @algos  = qw(gcra token leaky fixed sliding log);
my $layout = qr/^rl:\{[a-z_]+:[0-9a-f]{32}\}:(?:gcra|token|leaky|fixed|sliding|log)$/;

my ($zones, $locs) = ('', '');
for my $a (@algos) {
    my $burst = $a =~ /^(gcra|token|leaky)$/ ? ' burst=59' : '';
    $zones .= "    ratelimit_zone c_$a key=\$arg_k requests=60 period=1h$burst algo=$a redis=rc;\n";
    $locs  .= "        location /$a { ratelimit zone=c_$a; empty_gif; }\n";
}
# Three limits of one request: 30 (fixed window), 20 (gcra), 40 (exact log).
my $multi_zones = <<'EOF2';
    ratelimit_zone ma key=$arg_k requests=30 period=1h algo=fixed redis=rc;
    ratelimit_zone mb key=$arg_k requests=20 period=1h burst=19 algo=gcra redis=rc;
    ratelimit_zone mc key=$arg_k requests=40 period=1h algo=log redis=rc;
EOF2

my $http = <<"EOF2";
    ratelimit_redis rc  cluster $seeds timeout=${timeout_ms}ms;
    ratelimit_redis one cluster ${\ $prim[0]->addr} timeout=${timeout_ms}ms;
$zones$multi_zones
    ratelimit_zone warm   key=\$arg_k requests=1000000 period=1h burst=999999 redis=rc;
    ratelimit_zone spread key=\$arg_k requests=5 period=1h redis=one;
    ratelimit_zone hh     key=\$http_x_k requests=3 period=1h burst=2 redis=rc;
    ratelimit_zone hu     key=\$uri requests=3 period=1h burst=2 redis=rc;
    server {
        listen 127.0.0.1:%%PORT%% reuseport;
        large_client_header_buffers 4 32k;
        ratelimit_on_error deny;
        add_header X-Status \$ratelimit_status always;
        add_header X-Who \$pid always;
$locs
        location /warm   { ratelimit zone=warm; empty_gif; }
        location /spread { ratelimit zone=spread; empty_gif; }
        location /multi  { ratelimit zone=ma; ratelimit zone=mb; ratelimit zone=mc; empty_gif; }
        location /peek   { ratelimit zone=ma quantity=0; ratelimit zone=mb quantity=0; ratelimit zone=mc quantity=0; empty_gif; }
        location /hh     { ratelimit zone=hh; empty_gif; }
        location /hu/    { ratelimit zone=hu; empty_gif; }
    }
EOF2
my $n1 = start_nginx($http);
my $n2 = start_nginx($http);
my %workers = map { $_ => [$_->worker_pids] } $n1, $n2;

# Until every worker has decided a request in the cluster (the slot map is discovered without
# blocking: this keeps the first requests of a worker out of the exact counts below).
ok(defined $n1->wait_decided('/warm?k=ready') && defined $n2->wait_decided('/warm?k=ready'),
    'every worker of both hosts decides in the cluster');

# 1. Keys spread over every primary, though the spread zone's ratelimit_redis names one seed.
{
    my $r = run_clients($n1->port, sub { "/spread?k=s$_[0]_$_[1]" }, 4, 50, keepalive => 1, record => 'X-Status');
    is($r->{200} // 0, 200, 'spread: 200 distinct keys, each admitted');
    is($r->{':values'}{PASSED} // 0, 200, 'spread: each decided in the cluster (PASSED)');
    my $total = 0;
    for my $p (@prim) {
        my $size = $c->dbsize($p);
        ok($size > 0, 'spread: primary ' . $p->port . " holds rate-limit keys (DBSIZE $size)");
        my @keys = map { $_->[0] } grep { $_->[1]->port == $p->port } $c->scan('rl:{spread:*');
        ok(@keys > 0, 'spread: primary ' . $p->port . ' holds ' . scalar(@keys) . ' keys of the zone');
        $total += @keys;
        my @bad = grep { !/^rl:\{spread:[0-9a-f]{32}\}:gcra$/ } @keys;
        is("@bad", '', 'spread: key names are rl:{spread:<32 hex>}:gcra on ' . $p->port);
    }
    is($total, 200, 'spread: one state key per client key, 200 in all');
}

# 2. Exact limits with two hosts (4 workers) sharing the cluster, for every algorithm.
avoid_window_edge(3600, 25);
my $conns = sub { map { $c->info($_, 'stats') =~ /total_connections_received:(\d+)/ ? $1 : 0 } @prim };
my @conns_before = $conns->();
for my $a (@algos) {
    my $r = run_clients([$n1->port, $n2->port], "/$a?k=shared", 12, 40, keepalive => 0, record => 'X-Who');
    my %codes = map { $_ => $r->{$_} } grep { !/^:/ } keys %$r;
    is($codes{200} // 0, 60, "$a: exactly 60 of 480 concurrent requests admitted across two hosts");
    is($codes{429} // 0, 420, "$a: the other 420 rejected");
    is(join(',', sort keys %codes), '200,429', "$a: no other status") or diag(explain \%codes);
    is(scalar(grep { length } keys %{ $r->{':values'} }), 4, "$a: all four workers served requests");
}
{
    # Kept, pipelined connections: at most one per worker (4) and ratelimit_redis (2) and node,
    # not one per request (2880 requests were decided).
    my @conns_after = $conns->();
    my @new = map { $conns_after[$_] - $conns_before[$_] } 0 .. $#prim;
    ok(!grep({ $_ > 8 } @new), "new connections per primary during 2880 requests: @new (at most 8)");
    my @keys = map { $_->[0] } $c->scan('rl:{c_*');
    is(join(' ', sort map { /^rl:\{(c_\w+):[0-9a-f]{32}\}:(\w+)$/ ? "$1:$2" : $_ } @keys),
        join(' ', sort map { "c_$_:$_" } @algos), 'one state key per zone, named after its algorithm');
}

# 3. Three limits on three different primaries: exactly the smallest admitted, and a request
# rejected by one limit consumes from none.
sub find_multi_key {
    # A probe host with the same zones under another prefix (outside the hash tag, so the same
    # slots) tells which client key puts the three states on three different primaries.
    my $probe = start_nginx(<<"EOF2", workers => 1);
    ratelimit_redis rc cluster $seeds timeout=${timeout_ms}ms prefix=probe:;
$multi_zones
    server {
        listen 127.0.0.1:%%PORT%%;
        location /multi { ratelimit zone=ma; ratelimit zone=mb; ratelimit zone=mc; empty_gif; }
    }
EOF2
    my $owners = $c->slot_owners;
    my $found;
    for my $i (1 .. 40) {
        my $k = "multi$i";
        $probe->get("/multi?k=$k");
        my @keys = $c->scan('probe:*');
        $c->cli($_->[1], 'DEL', $_->[0]) for @keys;
        next unless @keys == 3;
        my %ports = map { $owners->[ $c->keyslot($_->[0]) ]->port => 1 } @keys;
        if (keys %ports == 3) { $found = $k; last }
    }
    $probe->stop;
    return $found;
}
{
    my $k = find_multi_key();
    ok(defined $k, 'found a client key whose three states live on three primaries') or $k = 'multi1';
    avoid_window_edge(3600, 15);
    my $r = run_clients([$n1->port, $n2->port], "/multi?k=$k", 12, 20, keepalive => 0);
    my %codes = map { $_ => $r->{$_} } grep { !/^:/ } keys %$r;
    is($codes{200} // 0, 20, 'multi: exactly 20 (the smallest limit) of 240 admitted');
    is($codes{429} // 0, 220, 'multi: the other 220 rejected');
    is(join(',', sort keys %codes), '200,429', 'multi: no other status') or diag(explain \%codes);

    my @keys = $c->scan('rl:{m[abc]:*');
    is(scalar @keys, 3, 'multi: three state keys') or diag(explain [map { $_->[0] } @keys]);
    my %owner = map { $c->owner($c->keyslot($_->[0]))->port => 1 } @keys;
    is(scalar keys %owner, 3, 'multi: CLUSTER KEYSLOT puts them on three different primaries');

    my $remaining = sub {
        my (undef, $h) = $n2->get("/peek?k=$k");
        my %r = map { $_->{name} => $_->{r} } parse_sf_list($h->{ratelimit});
        return join ' ', map { $r{$_} // '-' } qw(ma mb mc);
    };
    # The refunds of the last rejected requests land: awaited (3 s at most), then they must stay.
    is(settle_value($remaining, '10 0 20'), '10 0 20', 'multi: the 220 rejected requests consumed nothing from the other two limits');
    my @s = map { ($n1->get("/multi?k=$k"))[0] } 1 .. 5;
    is("@s", '429 429 429 429 429', 'multi: rejected once one limit is exhausted');
    is(settle_value($remaining, '10 0 20'), '10 0 20', 'multi: ... and still nothing consumed from the others');
}

# 4. Hostile keys: each limited on its own state, no 5xx, the layout intact.
{
    my $bin = join '', map { chr } grep { $_ != 10 && $_ != 13 } 1 .. 255;  # NUL, CR, LF: nginx answers 400 itself
    my @hkeys = ('{a}', '}{', '{}', '{', '}', '{{a}}', '{a}x', '{b}x', 'x{a}', 'x{b}', '{a}{b}', '{b}{b}',
        'H' x 8192, ('H' x 8191) . 'I', $bin, scalar reverse($bin), "\x80", "\xff", 'rl:{hh:x}:gcra');
    my %desc;
    for my $k (@hkeys) {
        my $d = length $k > 20 ? length($k) . ' bytes ' . unpack('H8', $k) . '..' . unpack('H8', substr $k, -4) : $k;
        $d =~ s/([^\x20-\x7e])/sprintf '\\x%02x', ord $1/ge;
        $desc{$k} = $d;
    }
    for my $k (@hkeys) {
        my @r = map { [$n1->get('/hh', { 'X-K' => $k })] } 1 .. 4;
        is(join(' ', map { ($_->[0] // 'ERR') . ' ' . ($_->[1]{'x-status'} // '') } @r),
            '200 PASSED 200 PASSED 200 PASSED 429 REJECTED', "header key $desc{$k}: 3 admitted, then rejected");
    }
    my @escaped = map { sprintf '%%%02X', $_ } grep { $_ != 0x2e && $_ != 0x2f } 1 .. 255;  # no . or / (path)
    my @ukeys = ('/hu/' . join('', @escaped), '/hu/' . join('', reverse @escaped), '/hu/%7Ba%7D', '/hu/%7Bb%7D',
        '/hu/%7B%7D', '/hu/%7D%7B', '/hu/%FF', '/hu/%FE');
    for my $u (@ukeys) {
        my @r = map { [$n2->get($u)] } 1 .. 4;
        is(join(' ', map { ($_->[0] // 'ERR') . ' ' . ($_->[1]{'x-status'} // '') } @r),
            '200 PASSED 200 PASSED 200 PASSED 429 REJECTED', 'binary $uri key ' . substr($u, 0, 40) . ': 3 admitted, then rejected');
    }
    # Still rejected afterwards: each state was kept, none overwritten by another key.
    my @again = map { ($n2->get('/hh', { 'X-K' => $_ }))[0] // 'ERR' } @hkeys;
    is("@again", join(' ', ('429') x @hkeys), 'every header key is still exhausted: no two keys shared or reset a state');
    @again = map { ($n1->get($_))[0] // 'ERR' } @ukeys;
    is("@again", join(' ', ('429') x @ukeys), 'every $uri key is still exhausted');

    my @hstate = $c->scan('rl:{hh:*');
    is(scalar @hstate, scalar @hkeys, 'one state key per hostile header key');
    my @ustate = $c->scan('rl:{hu:*');
    is(scalar @ustate, scalar @ukeys, 'one state key per hostile $uri key');
    my @all = map { $_->[0] } $c->scan('*');
    my @bad = grep { !/$layout/ } @all;
    is(scalar @bad, 0, 'every key in the cluster is <prefix>{<zone>:<32 hex>}:<algo>')
      or diag(explain [map { substr $_, 0, 80 } @bad[0 .. ($#bad < 4 ? $#bad : 4)]]);
    # The slot comes from the zone and the hash: keys like {a}x and x{a} do not share one.
    my %slots;
    $slots{ $c->keyslot($_->[0]) }++ for @hstate;
    ok(keys %slots >= @hstate - 2, 'hostile keys do not pick their slot: ' . scalar(keys %slots) . ' slots for ' . scalar(@hstate) . ' keys');
}

# No worker crashed, nothing alarming in the logs of the two hosts.
for my $n ($n1, $n2) {
    is(join(' ', $n->worker_pids), join(' ', @{ $workers{$n} }), 'the same workers run: none crashed');
    unlike($n->error_log, qr/exited on signal|\[alert\]|\[emerg\]/, 'no crash, alert or emerg in the log');
    my @bad = grep { /\[(error|crit)\]/ && !/limiting request/ } split /\n/, $n->error_log;
    is(scalar @bad, 0, 'no errors in the log') or diag(join "\n", @bad[0 .. ($#bad < 9 ? $#bad : 9)]);
}

# 5. The mode is checked by the workers, on each connection: the master never waits on
# Redis, so nginx -t and a start pass; the mismatch is logged with the directive's place and
# ratelimit_on_error applies.
{
    my $solo = start_redis();
    my $cases = [
        ['"cluster" pointed at a standalone server', 'ratelimit_redis store cluster ' . $solo->addr . ' timeout=100ms;',
         qr/ratelimit_redis "store" is configured as a cluster, but \S+ is a standalone Redis[^\n]* in \S+nginx\.conf:(\d+)/],
        ['a standalone ratelimit_redis pointed at a cluster node', 'ratelimit_redis store ' . $prim[1]->addr . ' timeout=100ms;',
         qr/ratelimit_redis "store" is configured as a standalone server, but \S+ is a Redis Cluster node: add "cluster" in \S+nginx\.conf:(\d+)/],
    ];
    for my $case (@$cases) {
        my ($name, $directive, $re) = @$case;
        my $conf = <<"EOF2";
    $directive
    ratelimit_zone z key=\$arg_k requests=5 period=1h redis=store;
    server {
        listen 127.0.0.1:%%PORT%%;
        add_header X-Status \$ratelimit_status always;
        location / { ratelimit_on_error deny; ratelimit zone=z; empty_gif; }
    }
EOF2
        my ($rc, $out) = nginx_t($conf);
        is($rc, 0, "$name: nginx -t passes (it does not talk to Redis)") or diag($out);
        my $n = eval { start_nginx($conf) };
        ok($n, "$name: nginx starts") or diag($@);
        next unless $n;
        my @r = map { my ($st, $h) = $n->get("/?k=m$_"); "$st " . ($h->{'x-status'} // '') } 1 .. 3;
        is("@r", join(' ', ('503 ERROR') x 3), "$name: on_error applies");
        my $at = $n->wait_log($re, 3);  # the line number the message names
        ok(defined $at, "$name: the workers log the mismatch") or diag($n->error_log);
        is($at, conf_line_of($n->conf_file, 'ratelimit_redis store'), "$name: the message names the directive's line");
        $n->stop;
    }

    my $dead = free_port();
    my $conf = <<"EOF2";
    ratelimit_redis gone  cluster 127.0.0.1:$dead timeout=100ms;
    ratelimit_redis mixed cluster 127.0.0.1:$dead ${\ $prim[2]->addr} timeout=100ms;
    ratelimit_zone zg key=\$arg_k requests=5 period=1h redis=gone;
    ratelimit_zone zm key=\$arg_k requests=5 period=1h redis=mixed;
    server {
        listen 127.0.0.1:%%PORT%%;
        add_header X-Status \$ratelimit_status always;
        location /allow { ratelimit_on_error allow; ratelimit zone=zg; empty_gif; }
        location /deny  { ratelimit_on_error deny;  ratelimit zone=zg; empty_gif; }
        location /mixed { ratelimit_on_error deny;  ratelimit zone=zm; empty_gif; }
    }
EOF2
    my ($rc, $out) = nginx_t($conf);
    is($rc, 0, 'unreachable cluster: nginx -t passes') or diag($out);
    my $n = eval { start_nginx($conf) };
    ok($n, 'unreachable cluster: nginx starts') or diag($@);
    SKIP: {
        skip 'nginx did not start', 7 unless $n;
        for my $case (['/allow', '200 ERROR'], ['/deny', '503 ERROR']) {
            my $t0 = time;
            my ($s, $h) = $n->get("$case->[0]?k=u");
            my $ms = int((time - $t0) * 1000);
            is(($s // 'ERR') . ' ' . ($h->{'x-status'} // ''), $case->[1], "unreachable cluster, $case->[0]: on_error applies");
            ok($ms < 100 + $margin_ms, "... answered in ${ms}ms");
        }
        # One dead seed and one live one: the live one is enough to find the cluster.
        my $t0 = time;
        my $x = '';
        while (time - $t0 < 3) {
            (undef, my $h) = $n->get('/mixed?k=m' . int(rand 1e9));
            $x = $h->{'x-status'} // '';
            last if $x eq 'PASSED';
            sleep 0.05;
        }
        is($x, 'PASSED', sprintf('a dead seed before a live one: the cluster is found (%.2fs)', time - $t0));

        # The cluster appears where the unreachable seed pointed: found within about a second
        # (the seeds are retried with the periodic refresh; 2s with the slack of this machine).
        my $c2 = start_redis_cluster(primaries => 3, ports => [$dead]);
        my $ok_at = time;
        $x = '';
        while (time - $ok_at < 5) {
            (undef, my $h) = $n->get('/deny?k=late' . int(rand 1e9));
            $x = $h->{'x-status'} // '';
            last if $x eq 'PASSED';
            sleep 0.02;
        }
        my $took = time - $ok_at;
        ok($x eq 'PASSED' && $took < 2.0, sprintf('the cluster came up after nginx: limiting starts %.2fs later (%s)', $took, $x));
        ok(scalar($c2->scan('rl:{zg:*')) >= 1, '... its state is in the new cluster');
        $n->stop;
        $c2->stop;
    }
}

diag(sprintf 'took %.1fs', time - $t_start);
done_testing;
