# Redis Cluster under change, with clients hammering: a slot migrated (MOVED), a migration left
# half-done (ASK), a manual failover, a primary killed and replaced by its replica. Requests
# keep their verdicts within the timeout, the limits stay exact where the state survives, on_error
# applies only to the slots of a dead primary, limiting resumes by itself, no worker crashes.
# runs alone: it loads the machine and times faults (migrations, failovers under load)
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use RLTest;
use Test::More;
use Time::HiRes qw(time sleep);

my $timeout_ms    = 100;
my $mf_timeout_ms = 250;  # manual failover: the primary holds its clients until the replica took over (~50ms here)
my $margin_ms     = 250;  # scheduling slack of a loaded 2-core test machine
my $t_start       = time;

my $c     = start_redis_cluster(primaries => 3, replicas => 1);
my @prim  = $c->primaries;
my $seeds = $c->seeds;
is(scalar @prim, 3, 'three primaries');
is(join(' ', map { scalar $c->replicas_of($_) } @prim), '1 1 1', 'one replica each');

my $n = start_nginx(<<"EOF2");
    ratelimit_redis rc cluster $seeds timeout=${timeout_ms}ms;
    ratelimit_redis rf cluster $seeds timeout=${mf_timeout_ms}ms;
    ratelimit_zone warm key=\$arg_k requests=1000000 period=1h burst=999999 redis=rc;
    ratelimit_zone mv   key=\$arg_k requests=300 period=1d burst=299 redis=rc;
    ratelimit_zone ak   key=\$arg_k requests=40 period=1d redis=rc;
    ratelimit_zone fa   key=\$arg_k requests=300 period=1d burst=299 redis=rf;
    ratelimit_zone fb   key=\$arg_k requests=1000000 period=1d burst=999999 redis=rc;
    server {
        listen 127.0.0.1:%%PORT%% reuseport;
        ratelimit_on_error deny;
        add_header X-Status \$ratelimit_status always;
        add_header X-Who \$pid always;
        add_header X-Rec "\$uri \$arg_k \$ratelimit_status \$status" always;
        location /warm      { ratelimit zone=warm; empty_gif; }
        location /mv        { ratelimit zone=mv; empty_gif; }
        location /mv_peek   { ratelimit zone=mv quantity=0; empty_gif; }
        location /ask_gcra  { ratelimit_algo gcra;  ratelimit zone=ak burst=39; empty_gif; }
        location /ask_token { ratelimit_algo token; ratelimit zone=ak burst=39; empty_gif; }
        location /ask_fixed { ratelimit_algo fixed; ratelimit zone=ak; empty_gif; }
        location /ask_log   { ratelimit_algo log;   ratelimit zone=ak; empty_gif; }
        location /fa        { ratelimit zone=fa; empty_gif; }
        location /fa_peek   { ratelimit zone=fa quantity=0; empty_gif; }
        location /fb_deny   { ratelimit zone=fb; empty_gif; }
        location /fb_allow  { ratelimit_on_error allow; ratelimit zone=fb; empty_gif; }
        location /fb_peek   { ratelimit zone=fb quantity=0; empty_gif; }
    }
EOF2
my @workers = $n->worker_pids;

ok(defined $n->wait_decided('/warm?k=ready'), 'both workers decide in the cluster');

