# Redis Sentinel over TLS (ratelimit_redis NAME sentinel=MASTER S1 S2 S3 ssl
# ssl_trusted_certificate=CA password= sentinel_password=): the Sentinels, the master and the
# replica TLS-only (replication and the Sentinels' own links over TLS too). (a) Two nginx
# instances of two workers each decide exactly, together, on the master the Sentinels name; the
# master killed under load: only 200/429 and on_error's answers meanwhile, limiting resumes on
# the new master within about a second of the Sentinels naming it; no secret in any log.
# (b) A Sentinel that names a replica as the master (a plain set; a lone Sentinel monitoring
# its replica): the module says "is a replica, not the master", on_error applies, nothing
# hangs, nothing is written to the replica. (c) The TLS Sentinels configured without "ssl":
# on_error applies and the log says why (a TLS port?).
# runs alone: it measures time (failovers)
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use RLTest;
use RLTest::SentinelChecks qw(alternate exact_on_master kill_master_under_load);
use Test::More;
use List::Util ();
use Time::HiRes qw(time sleep);

my $timeout_ms = 150;
my $connect_ms = 300;    # bounds the TCP connect and the TLS handshake
my $margin_ms  = 400;    # scheduling slack: 3 nginx, 7 redis processes, clients, TLS, 2 cores
my $t_start    = time;
my $MPW = 'tls-m4ster-s3cret';
my $SPW = 'tls-sent1nel-s3cret';
my @SECRETS = ($MPW, $SPW);

# A: a TLS master, a TLS replica, three TLS Sentinels, passwords on both. B: a plain master and
# replica watched by one Sentinel, plus a lone Sentinel that monitors B's replica as "other".
my $pki = RLTest::TLS->new;
my $CA  = $pki->ca;
my $s = start_sentinel_set(master_name => 'mymaster', replicas => 1, sentinels => 3,
    password => $MPW, sentinel_password => $SPW, tls => $pki->redis_tls);
my $addrs = $s->sentinel_addrs;
diag(sprintf 'TLS Sentinels ready in %.1fs', time - $t_start);
my $b = start_sentinel_set(master_name => 'plainm', replicas => 1, sentinels => 1, quorum => 1);
my ($brep) = $b->replicas;
my $other = $b->extra_sentinel(name => 'other', port => $brep->port);
diag(sprintf 'plain Sentinels ready at %.1fs', time - $t_start);

# The harness: everything of A is TLS-only, the Sentinels and the master ask for their passwords,
# the Sentinels talk TLS to each other and to the servers (they agree, see the replica); the
# lone Sentinel names B's replica, which says it is one.
{
    my ($sent1) = $s->sentinels;
    my ($rc, $out) = run_cmd(10, $RLTest::Redis::CLI, '-h', '127.0.0.1', '-p', $sent1->port, 'PING');
    unlike($out, qr/PONG/, 'harness: a Sentinel of A does not answer plain TCP');
    ($rc, $out) = run_cmd(10, $RLTest::Redis::CLI, '-h', '127.0.0.1', '-p', $s->master->port, 'PING');
    unlike($out, qr/PONG/, 'harness: the master of A does not answer plain TCP');
    my @tls = RLTest::Redis::cli_tls_args($s->tls);
    ($rc, $out) = run_cmd(10, $RLTest::Redis::CLI, '-h', '127.0.0.1', '-p', $sent1->port, @tls, 'SENTINEL', 'masters');
    like($out, qr/NOAUTH/, 'harness: the Sentinels of A require a password (over TLS)');
    ($rc, $out) = run_cmd(10, $RLTest::Redis::CLI, '-h', '127.0.0.1', '-p', $s->master->port, @tls, 'GET', 'x');
    like($out, qr/NOAUTH/, 'harness: the master of A requires a password (over TLS)');
    is(join(' ', $s->master_addrs), join(' ', ($s->master->addr) x 3), 'harness: every TLS Sentinel names the TLS master');
    my ($ok, $v) = $other->cmd('SENTINEL', 'GET-MASTER-ADDR-BY-NAME', 'other');
    is($ok && ref $v ? "$v->[0]:$v->[1]" : '-', $brep->addr, 'harness: the lone Sentinel names B\'s replica as master "other"');
    like($brep->cli('ROLE'), qr/^slave/, '... which says it is a replica');
}

