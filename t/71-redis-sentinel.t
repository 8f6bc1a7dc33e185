# Redis Sentinel (ratelimit_redis NAME sentinel=MASTER SENTINEL ...): limits decided on the master
# the Sentinels name, exact; AUTH towards the Sentinels (sentinel_password) and the master
# (password), secrets never logged; a graceful failover (SENTINEL FAILOVER: the old master
# turns replica and says READONLY) and the master killed under load from two nginx instances
# of two workers each: only 200/429 and on_error's answers meanwhile, limiting resumes on the
# new master within about a second of the Sentinels naming it; misconfigurations logged
# clearly (a Sentinel used as a Redis, a Redis used as a Sentinel, a master name the Sentinels
# do not know), every Sentinel unreachable: on_error applies, nothing hangs.
# Sentinels and master over TLS: t/73-redis-sentinel-tls.t.
# runs alone: it measures time (failovers)
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use RLTest;
use RLTest::SentinelChecks qw(alternate exact_on_master kill_master_under_load);
use Test::More;
use Time::HiRes qw(time sleep);

my $timeout_ms = 100;
my $margin_ms  = 400;    # scheduling slack: 2 nginx x 2 workers, 5 redis processes, clients, 2 cores
my $t_start    = time;
my $MPW = 'm4ster-s3cret';
my $SPW = 'sent1nel-s3cret';
my @SECRETS = ($MPW, $SPW, 'wrong-m4ster-pw', 'wrong-sent1nel-pw');

# A: a master, a replica, three Sentinels, passwords on both. B: one Sentinel without a password
# watching a lone master (for the misconfigurations). P: a plain Redis.
my $s = start_sentinel_set(master_name => 'mymaster', replicas => 1, sentinels => 3,
    password => $MPW, sentinel_password => $SPW);
my $b = start_sentinel_set(master_name => 'other', replicas => 0, sentinels => 1, quorum => 1);
my $plain = start_redis();
my $addrs = $s->sentinel_addrs;
my ($bsent) = $b->sentinels;
diag(sprintf 'Sentinels ready in %.1fs', time - $t_start);

# The Sentinels really ask for their password, the servers for theirs.
{
    my ($sent1) = $s->sentinels;
    like(`redis-cli -h 127.0.0.1 -p ${\ $sent1->port} SENTINEL masters 2>&1`, qr/NOAUTH/, 'the Sentinels of A require a password');
    like(`redis-cli -h 127.0.0.1 -p ${\ $s->master->port } GET x 2>&1`, qr/NOAUTH/, 'the master of A requires a password');
}

my $http = <<"EOF2";
    ratelimit_redis main  sentinel=mymaster $addrs password=$MPW sentinel_password=$SPW timeout=${timeout_ms}ms;
    ratelimit_redis badsp sentinel=mymaster $addrs password=$MPW sentinel_password=wrong-sent1nel-pw timeout=${timeout_ms}ms;
    ratelimit_redis badmp sentinel=mymaster $addrs password=wrong-m4ster-pw sentinel_password=$SPW timeout=${timeout_ms}ms;
    ratelimit_zone z    key=\$arg_k requests=5 period=1h burst=4 redis=main;
    ratelimit_zone ex   key=\$arg_k requests=5 period=1h burst=4 redis=main;
    ratelimit_zone load key=\$arg_k requests=1000000 period=1h burst=999999 redis=main;
    ratelimit_zone zsp  key=\$arg_k requests=5 period=1h redis=badsp;
    ratelimit_zone zmp  key=\$arg_k requests=5 period=1h redis=badmp;
    server {
        listen 127.0.0.1:%%PORT%%;
        add_header X-Status \$ratelimit_status always;
        add_header X-Who \$pid always;
        add_header X-Rec "\$uri \$ratelimit_status \$status" always;
        location /a         { ratelimit zone=z; empty_gif; }
        location /a_deny    { ratelimit_on_error deny; ratelimit zone=z; empty_gif; }
        location /peek      { ratelimit_on_error deny; ratelimit zone=z quantity=0; empty_gif; }
        location /ex        { ratelimit zone=ex; empty_gif; }
        location /load      { ratelimit zone=load; empty_gif; }
        location /load_deny { ratelimit_on_error deny; ratelimit zone=load; empty_gif; }
        location /badsp     { ratelimit_on_error deny; ratelimit zone=zsp; empty_gif; }
        location /badmp     { ratelimit_on_error deny; ratelimit zone=zmp; empty_gif; }
    }