# 1. MOVED: the slots of four live keys migrate to other primaries while they are hammered.
{
    my @ks = map { "mv$_" } 0 .. 3;
    my $l = $c->learn($n, '/mv', 'rl:{mv:', @ks);
    is(scalar keys %$l, 4, 'MOVED: the state key of each of the four client keys found');
    my %slots;    # slot -> [source, target]
    for my $k (grep { $l->{$_} } @ks) {
        my $src = $l->{$k}{node};
        my ($dst) = grep { $_->port != $src->port } @prim;
        $slots{ $l->{$k}{slot} } //= [$src, $dst];
    }
    my (%pre, %post);
    my $moved_before = 0;
    $moved_before += ($c->redirections($_))[0] for @prim;
    my $r = run_clients($n->port, sub { sleep 0.003; "/mv?k=mv$_[0]" }, 4, 500, keepalive => 1,
        until => time + 20, record => 'X-Rec',
        during => sub {
            my $t0 = time;
            $n->wait_consumed('/mv_peek?k=mv0', 250);
            my $t1 = time;
            for my $slot (sort { $a <=> $b } keys %slots) {
                my @in = grep { $l->{$_} && $l->{$_}{slot} == $slot } @ks;
                $pre{$_} = $n->remaining("/mv_peek?k=$_") for @in;
                $c->migrate_slot($slot, $slots{$slot}[1]);
                $post{$_} = $n->remaining("/mv_peek?k=$_") for @in;
            }
            diag(sprintf 'MOVED: 50 consumed after %.2fs, slots migrated in %.2fs', $t1 - $t0, time - $t1);
        });
    my $t = tally($r);
    is(codes($r), '200,429', 'MOVED: only 200 and 429 while the slots move') or diag(explain $r);
    my @errors = grep { $t->{$_}{ERROR} } keys %$t;
    is("@errors", '', 'MOVED: no request got on_error');
    ok($r->{':max_ms'} < $timeout_ms + $margin_ms, "MOVED: slowest request $r->{':max_ms'}ms");
    for my $k (@ks) {
        my ($bef, $aft) = ($pre{$k} // "-", $post{$k} // "-");
        ok($bef =~ /^\d+$/ && $aft =~ /^\d+$/ && $bef < 299 && $aft > 0,
            "MOVED: $k was being consumed when its slot moved ($bef left before, $aft after, of 299)");
    }
    for my $k (@ks) {
        my $s = $t->{"/mv $k"} || {};
        is($s->{PASSED} // 0, 299, "MOVED: $k: exactly 299 admitted (300 minus the first), across the migration");
        ok(($s->{REJECTED} // 0) > 0, "MOVED: $k: the rest rejected (" . ($s->{REJECTED} // 0) . ')');
    }
    for my $slot (sort keys %slots) {
        my ($src, $dst) = @{ $slots{$slot} };
        is($c->owner($slot)->port, $dst->port, "MOVED: slot $slot now on " . $dst->port);
        is($c->countkeysinslot($dst, $slot) . ' ' . $c->countkeysinslot($src, $slot), '1 0', "MOVED: its state key moved with it");
    }
    my $moved_after = 0;
    $moved_after += ($c->redirections($_))[0] for @prim;
    ok($moved_after > $moved_before, 'MOVED: the module was redirected (' . ($moved_after - $moved_before) . ' MOVED) and followed');
    my @after = map { my ($s, $h) = $n->get("/mv?k=$_"); ($s // 'ERR') . ' ' . ($h->{'x-status'} // '') } @ks;
    is("@after", join(' ', ('429 REJECTED') x 4), 'MOVED: after the migration the keys are still exhausted');
}

# 2. ASK: a slot left half-migrated; its keys on the target and on the source both decide.
{
    avoid_window_edge(86400, 20);    # the fixed window of a day must not end during the test
    my $k = 'ask1';
    my @warm;
    for my $a (qw(gcra fixed log)) { push @warm, map { ($n->get("/ask_$a?k=$k"))[0] // 'ERR' } 1 .. 5 }
    is("@warm", join(' ', ('200') x 15), 'ASK: five admitted on each of gcra, fixed, log');
    my @keys = map { $_->[0] } $c->scan("rl:{ak:*");
    is(scalar @keys, 3, 'ASK: three state keys (one per algorithm)');
    my %slot = map { $c->keyslot($_) => 1 } @keys;
    is(scalar keys %slot, 1, 'ASK: one hash tag, so one slot for all the algorithms of a key');
    my ($slot) = keys %slot;
    my $src = $c->owner($slot);
    my ($dst) = grep { $_->port != $src->port } @prim;
    my ($gcra_key) = grep { /:gcra$/ } @keys;
    $c->begin_migration($slot, $dst, $gcra_key);
    is($c->countkeysinslot($src, $slot) . ' ' . $c->countkeysinslot($dst, $slot), '2 1',
        'ASK: the gcra state moved, fixed and log still on the source');

    my @algo = qw(gcra token fixed log);
    my (undef, $ask_before) = $c->redirections($src);
    my $r = run_clients($n->port, sub { sleep 0.002; "/ask_$algo[$_[0]]?k=$k" }, 4, 80, keepalive => 1,
        until => time + 10, record => 'X-Rec');
    my $t = tally($r);
    is(codes($r), '200,429', 'ASK: only 200 and 429') or diag(explain $r);
    my @errors = grep { $t->{$_}{ERROR} } keys %$t;
    is("@errors", '', 'ASK: no request got on_error');
    ok($r->{':max_ms'} < $timeout_ms + $margin_ms, "ASK: slowest request $r->{':max_ms'}ms");
    my %want = (gcra => 35, token => 40, fixed => 35, log => 35);
    for my $a (@algo) {
        is($t->{"/ask_$a $k"}{PASSED} // 0, $want{$a}, "ASK: $a: exactly $want{$a} more admitted");
    }
    my (undef, $ask_after) = $c->redirections($src);
    ok($ask_after > $ask_before, 'ASK: the source redirected the module (' . ($ask_after - $ask_before) . ' ASK) and it followed');
    # (CLUSTER NODES shows a migrating slot on the source's own line only: ask the source)
    my ($me) = grep { $_->{port} == $src->port } $c->view($src);
    ok(exists $me->{migrating}{$slot}, 'ASK: the slot is still migrating (the module did not change that)');
    is($c->countkeysinslot($src, $slot) . ' ' . $c->countkeysinslot($dst, $slot), '2 2',
        'ASK: the new token state was created on the target, fixed and log stayed on the source');

    $c->finish_migration($slot);
    my @after = map { my ($s, $h) = $n->get("/ask_$_?k=$k"); ($s // 'ERR') . ' ' . ($h->{'x-status'} // '') } @algo;
    is("@after", join(' ', ('429 REJECTED') x 4), 'ASK: migration finished, every state intact and exhausted');
}

# 3a. CLUSTER FAILOVER on a replica while its primary's keys are hammered: nothing lost.
{
    my $P0 = $prim[0];
    my ($R0) = $c->replicas_of($P0);
    my $l = $c->learn($n, '/fa', 'rl:{fa:', map { "fa$_" } 1 .. 30);
    my @ks = grep { defined } (grep { $l->{$_}{node}->port == $P0->port } sort keys %$l)[0, 1];
    is(scalar @ks, 2, 'manual failover: two client keys on the primary');
    push @ks, 'none' while @ks < 2;
    my (%pre, %post);
    my $r = run_clients($n->port, sub { sleep 0.003; "/fa?k=$ks[$_[0] % 2]" }, 4, 300, keepalive => 1,
        until => time + 20, record => 'X-Rec',
        during => sub {
            my $t0 = time;
            $n->wait_consumed("/fa_peek?k=$ks[0]", 250);
            my $t1 = time;
            %pre = map { $_ => $n->remaining("/fa_peek?k=$_") } @ks;
            $c->manual_failover($R0);
            %post = map { $_ => $n->remaining("/fa_peek?k=$_") } @ks;
            diag(sprintf 'manual failover: 50 consumed after %.2fs, failover took %.2fs', $t1 - $t0, time - $t1);
        });
    my $t = tally($r);
    is($c->owner($l->{ $ks[0] }{slot})->port, $R0->port, 'manual failover: the replica now serves the slots');
    is(codes($r), '200,429', 'manual failover: only 200 and 429') or diag(explain $r);
    my @errors = grep { $t->{$_}{ERROR} } keys %$t;
    is("@errors", '', 'manual failover: no request got on_error');
    ok($r->{':max_ms'} < $mf_timeout_ms + $margin_ms, "manual failover: slowest request $r->{':max_ms'}ms");
    for my $k (@ks) {
        my ($bef, $aft) = ($pre{$k} // "-", $post{$k} // "-");
        ok($bef =~ /^\d+$/ && $aft =~ /^\d+$/ && $bef < 299 && $aft > 0,
            "manual failover: $k was being consumed at the switch ($bef left before, $aft after, of 299)");
    }
    for my $k (@ks) {
        is($t->{"/fa $k"}{PASSED} // 0, 299, "manual failover: $k: exactly 299 admitted across the switch");
    }
}

# 3b. kill -9 of a primary under load: its keys get on_error within the timeout, the others are
# unaffected; once its replica is promoted, limiting resumes by itself.
{
    my $P1 = $prim[1];
    my ($R1) = $c->replicas_of($P1);
    my $l = $c->learn($n, '/fb_deny', 'rl:{fb:', map { "fb$_" } 1 .. 30);
    my @dead = grep { defined } (grep { $l->{$_}{node}->port == $P1->port } sort keys %$l)[0, 1];
    my @live = grep { defined } (grep { $l->{$_}{node}->port != $P1->port } sort keys %$l)[0, 1];
    is(scalar(@dead) + scalar(@live), 4, 'kill: two client keys on the victim, two elsewhere');
    push @dead, 'none' while @dead < 2;
    push @live, 'none' while @live < 2;
    my @paths = ("/fb_deny?k=$dead[0]", "/fb_allow?k=$dead[1]", "/fb_deny?k=$live[0]", "/fb_allow?k=$live[1]");
    my ($killed, $ok_at, $new, $resumed, $resume_x);
    my $r = run_clients($n->port, sub { sleep 0.004; $paths[ $_[0] ] }, 4, 1000000, keepalive => 1,
        until => time + 7, record => 'X-Rec',
        during => sub {
            sleep 0.8;
            $killed = $c->kill_primary($P1);
            ($ok_at, $new) = $c->wait_promoted($P1, 20);
            while (time - $ok_at < 5) {
                my ($s, $h) = $n->get("/fb_peek?k=$dead[0]");
                $resume_x = $h->{'x-status'} // '';
                if ($resume_x eq 'PASSED' || $resume_x eq 'REJECTED') { $resumed = time; last }
                sleep 0.02;
            }
        });
    diag(sprintf 'kill: promoted %.2fs after the kill', $ok_at - $killed);
    is($new->port, $R1->port, 'kill: the replica of the victim was promoted');
    my $vals = $r->{':values'};
    my $t = tally($r);
    my @other = grep { !/^(200|429|503)$/ } split /,/, codes($r);
    is("@other", '', 'kill: 200/429 and deny\'s 503, nothing else') or diag(explain $r);
    ok(($r->{503} // 0) > 0, 'kill: on_error deny answered 503 (' . ($r->{503} // 0) . ' times)');
    my @bad503 = grep { / 503$/ && !m{^/fb_deny \S+ ERROR 503$} } keys %$vals;
    is("@bad503", '', 'kill: every 503 is on_error deny');
    my @allow_err = grep { m{^/fb_allow \S+ ERROR (\d+)$} && $1 != 200 } keys %$vals;
    is("@allow_err", '', 'kill: on_error allow answers 200');
    ok($r->{':max_ms'} < $timeout_ms + $margin_ms, "kill: slowest request $r->{':max_ms'}ms (timeout ${timeout_ms}ms)");
    for my $k (@dead) {
        my $path = $k eq $dead[0] ? '/fb_deny' : '/fb_allow';
        my $errs = $t->{"$path $k"}{ERROR} // 0;
        ok($errs > 0, "kill: $k on the dead primary ($path): on_error applied ($errs times)");
        ok(($t->{"$path $k"}{PASSED} // 0) > 0, "kill: $k: decided in Redis otherwise");
    }
    for my $k (@live) {
        my $path = $k eq $live[0] ? '/fb_deny' : '/fb_allow';
        is($t->{"$path $k"}{ERROR} // 0, 0, "kill: $k on a live primary: never on_error");
        ok(($t->{"$path $k"}{PASSED} // 0) > 0, "kill: $k: kept being decided");
    }
    # The module refreshes its slot map about every second: 2s after the cluster is ok again
    # (refresh period + a round trip + the slack of a loaded machine) limiting must be back.
    ok(defined $resumed && $resumed - $ok_at < 2.0,
        sprintf('kill: limiting resumed %.2fs after cluster_state:ok (%s)', defined $resumed ? $resumed - $ok_at : 99, $resume_x // ''));

    my $r2 = run_clients($n->port, sub { $paths[ $_[0] ] }, 4, 1000000, keepalive => 1, until => time + 0.6, record => 'X-Rec');
    my $t2 = tally($r2);
    is(codes($r2), '200', 'kill: after the promotion, every key admitted again') or diag(explain $r2);
    my @errors = grep { $t2->{$_}{ERROR} } keys %$t2;
    is("@errors", '', 'kill: after the promotion, no on_error');
}

is(join(' ', $n->worker_pids), join(' ', @workers), 'the same workers run: none crashed');
unlike($n->error_log, qr/exited on signal|\[alert\]|\[emerg\]/, 'no crash, alert or emerg in the log');

diag(sprintf 'took %.1fs', time - $t_start);
done_testing;