my $ssl = "ssl ssl_trusted_certificate=$CA";
my $tmo = "timeout=${timeout_ms}ms connect_timeout=${connect_ms}ms";
my $http = <<"EOF2";
    ratelimit_redis main sentinel=mymaster $addrs $ssl password=$MPW sentinel_password=$SPW $tmo;
    ratelimit_zone ex   key=\$arg_k requests=5 period=1h burst=4 redis=main;
    ratelimit_zone conc key=\$arg_k requests=20 period=1h burst=19 redis=main;
    ratelimit_zone z    key=\$arg_k requests=5 period=1h burst=4 redis=main;
    ratelimit_zone load key=\$arg_k requests=1000000 period=1h burst=999999 redis=main;
    server {
        listen 127.0.0.1:%%PORT%%;
        add_header X-Status \$ratelimit_status always;
        add_header X-Who \$pid always;
        add_header X-Rec "\$uri \$ratelimit_status \$status" always;
        location /ex        { ratelimit zone=ex; empty_gif; }
        location /conc      { ratelimit zone=conc; empty_gif; }
        location /conc_peek { ratelimit_on_error deny; ratelimit zone=conc quantity=0; empty_gif; }
        location /a         { ratelimit zone=z; empty_gif; }
        location /load      { ratelimit zone=load; empty_gif; }
        location /load_deny { ratelimit_on_error deny; ratelimit zone=load; empty_gif; }
    }
EOF2

{
    my ($rc, $out) = nginx_t($http);
    is($rc, 0, 'nginx -t accepts sentinel= with ssl, password=, sentinel_password=') or diag($out);
}
my $n1 = start_nginx($http);
my $n2 = start_nginx($http);
my @workers = ($n1->worker_pids, $n2->worker_pids);

# (a) Every worker of both instances decides on the master, over TLS to the Sentinels and to it.
ok(defined $n1->wait_decided(sub { '/load?k=' . fresh_key('w') }, 10), 'instance 1: every worker decides through the TLS Sentinels');
ok(defined $n2->wait_decided(sub { '/load?k=' . fresh_key('w') }, 10), 'instance 2: every worker decides through the TLS Sentinels');


# Exact decisions shared by the two instances; the key on the master, replicated over TLS.
exact_on_master($s, $n1, $n2, 'Sentinel or TLS');
{
    my @on_replica;
    my $deadline = time + 3;    # replication is asynchronous
    while (time < $deadline) {
        @on_replica = map { $_->keys_matching('rl:{ex:*') } $s->replicas;
        last if @on_replica;
        sleep 0.05;
    }
    is(scalar @on_replica, 1, '... and replicated over TLS to the replica') or diag("@on_replica");
}

