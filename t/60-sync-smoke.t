# sync=TIME on one host (issue 10): decisions in shared memory, reconciled with Redis each
# interval. The other host is a per-request Redis zone of the same name in a second nginx: it
# reads and writes the very state the sync zone reconciles with (one format, one key).
# runs alone: it measures time (rounds over a span)
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use RLTest;
use Test::More;
use Time::HiRes qw(sleep time);

avoid_window_edge(3600, 30);  # the fixed windows of an hour are not crossed
my $redis = start_redis();
my $rp = $redis->port;

sub http {
    my ($mode, $sync) = @_;
    $sync //= '100ms';
    return <<"EOF";
    ratelimit_redis r 127.0.0.1:$rp timeout=200ms;
    ratelimit_zone o key=\$arg_k requests=5 period=1h burst=4 redis=r sync=$sync;
    ratelimit_zone l key=\$arg_k requests=5 period=1h burst=4 redis=r sync=$sync sync_mode=lease;
    ratelimit_zone w key=\$arg_k requests=5 period=1h algo=fixed redis=r sync=$sync;
    ratelimit_zone lw key=\$arg_k requests=5 period=1h algo=fixed redis=r sync=$sync sync_mode=lease;
    server {
        listen 127.0.0.1:%%PORT%%;
        add_header X-Status \$ratelimit_status always;
        add_header X-Who \$pid always;
        location /o { ratelimit zone=o; empty_gif; }
        location /l { ratelimit zone=l; empty_gif; }
        location /w { ratelimit zone=w; empty_gif; }
        location /lw { ratelimit zone=lw; empty_gif; }
        location /o0 { ratelimit zone=o quantity=0; empty_gif; }
        location /metrics { ratelimit_metrics; }
    }
EOF
}

# The other host: the same zones, a Redis round trip per request.
my $other = start_nginx(<<"EOF");
    ratelimit_redis r 127.0.0.1:$rp timeout=500ms;
    ratelimit_zone o key=\$arg_k requests=5 period=1h burst=4 redis=r;
    ratelimit_zone l key=\$arg_k requests=5 period=1h burst=4 redis=r;
    ratelimit_zone w key=\$arg_k requests=5 period=1h algo=fixed redis=r;
    ratelimit_zone lw key=\$arg_k requests=5 period=1h algo=fixed redis=r;
    server {
        listen 127.0.0.1:%%PORT%%;
        add_header X-Status \$ratelimit_status always;
        location /o { ratelimit zone=o quantity=0; empty_gif; }
        location /l { ratelimit zone=l quantity=0; empty_gif; }
        location /w { ratelimit zone=w quantity=0; empty_gif; }
        location /lw { ratelimit zone=lw quantity=0; empty_gif; }
        location /oc { ratelimit zone=o; empty_gif; }
    }
EOF

# Units left of a key in Redis, as the per-request zone sees them.
sub global_left {
    my ($loc, $k) = @_;
    my ($s, $h) = $other->get("/$loc?k=$k");
    my ($item) = parse_sf_list($h->{ratelimit});
    return $item ? $item->{r} : '-';
}

sub wait_global {
    my ($loc, $k, $want) = @_;
    my $deadline = time + 3;
    while (time < $deadline) {
        return 1 if global_left($loc, $k) eq $want;
        sleep 0.05;
    }
    diag("$loc $k: $want left expected, Redis says " . global_left($loc, $k));
    return 0;
}

my $n = start_nginx(http('optimistic'));

# Waits (3 s at most) until this host's view of key $k of zone o has $want units left.
sub view_left {
    my ($k, $want) = @_;
    return settle_value(sub {
        my (undef, $h) = $n->get("/o0?k=$k");
        my ($item) = parse_sf_list($h->{ratelimit});
        return $item ? $item->{r} : '-';
    }, $want, after => 0);
}

# Optimistic: every request decided at once in shared memory; the deltas reach Redis.
for my $loc (qw(o w)) {
    my $k = fresh_key($loc);
    my @codes = map { ($n->get("/$loc?k=$k"))[0] } 1 .. 7;
    is(join(',', @codes), '200,200,200,200,200,429,429', "$loc: 5 admitted, then rejected, decided locally");
    ok(wait_global($loc, $k, 0), "$loc: the 5 admissions reached Redis within the interval");
}