EOF2

{
    my ($rc, $out) = nginx_t($http);
    is($rc, 0, 'nginx -t accepts sentinel=, sentinel_password=') or diag($out);
}
my $n1 = start_nginx($http);
my $n2 = start_nginx($http);
my @workers = ($n1->worker_pids, $n2->worker_pids);

# Every worker of both instances decides on the master (AUTH to the Sentinels and the master).
ok(defined $n1->wait_decided(sub { '/load?k=' . fresh_key('w') }, 10), 'instance 1: every worker decides through the Sentinels');
ok(defined $n2->wait_decided(sub { '/load?k=' . fresh_key('w') }, 10), 'instance 2: every worker decides through the Sentinels');

# Exact decisions, shared by the two instances; the key lives on the master.
exact_on_master($s, $n1, $n2, 'Sentinel');

# AUTH: a wrong sentinel_password, a wrong master password: on_error applies, the reason is
# logged, no secret ever is.
for my $case (['/badsp', 'badsp'], ['/badmp', 'badmp']) {
    my ($path, $name) = @$case;
    my @r = map { join ' ', ($n1->timed("$path?k=" . fresh_key()))[0, 1] } 1 .. 3;
    is("@r", join(' ', ('503 ERROR') x 3), "$name: on_error deny applies");
    ok($n1->wait_log(qr/ratelimit redis "$name".*(?:WRONGPASS|invalid|NOAUTH|AUTH|password)/i, 3), "$name: the reason is logged");
}