# Concurrent clients on both instances (4 workers), one key: exactly the limit admitted, and
# the state left in Redis says none is left, to both instances.
{
    my $k = fresh_key('conc');
    my $r = run_clients([$n1->port, $n2->port], "/conc?k=$k", 4, 15, keepalive => 1, record => 'X-Status');
    is(($r->{200} // 0) . ' ' . ($r->{429} // 0), '20 40', 'concurrent, both instances: exactly 20 of 60 admitted')
      or diag(explain $r);
    is(join(' ', sort keys %{ $r->{':values'} || {} }), 'PASSED REJECTED', '... every one decided in Redis');
    is($n1->remaining("/conc_peek?k=$k") . ' ' . $n2->remaining("/conc_peek?k=$k"), '0 0',
        '... and the state in Redis has nothing left, read by either instance');
}

# The master killed under load from both instances: only 200/429 and on_error's answers
# (allow: 200; deny: 503), none slower than the timeout allows; limiting resumes on the new
# master within about a second of the Sentinels naming it.
kill_master_under_load($s, $n1, $n2, timeout_ms => $timeout_ms, margin_ms => $margin_ms, seconds => 6,
    what => 'the TLS Sentinels');

# (b) and (c): one worker, on_error deny unless said otherwise.
my $bad = start_nginx(<<"EOF3", workers => 1);
    ratelimit_redis rep   sentinel=other ${\ $other->addr} $tmo;
    ratelimit_redis nossl sentinel=mymaster $addrs password=$MPW sentinel_password=$SPW $tmo;
    ratelimit_zone zr key=\$arg_k requests=5 period=1h redis=rep;
    ratelimit_zone zn key=\$arg_k requests=5 period=1h redis=nossl;
    server {
        listen 127.0.0.1:%%PORT%%;
        ratelimit_on_error deny;
        add_header X-Status \$ratelimit_status always;
        location /rep         { ratelimit zone=zr; empty_gif; }
        location /rep_allow   { ratelimit_on_error allow; ratelimit zone=zr; empty_gif; }
        location /nossl       { ratelimit zone=zn; empty_gif; }
        location /nossl_allow { ratelimit_on_error allow; ratelimit zone=zn; empty_gif; }
    }
EOF3
{
    # polls a path until its log line shows (the worker may only try when asked), for up to 4 s
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

    # (b) the master the Sentinel names says it is a replica.
    my $bp = $brep->port;
    my $conns = sub { ($brep->cli('INFO', 'stats') =~ /total_connections_received:(\d+)/)[0] // 0 };
    my ($r, $slowest, $logged) = $poll_log->('/rep', qr/ratelimit redis "rep" at 127\.0\.0\.1:$bp is a replica, not the master "other"/);
    ok($logged, 'a named master that says it is a replica: "is a replica, not the master"')
      or diag(join "\n", grep { /"rep"/ } split /\n/, $bad->error_log);
    is(join(',', grep { $_ ne '503 ERROR' } @$r), '', '... on_error deny applies (503)');
    ok($slowest < $timeout_ms + $margin_ms, "... nothing hangs (slowest ${slowest}ms)");
    # 1.5 s of requests: every one answered by on_error, the worker's connections to the
    # replica paced (it reconnects with a backoff, not per request).
    my ($c0, $t0) = ($conns->(), time);
    my %more;
    while (time - $t0 < 1.5) {
        my ($st, $x, $ms) = $bad->timed('/rep?k=' . fresh_key('r'));
        $more{"$st $x"}++;
        $slowest = $ms if $ms > $slowest;
        sleep 0.01;
    }
    my ($nconn, $secs) = ($conns->() - $c0, time - $t0);
    is(join(',', sort keys %more), '503 ERROR', sprintf('... and keeps applying (%d requests in %.1fs, slowest %dms)',
        List::Util::sum(values %more) // 0, $secs, $slowest));
    ok($nconn <= 2 + 5 * $secs, sprintf('... reconnections to the replica paced: %d in %.1fs', $nconn, $secs));
    my @allow = map { join ' ', ($bad->timed('/rep_allow?k=' . fresh_key('r')))[0, 1] } 1 .. 3;
    is("@allow", join(' ', ('200 ERROR') x 3), '... on_error allow lets requests through');
    is($brep->cli('DBSIZE'), '0', '... nothing written to the replica');
    is(scalar(() = $b->master->keys_matching('rl:*')), 0, '... nor to its master');
    like($brep->cli('ROLE'), qr/^slave/, '... which is still a replica');

    # (c) the TLS Sentinels without "ssl": the plain-text handshake hits a TLS port.
    my $sa = join '|', map { quotemeta $_->addr } $s->sentinels;
    ($r, $slowest, $logged) = $poll_log->('/nossl',
        qr/ratelimit redis "nossl": sentinel at (?:$sa): (?:read failed|connection closed by Redis) before any reply \(a TLS port\? then add "ssl"\)/);
    ok($logged, 'TLS Sentinels without "ssl": the log says "a TLS port? then add "ssl""')
      or diag(join "\n", grep { /"nossl"/ } split /\n/, $bad->error_log);
    is(join(',', grep { $_ ne '503 ERROR' } @$r), '', '... on_error deny applies (503)');
    ok($slowest < $timeout_ms + $margin_ms, "... nothing hangs (slowest ${slowest}ms)");
    @allow = map { join ' ', ($bad->timed('/nossl_allow?k=' . fresh_key('n')))[0, 1] } 1 .. 3;
    is("@allow", join(' ', ('200 ERROR') x 3), '... on_error allow lets requests through');
    unlike($bad->error_log, qr/"nossl".*master "mymaster" is at/, '... and no master is ever learnt');
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