# What another host consumes comes into this host's view at the next sync of the key.
{
    my $k = fresh_key('o');
    is(join(',', map { ($other->get("/oc?k=$k"))[0] } 1 .. 3), '200,200,200', 'the other host spends 3');
    is(($n->get("/o?k=$k"))[0], 200, 'optimistic: this host admits on its own view at once');
    # the key's sync brings the other host's 3 into the view: 1 left there (awaited, 3 s at most)
    view_left($k, 1);
    my @codes = map { ($n->get("/o?k=$k"))[0] } 1 .. 3;
    is(join(',', @codes), '200,429,429', 'optimistic: after a sync, 5 in all across both hosts');
}

# Lease: the host admits only what Redis granted; the first request waits for one grant.
# A window's grant is worth its units all through the window: exactly the limit. A bucket's
# units drain with the global level: the top unit of a grant on an empty bucket is part gone
# a microsecond later, and never spent (at most the limit, one less here).
for my $c (['lw', 5, 5], ['l', 4, 5]) {
    my ($loc, $least, $most) = @$c;
    my $k = fresh_key($loc);
    my @res = map { [$n->get("/$loc?k=$k")] } 1 .. 7;
    my $admitted = grep { $_->[0] == 200 } @res;
    ok($admitted >= $least && $admitted <= $most, "lease $loc: $admitted admitted, from $least to $most");
    is(join(',', map { $_->[0] } @res), join(',', (200) x $admitted, (429) x (7 - $admitted)), "lease $loc: then rejected");
    is(join(',', map { $_->[1]{'x-status'} // '' } @res), join(',', ('PASSED') x $admitted, ('REJECTED') x (7 - $admitted)),
       "lease $loc: \$ratelimit_status PASSED, then REJECTED");
    is(global_left($loc, $k), 0, "lease $loc: the granted units are consumed in Redis at once");
    my ($s, $h) = $n->get("/$loc?k=$k");
    ok(($h->{'retry-after'} // 0) > 0, "lease $loc: a rejection says when to retry");
}

# Metrics: rounds (one per interval per host), keys sent, hosts seen.
{
    my (undef, undef, $body) = $n->get('/metrics');
    my %m = $body =~ /^(nginx_ratelimit_sync_\w+\{zone="o"\}) (\d+)$/mg;
    ok(($m{'nginx_ratelimit_sync_rounds_total{zone="o"}'} // 0) > 0, 'metrics: rounds counted');
    ok(($m{'nginx_ratelimit_sync_keys_total{zone="o"}'} // 0) >= 2, 'metrics: keys sent counted') or diag($body);
    is($m{'nginx_ratelimit_sync_hosts{zone="o"}'}, 1, 'metrics: one host seen') or diag($body);

    # One round per interval per host, not per worker (2 workers here): over a measured span,
    # at most span / 100ms + 2 rounds.
    my $rounds = sub {
        my (undef, undef, $b) = $n->get('/metrics');
        return $b =~ /^nginx_ratelimit_sync_rounds_total\{zone="o"\} (\d+)$/m ? $1 : 0;
    };
    my ($t0, $r0) = (time, $rounds->());
    sleep 1.5;
    my ($t1, $r1) = (time, $rounds->());
    my $most = int(($t1 - $t0) / 0.1) + 2;
    ok($r1 - $r0 <= $most && $r1 - $r0 >= 5, "rounds: " . ($r1 - $r0) . " in " . sprintf('%.2f', $t1 - $t0) . "s (at most $most)");
}

# Redis down: optimistic keeps deciding locally, says ERROR; what it admitted meanwhile is
# added once Redis is back (Redis restarts empty here: no persistence).
{
    my $k = fresh_key('o');
    is(($n->get("/o?k=$k"))[0], 200, 'one admitted before Redis goes');
    ok(wait_global('o', $k, 4), 'and synced');
    $redis->kill_now('KILL');
    # a round fails meanwhile: the view says so (awaited, 3 s at most)
    settle_value(sub { ($n->get("/o0?k=$k"))[1]{'x-status'} // '' }, 'ERROR', after => 0);
    my @res = map { [$n->get("/o?k=$k")] } 1 .. 5;
    is(join(',', map { $_->[0] } @res), '200,200,200,200,429', 'Redis down: the whole limit enforced locally');
    is($res[0][1]{'x-status'}, 'ERROR', 'Redis down: $ratelimit_status ERROR while the last sync failed');
    $redis->restart;
    ok(wait_global('o', $k, 1), 'Redis back: the 4 admitted while it was away are added');
    my $deadline = time + 2;
    my $st = '';
    while (time < $deadline) {
        $st = ($n->get("/o0?k=$k"))[1]{'x-status'} // '';
        last if $st eq 'PASSED';
        sleep 0.05;
    }
    is($st, 'PASSED', 'Redis back: $ratelimit_status PASSED again after a sync');
}

# Reload: the view and the unsent deltas stay in shared memory; the new workers carry on.
# A graceful stop sends what is unsent before the workers exit.
{
    $n->stop;
    my $n2 = start_nginx(http('optimistic', '1s'));
    my $k = fresh_key('o');
    is(join(',', map { ($n2->get("/o?k=$k"))[0] } 1 .. 3), '200,200,200', '3 admitted');
    $n2->reload;
    is(join(',', map { ($n2->get("/o?k=$k"))[0] } 1 .. 3), '200,200,429', 'reload: the view survives (2 more, then rejected)');
    ok(wait_global('o', $k, 0), 'reload: all 5 reach Redis');

    my $k2 = fresh_key('o');
    is(join(',', map { ($n2->get("/o?k=$k2"))[0] } 1 .. 3), '200,200,200', '3 admitted');
    $n2->stop;  # well before the next sync (1s)
    is(global_left('o', $k2), 2, 'graceful stop: the 3 admissions were sent before the workers exited');
}

# A reload cannot add or remove sync= on a zone that keeps its name and size: its table would
# move within the memory the running workers use. The reload is refused, saying why, and the
# running configuration keeps serving.
for my $dir (['', ' sync=1s', 'adding'], [' sync=1s', '', 'removing']) {
    my $conf = sub {
        return "    ratelimit_redis r 127.0.0.1:$rp timeout=200ms;\n"
          . "    ratelimit_zone x key=\$arg_k requests=5 period=1h burst=4 redis=r$_[0];\n"
          . "    server { listen 127.0.0.1:%%PORT%%; location /x { ratelimit zone=x; empty_gif; } }\n";
    };
    my $n3 = start_nginx($conf->($dir->[0]));
    my $k = fresh_key('x');
    is(($n3->get("/x?k=$k"))[0], 200, "$dir->[2] sync=: the zone serves");
    my $err = eval { $n3->reload($conf->($dir->[1])); '' } // $@;
    like($err, qr/ratelimit zone "x": "sync" cannot be added or removed by a reload/, "$dir->[2] sync= by a reload: refused, saying why");
    is(($n3->get("/x?k=$k"))[0], 200, "... the running configuration keeps serving");
    $n3->stop;
}

# Lease: a stop gives back what the host holds. A key asked once is cold: its request is
# granted what it costs and nothing more (t/65-sync-lease-cold.t); a second within the interval
# makes it hot: its ask takes a lease ahead.
{
    my $n3 = start_nginx(http('lease', '1s'));
    my $k = fresh_key('lw');
    is(($n3->get("/lw?k=$k"))[0], 200, 'lease: one admitted');
    ok(wait_global('lw', $k, 4), 'lease: a cold key is granted the one unit its request costs');
    is(($n3->get("/lw?k=$k"))[0], 200, 'lease: a second within the interval admitted');
    # hot: two intervals at its rate (1 so far) asked, its need spent at the grant: 1 unit held
    ok(wait_global('lw', $k, 2), 'lease: a hot key\'s ask takes a unit ahead (1 unit held)');
    $n3->stop;
    is(global_left('lw', $k), 3, 'lease: the stop gave the unspent unit back (2 admitted in all)');
}

# Lease: a request that stops waiting (its timeout passed before the grant came) is decided on
# the fallback, which Redis counts at the next sync; the grant asked for it stays this host's
# lease and is given back when idle: Redis counts the request once.
{
    my $p = start_proxy(upstream => $redis);
    my $pp = $p->port;
    (my $conf = http('lease')) =~ s/127\.0\.0\.1:$rp /127.0.0.1:$pp /;
    my $n4 = start_nginx($conf);
    my $k = fresh_key('lw');
    $p->mode('drip', 6);  # the grant arrives after the request's 200ms, within the connection's 1s
    my ($s4, $h4) = $n4->get("/lw?k=$k");
    is("$s4 " . ($h4->{'x-status'} // ''), '200 ERROR', 'lease, grant late: admitted on the fallback');
    $p->mode('pass');
    ok(wait_global('lw', $k, 4), 'lease, grant late: Redis counts the request once');
    $n4->stop;
}

done_testing;