# 1. A graceful failover (SENTINEL FAILOVER). Sentinel itself turns the old master into a
# replica only some 10 s later; the harness does it at once (demote), so that a worker still
# writing to it gets READONLY. The workers follow the Sentinels to the new master.
{
    my $old = $s->master_addr;
    my ($sent1) = $s->sentinels;
    my ($ok, $v) = $sent1->cmd('SENTINEL', 'FAILOVER', 'mymaster');
    is($ok && $v, 'OK', 'SENTINEL FAILOVER accepted');
    my ($new, $t_first, $t_all) = $s->wait_switch($old, 15);
    ok(defined $t_all, sprintf('graceful failover: every Sentinel names %s', $new // '-'));
    $t_all //= time;
    ok($s->demote($old), 'graceful failover: the old master made a replica of the new one');
    my ($oldr) = grep { $_->addr eq $old } $s->servers;
    like($oldr->cli('ROLE'), qr/^slave/, '... it says so');
    my @seen;
    my ($resumed, $i) = (undef, 0);
    while (time - $t_all < 5) {
        my $nn = $i++ % 2 ? $n2 : $n1;
        my ($st, $x) = $nn->timed('/a_deny?k=' . fresh_key('gf'));
        push @seen, "$st $x";
        if ($x eq 'PASSED') { $resumed = time; last }
        sleep 0.02;
    }
    ok(defined $resumed && $resumed - $t_all < 1.5,
        sprintf('graceful failover: limiting resumed %.2fs after the Sentinels named the new master', defined $resumed ? $resumed - $t_all : 99));
    my @odd = grep { !/^(200 PASSED|503 ERROR)$/ } @seen;
    is("@odd", '', 'graceful failover: only PASSED or on_error meanwhile');
    ok(defined $n1->wait_decided(sub { '/load?k=' . fresh_key('w') }, 3), 'graceful failover: every worker of instance 1 decides again');
    ok(defined $n2->wait_decided(sub { '/load?k=' . fresh_key('w') }, 3), 'graceful failover: every worker of instance 2 decides again');
    ok($s->wait_ready(10), 'the Sentinels see the old master as a replica of the new one') or diag($s->{why});
    my $newr = $s->master;
    is($newr && $newr->addr, $new, 'the new master is the one the Sentinels named');
    my $before = () = $newr->keys_matching('rl:{ex:*');
    my $k = fresh_key('ex');
    is(alternate($n1, $n2, "/ex?k=$k", 6), '200 200 200 200 200 429', 'graceful failover: exact, shared by both instances');
    my $after = () = $newr->keys_matching('rl:{ex:*');
    is($after - $before, 1, 'graceful failover: the new key is on the new master');
}

# 2. The master killed under load from both instances (2 workers each): only 200/429 and
# on_error's answers (allow: 200; deny: 503), none slower than the timeout allows; limiting
# resumes on the new master within about a second of the Sentinels naming it.
kill_master_under_load($s, $n1, $n2, timeout_ms => $timeout_ms, margin_ms => $margin_ms, seconds => 7,
    what => 'the Sentinels');

# 3. Misconfigurations: each logged clearly (with the file and line of ratelimit_redis where
# the spec says so), on_error applies, quickly. A refused connection is logged as "connect
# failed" (even when the refusal shows first at a read).
my $free1 = free_port();
my $free2 = free_port();
my $bad = start_nginx(<<"EOF3", workers => 1);
    ratelimit_redis issent   127.0.0.1:${\ $bsent->port} timeout=${timeout_ms}ms;   # ISSENT
    ratelimit_redis notsent  sentinel=mymaster ${\ $plain->addr} timeout=${timeout_ms}ms;   # NOTSENT
    ratelimit_redis nomaster sentinel=nosuchmaster ${\ $bsent->addr} timeout=${timeout_ms}ms;
    ratelimit_redis unreach  sentinel=mymaster 127.0.0.1:$free1 127.0.0.1:$free2 timeout=${timeout_ms}ms;
    ratelimit_redis good     sentinel=other ${\ $bsent->addr} timeout=${timeout_ms}ms;
    ratelimit_zone zi key=\$arg_k requests=5 period=1h redis=issent;
    ratelimit_zone zn key=\$arg_k requests=5 period=1h redis=notsent;
    ratelimit_zone zm key=\$arg_k requests=5 period=1h redis=nomaster;
    ratelimit_zone zu key=\$arg_k requests=5 period=1h redis=unreach;
    ratelimit_zone zg key=\$arg_k requests=2 period=1h burst=1 redis=good;
    server {
        listen 127.0.0.1:%%PORT%%;
        ratelimit_on_error deny;
        add_header X-Status \$ratelimit_status always;
        location /issent       { ratelimit zone=zi; empty_gif; }
        location /notsent      { ratelimit zone=zn; empty_gif; }
        location /nomaster     { ratelimit zone=zm; empty_gif; }
        location /unreach      { ratelimit zone=zu; empty_gif; }
        location /unreach_allow { ratelimit_on_error allow; ratelimit zone=zu; empty_gif; }
        location /good         { ratelimit zone=zg; empty_gif; }
    }
EOF3
{
    my $file = $bad->conf_file;
    my $l_is  = conf_line_of($file, '# ISSENT');
    my $l_not = conf_line_of($file, '# NOTSENT');
    my $bp = $bsent->port;
    # poll each path while waiting for its log line (the worker may only try when asked)
    my $poll_log = sub {
        my ($path, $re) = @_;
        my $deadline = time + 4;
        my (@r, $slowest);
        $slowest = 0;
        while (time < $deadline) {
            my ($st, $x, $ms) = $bad->timed("$path?k=" . fresh_key('m'));
            push @r, "$st $x";
            $slowest = $ms if $ms > $slowest;
            return (\@r, $slowest, 1) if $bad->error_log =~ $re;
            sleep 0.05;
        }
        return (\@r, $slowest, 0);
    };
    # The worker learns the master from the Sentinel first (on_error deny answers 503 until then).
    my $learnt = 0;
    for (1 .. 100) {
        last if ($learnt = ($bad->timed('/good?k=' . fresh_key('l')))[0] == 200);
        sleep 0.05;
    }
    ok($learnt, 'a Sentinel without passwords: the master is learnt');
    my $k = fresh_key('g');
    is(join(' ', map { ($bad->timed("/good?k=$k"))[0] } 1 .. 3), '200 200 429', 'a Sentinel without passwords: limits apply');

    my ($r, $slowest, $logged) = $poll_log->('/issent', qr/"issent".* 127\.0\.0\.1:$bp\b.*is a Sentinel: use "sentinel=[^"]+".* in \Q$file\E:$l_is\b/);
    ok($logged, 'a Sentinel configured as a Redis: "is a Sentinel: use "sentinel=..." ... in FILE:LINE"')
      or diag(join "\n", grep { /issent/ } split /\n/, $bad->error_log);
    is(join(',', grep { $_ ne '503 ERROR' } @$r), '', '... on_error deny applies');
    ok($slowest < $timeout_ms + $margin_ms, "... slowest ${slowest}ms");

    ($r, $slowest, $logged) = $poll_log->('/notsent', qr/"notsent".* 127\.0\.0\.1:${\ $plain->port }\b.*is not a Sentinel.*\Q$file\E:$l_not\b/);
    ok($logged, 'sentinel= naming a plain Redis: "is not a Sentinel" with FILE:LINE')
      or diag(join "\n", grep { /notsent/ } split /\n/, $bad->error_log);
    is(join(',', grep { $_ ne '503 ERROR' } @$r), '', '... on_error deny applies');
    ok($slowest < $timeout_ms + $margin_ms, "... slowest ${slowest}ms");

    ($r, $slowest, $logged) = $poll_log->('/nomaster', qr/sentinel at 127\.0\.0\.1:$bp knows no master "nosuchmaster"/);
    ok($logged, 'a master name the Sentinel does not know: "knows no master"')
      or diag(join "\n", grep { /nomaster/ } split /\n/, $bad->error_log);
    is(join(',', grep { $_ ne '503 ERROR' } @$r), '', '... on_error deny applies');

    ($r, $slowest, $logged) = $poll_log->('/unreach', qr/ratelimit redis "unreach": sentinel at 127\.0\.0\.1:$free1: connect failed.*Connection refused/);
    ok($logged, "every Sentinel unreachable: the first one's connect error is logged");
    my ($r2, $slowest2, $logged2) = $poll_log->('/unreach', qr/ratelimit redis "unreach": sentinel at 127\.0\.0\.1:$free2: connect failed.*Connection refused/);
    ok($logged2, "... and the second one's")
      or diag(join "\n", grep { /unreach/ } split /\n/, $bad->error_log);
    is(join(',', grep { $_ ne '503 ERROR' } @$r, @$r2), '', '... on_error deny applies');
    ok(($slowest > $slowest2 ? $slowest : $slowest2) < $timeout_ms + $margin_ms, '... nothing hangs (slowest ' . ($slowest > $slowest2 ? $slowest : $slowest2) . 'ms)');
    my @allow = map { join ' ', ($bad->timed('/unreach_allow?k=' . fresh_key('u')))[0, 1] } 1 .. 3;
    is("@allow", join(' ', ('200 ERROR') x 3), '... on_error allow lets requests through');
}

# No secret in any log; no worker crashed.
for my $nn ($n1, $n2, $bad) {
    my $log = $nn->error_log;
    my @leaks = grep { index($log, $_) >= 0 } @SECRETS;
    is("@leaks", '', 'no password or sentinel_password in ' . $nn->error_log_file);
}
is(join(' ', $n1->worker_pids, $n2->worker_pids), join(' ', @workers), 'the same workers run: none crashed');
for my $nn ($n1, $n2, $bad) {
    unlike($nn->error_log, qr/exited on signal|\[alert\]|\[emerg\]/, 'no crash, alert or emerg in ' . $nn->error_log_file);
}

diag(sprintf 'took %.1fs', time - $t_start);
done_testing;
