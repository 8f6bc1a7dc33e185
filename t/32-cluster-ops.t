# Redis Cluster, operations: a password-protected cluster reached through one replica as the
# only seed and with an ACL user, a custom prefix, the slot map refreshed periodically (no
# MOVED after a quiet migration), a large reshard with redis-cli under load, a primary stalled
# past the timeout (only its keys get on_error, late answers refunded), and a reload.
# runs alone: it loads the machine and measures time (a reshard under load, map refreshes)
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use RLTest;
use Test::More;
use Time::HiRes qw(time sleep);

my $timeout_ms = 100;
my $margin_ms  = 250;    # scheduling slack of a loaded 2-core test machine
my $t_start    = time;

my $c = start_redis_cluster(primaries => 3, replicas => 1, password => 's3cret-pw');
my @prim = $c->primaries;
is(scalar @prim, 3, 'three primaries');
my ($seed_replica) = $c->replicas_of($prim[2]);
ok($seed_replica, 'a replica to use as the only seed');
my @acl = $c->cli_all('ACL', 'SETUSER', 'limiter', 'on', '>limiter-pw', '~*', '+@all');
is(join(' ', @acl), join(' ', ('OK') x 6), 'ACL user on every node');
my $seeds = $c->seeds;

my $http = <<"EOF2";
    ratelimit_redis rc  cluster ${\ $seed_replica->addr} password=s3cret-pw prefix=t32: timeout=${timeout_ms}ms;
    ratelimit_redis acl cluster $seeds username=limiter password=limiter-pw timeout=${timeout_ms}ms;
    ratelimit_zone warm key=\$arg_k requests=1000000 period=1h burst=999999 redis=rc;
    ratelimit_zone ua   key=\$arg_k requests=3 period=1h burst=2 redis=acl;
    ratelimit_zone pr   key=\$arg_k requests=100 period=1d burst=99 redis=rc;
    ratelimit_zone rs   key=\$arg_k requests=400 period=1d burst=399 redis=rc;
    ratelimit_zone st   key=\$arg_k requests=1000000 period=1d burst=999999 redis=rc;
    ratelimit_zone lt   key=\$arg_k requests=5 period=1d burst=4 redis=rc;
    server {
        listen 127.0.0.1:%%PORT%% reuseport;
        ratelimit_on_error deny;
        add_header X-Status \$ratelimit_status always;
        add_header X-Who \$pid always;
        add_header X-Rec "\$uri \$arg_k \$ratelimit_status \$status" always;
        location /warm     { ratelimit zone=warm; empty_gif; }
        location /ua       { ratelimit zone=ua; empty_gif; }
        location /pr       { ratelimit zone=pr; empty_gif; }
        location /rs       { ratelimit zone=rs; empty_gif; }
        location /rs_peek  { ratelimit zone=rs quantity=0; empty_gif; }
        location /st       { ratelimit zone=st; empty_gif; }
        location /st_allow { ratelimit_on_error allow; ratelimit zone=st; empty_gif; }
        location /st_peek  { ratelimit zone=st quantity=0; empty_gif; }
        location /lt       { ratelimit zone=lt; empty_gif; }
        location /lt_peek  { ratelimit zone=lt quantity=0; empty_gif; }
    }
EOF2
my $n = start_nginx($http);
my @workers = $n->worker_pids;

ok(defined $n->wait_decided('/warm?k=ready'), 'both workers decide in the cluster, found through a replica');


# 1. Password, replica seed, prefix, ACL user.
{
    my @s = map { join ' ', map { $_ // 'ERR' } ($n->get('/pr?k=auth'))[0] } 1 .. 3;
    is("@s", '200 200 200', 'password cluster, seeded by a replica: requests decided');
    my @keys = $c->scan('t32:{pr:*');
    is(scalar @keys, 1, 'the state key is on a primary');
    like($keys[0] ? $keys[0][0] : '', qr/^t32:\{pr:[0-9a-f]{32}\}:gcra$/, 'prefix t32: then the hash tag');
    my @u = map { my ($st, $h) = $n->get('/ua?k=u'); ($st // 'ERR') . ' ' . ($h->{'x-status'} // '') } 1 .. 4;
    is("@u", '200 PASSED 200 PASSED 200 PASSED 429 REJECTED', 'ACL user: limits apply');
    my @ukeys = $c->scan('rl:{ua:*');
    is(scalar @ukeys, 1, 'ACL user: default prefix rl:');
}

# 2. The slot map is refreshed periodically: after a migration nobody asked about, requests go
# straight to the new owner (no MOVED), and the map is not queried in a loop either.
{
    my $l = $c->learn($n, '/pr', 't32:{pr:', 'quiet');
    ok($l->{quiet}, 'periodic refresh: state key found');
    my $slot = $l->{quiet} ? $l->{quiet}{slot} : 0;
    my $src = $c->owner($slot);
    my ($dst) = grep { $_->port != $src->port } @prim;
    $c->migrate_slot($slot, $dst);
    sleep 2.0;    # the map is refreshed about every second
    my ($moved_before) = $c->redirections($src);
    my (%who, @st);
    for (1 .. 20) {
        my ($s, $h) = $n->get('/pr?k=quiet');
        push @st, ($s // 'ERR') . ' ' . ($h->{'x-status'} // '');
        $who{ $h->{'x-who'} // '' } = 1;
    }
    my ($moved_after) = $c->redirections($src);
    is(scalar keys %who, 2, 'periodic refresh: both workers served');
    is("@st", join(' ', ('200 PASSED') x 20), 'periodic refresh: requests decided');
    is($moved_after - $moved_before, 0, '2s after a quiet migration, no request was sent to the old owner (no MOVED)');
    is($c->countkeysinslot($dst, $slot), 1, 'periodic refresh: the state is on the new owner');

    my $queries = sub {
        my $sum = 0;
        for my $node ($c->live_nodes) {
            my $cs = $c->cli($node, 'INFO', 'commandstats');
            $sum += $1 while $cs =~ /cmdstat_cluster\|(?:slots|shards|nodes):calls=(\d+)/g;
        }
        return $sum;
    };
    # Over 3s of steady traffic: each worker refreshes (at least 2 queries in all), and not per
    # request: at most one query a second per worker per node.
    my $q0 = $queries->();
    my $t0 = time;
    my $sent = 0;
    while (time - $t0 < 3) { $n->get('/pr?k=light' . ($sent % 50)); $sent++ }
    my $q = $queries->() - $q0;
    my $max = 2 * 6 * int(time - $t0 + 1);
    ok($q >= 2 && $q <= $max, "periodic refresh: $q slot map queries from 2 workers in 3s and $sent requests (2 to $max)");
}

# 3. redis-cli --cluster reshard of 500 slots under load: exact limits, no error.
{
    my $A = $prim[0];
    my $B = $prim[1];
    my @first = (sort { $a <=> $b } $c->slots_of($A))[0 .. 499];    # what redis-cli moves
    my %moving = map { $_ => 1 } @first;
    my $l = $c->learn($n, '/rs', 't32:{rs:', map { "rs$_" } 1 .. 300);
    my @in  = (grep { $moving{ $l->{$_}{slot} } } sort keys %$l)[0 .. 3];
    my @out = (grep { !$moving{ $l->{$_}{slot} } } sort keys %$l)[0 .. 1];
    @in = grep { defined } @in;
    @out = grep { defined } @out;
    ok(@in >= 1, 'reshard: ' . scalar(@in) . ' hammered keys in the slots that move');
    my @ks = (@in, @out);
    my ($moved_before) = $c->redirections($A);
    my (%pre, %post, @moved, $took);
    my $r = run_clients($n->port, sub { sleep 0.006; "/rs?k=$ks[$_[0]]" }, scalar @ks, 600, keepalive => 1,
        until => time + 30, record => 'X-Rec',
        during => sub {
            my $t0 = time;
            $n->wait_consumed("/rs_peek?k=$ks[0]", 350);
            %pre = map { $_ => $n->remaining("/rs_peek?k=$_") } @in;
            my $t1 = time;
            @moved = $c->reshard($A, $B, 500);
            $took = time - $t1;
            %post = map { $_ => $n->remaining("/rs_peek?k=$_") } @in;
        });
    diag(sprintf 'reshard: 500 slots moved in %.2fs under load', $took // -1);
    my ($moved_after) = $c->redirections($A);
    is(scalar @moved, 500, 'reshard: 500 slots changed owner');
    is(codes($r), '200,429', 'reshard: only 200 and 429') or diag(explain $r);
    my $t = tally($r);
    my @errors = grep { $t->{$_}{ERROR} } keys %$t;
    is("@errors", '', 'reshard: no request got on_error');
    ok($r->{':max_ms'} < $timeout_ms + $margin_ms, "reshard: slowest request $r->{':max_ms'}ms");
    ok($moved_after > $moved_before, 'reshard: the module was redirected (' . ($moved_after - $moved_before) . ' MOVED) and followed');
    for my $k (@ks) {
        is($t->{"/rs $k"}{PASSED} // 0, 399, "reshard: $k: exactly 399 admitted (400 minus the first)");
    }
    for my $k (@in) {
        my ($bef, $aft) = ($pre{$k} // "-", $post{$k} // "-");
        # On a slow run (sanitizers) the reshard may outlast the key's quota: then it was still
        # consumed from when the reshard began, which is what this checks.
        ok($bef =~ /^\d+$/ && $aft =~ /^\d+$/ && $bef < 399 && $aft < $bef, "reshard: $k was being consumed while its slot moved ($bef before, $aft after)");
        is($c->owner($l->{$k}{slot})->port, $B->port, "reshard: $k now lives on " . $B->port);
    }
}

# 4. A primary stalled past the timeout (DEBUG SLEEP) under load: only its keys get on_error,
# within the timeout; the others are unaffected; it decides again right after.
{
    my $P = $prim[2];
    my $l = $c->learn($n, '/st', 't32:{st:', map { "st$_" } 1 .. 30);
    my ($on)  = grep { $l->{$_}{node}->port == $P->port } sort keys %$l;
    my ($off) = grep { $l->{$_}{node}->port != $P->port } sort keys %$l;
    ok($on && $off, 'stall: one key on the stalled primary, one elsewhere');
    $on //= 'none'; $off //= 'none';
    my @paths = ("/st?k=$on", "/st_allow?k=$on", "/st?k=$off", "/st_allow?k=$off");
    my ($woke, $resumed);
    my $r = run_clients($n->port, sub { sleep 0.004; $paths[ $_[0] ] }, 4, 1000000, keepalive => 1,
        until => time + 2.2, record => 'X-Rec',
        during => sub {
            sleep 0.5;
            $c->cli($P, 'DEBUG', 'SLEEP', '0.6');    # shorter than the cluster node timeout: no failover
            $woke = time;
            while (time - $woke < 3) {
                my (undef, $h) = $n->get("/st_peek?k=$on");
                if (($h->{'x-status'} // '') eq 'PASSED') { $resumed = time; last }
                sleep 0.02;
            }
        });
    my $t = tally($r);
    my $vals = $r->{':values'};
    my @other = grep { !/^(200|429|503)$/ } split /,/, codes($r);
    is("@other", '', 'stall: only 200, 429 and deny\'s 503') or diag(explain $r);
    my @bad503 = grep { / 503$/ && !m{^/st \S+ ERROR 503$} } keys %$vals;
    is("@bad503", '', 'stall: every 503 is on_error deny');
    ok($r->{':max_ms'} < $timeout_ms + $margin_ms, "stall: slowest request $r->{':max_ms'}ms");
    ok(($t->{"/st $on"}{ERROR} // 0) > 0 && ($t->{"/st_allow $on"}{ERROR} // 0) > 0, 'stall: the stalled primary\'s key got on_error');
    is(($t->{"/st $off"}{ERROR} // 0) + ($t->{"/st_allow $off"}{ERROR} // 0), 0, 'stall: the key on another primary never did');
    ok(($t->{"/st $off"}{PASSED} // 0) > 0, 'stall: ... and kept being decided');
    ok(defined $resumed && $resumed - $woke < 1.0, sprintf('stall: limiting resumes %.2fs after the primary woke', defined $resumed ? $resumed - $woke : 99));
    is($c->owner($l->{$on} ? $l->{$on}{slot} : 0)->port, $P->port, 'stall: no failover happened (the test stalled, not killed)');

    # A request denied because its primary stalled must not keep what Redis consumes for it late.
    my $l2 = $c->learn($n, '/lt', 't32:{lt:', map { "lt$_" } 1 .. 30);
    my ($k) = grep { $l2->{$_}{node}->port == $P->port } sort keys %$l2;
    $k //= 'none';
    my @s = map { ($n->get("/lt?k=$k"))[0] // 'ERR' } 1 .. 1;
    is("@s", '200', 'late admission: 2 of 5 used (one when learning the key)');
    my $pid = fork // die;
    if (!$pid) { $c->cli($P, 'DEBUG', 'SLEEP', '0.6'); POSIX::_exit(0) }
    $P->wait_asleep;    # the requests below must arrive while it sleeps, however late the fork ran
    @s = map { my ($st, $h) = $n->get("/lt?k=$k"); ($st // 'ERR') . ' ' . ($h->{'x-status'} // '') } 1 .. 3;
    is("@s", '503 ERROR 503 ERROR 503 ERROR', 'late admission: three denied while the primary sleeps');
    waitpid $pid, 0;
    # the late replies come in and the units go back: awaited, then they must stay
    is($n->settle_remaining("/lt_peek?k=$k", 3), 3, 'late admission: the primary admitted them late, and gave the units back');
}

# 5. Reload: new workers find the cluster again; the state lives on in Redis.
{
    my @before = map { ($n->get('/ua?k=u'))[0] // 'ERR' } 1 .. 2;
    is("@before", '429 429', 'reload: the ACL user key is exhausted before');
    $n->reload;
    my @new = $n->worker_pids;
    ok(!grep({ my $w = $_; grep { $_ == $w } @workers } @new), 'reload: new workers');
    my $ready = $n->wait_decided('/warm?k=ready');
    ok(defined $ready && $ready < 2, sprintf('reload: both new workers decide in the cluster within %.2fs', $ready // 99));
    my @after = map { ($n->get('/ua?k=u'))[0] // 'ERR' } 1 .. 2;
    is("@after", '429 429', 'reload: and the key is still exhausted');
    @workers = @new;
}

is(join(' ', $n->worker_pids), join(' ', @workers), 'the same workers run: none crashed');
unlike($n->error_log, qr/exited on signal|\[alert\]|\[emerg\]/, 'no crash, alert or emerg in the log');
unlike($n->error_log, qr/s3cret-pw|limiter-pw/, 'passwords never appear in the log');

diag(sprintf 'took %.1fs', time - $t_start);
done_testing;
