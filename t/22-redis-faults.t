# Redis faults: not running at start, killed under load, restarted, FUNCTION/SCRIPT FLUSH under load,
# stalled past the timeout, wrong password, wrong database. For each: no request waits
# longer than the timeout plus a small margin, each on_error mode behaves as documented, no
# worker crashes, no 5xx but deny's 503, and limiting resumes within a second of Redis being back.
# runs alone: it loads the machine and times faults (Redis killed, flushed, stalled under load)
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use RLTest;
use Test::More;
use Time::HiRes qw(time sleep);

my $timeout_ms = 100;
my $margin_ms  = 250;  # scheduling slack of a loaded 2-core test machine
my $rport = free_port();
my $redis;             # not started yet: nginx starts without Redis

my $n = start_nginx(<<"EOF2");
    ratelimit_redis r     127.0.0.1:$rport timeout=${timeout_ms}ms;
    ratelimit_redis wrong 127.0.0.1:$rport timeout=${timeout_ms}ms password=not-the-password;
    ratelimit_redis baddb 127.0.0.1:$rport timeout=${timeout_ms}ms database=99;
    ratelimit_zone z  key=\$arg_k requests=5 period=1h burst=4 redis=r size=1m;
    ratelimit_zone zw key=\$arg_k requests=5 period=1h redis=wrong;
    ratelimit_zone zd key=\$arg_k requests=5 period=1h redis=baddb;
    server {
        listen 127.0.0.1:%%PORT%%;
        add_header X-Status \$ratelimit_status always;
        location /allow { ratelimit_on_error allow; ratelimit zone=z; empty_gif; }
        location /deny  { ratelimit_on_error deny;  ratelimit zone=z; empty_gif; }
        location /peek  { ratelimit_on_error deny;  ratelimit zone=z quantity=0; empty_gif; }
        location /local { ratelimit_on_error local; ratelimit zone=z; empty_gif; }
        location /wrong { ratelimit_on_error deny;  ratelimit zone=zw; empty_gif; }
        location /baddb { ratelimit_on_error deny;  ratelimit zone=zd; empty_gif; }
    }
EOF2
my @workers = $n->worker_pids;

# 1. Redis not running when nginx starts.
{
    my $k = fresh_key();
    my ($s, $x, $ms) = $n->timed("/allow?k=$k");
    is("$s $x", '200 ERROR', 'no Redis, on_error allow: 200, $ratelimit_status ERROR');
    ok($ms < $timeout_ms + $margin_ms, "... answered in ${ms}ms");
    ($s, $x, $ms) = $n->timed("/deny?k=$k");
    is("$s $x", '503 ERROR', 'no Redis, on_error deny: 503');
    ok($ms < $timeout_ms + $margin_ms, "... answered in ${ms}ms");
    my @local = map { ($n->timed("/local?k=$k"))[0] } 1 .. 6;
    is("@local", '200 200 200 200 200 429', 'no Redis, on_error local: the zone\'s limit in shared memory');

    $redis = start_redis(port => $rport, args => ['--enable-debug-command', 'local']);
    my $t = $n->resumes_within("/allow?k=" . fresh_key());
    ok($t < 1.0, sprintf('Redis started: limiting resumes in %.2fs', $t));
    my @s = map { ($n->timed("/allow?k=$k"))[0] } 1 .. 6;
    is("@s", '200 200 200 200 200 429', 'Redis state is its own: the local decisions did not touch it');
}

# 2. Killed under load, then back. Each mode has keys of its own.
for my $mode (qw(allow deny local)) {
    my $killed_at;
    my $r = run_clients($n->port, sub { "/$mode?k=load${mode}_$_[0]_" . int($_[1] / 8) }, 4, 1000000, keepalive => 1,
        until => time + 2.5, record => 'X-Status',
        during => sub { sleep 0.8; $redis->kill_now('KILL'); $killed_at = time; });
    my %codes = map { $_ => $r->{$_} } grep { !/^:/ } keys %$r;
    my @bad = grep { !/^(200|429)$/ && !($mode eq 'deny' && $_ eq '503') } keys %codes;
    is("@bad", '', "killed under load ($mode): only 200, 429" . ($mode eq 'deny' ? ', 503' : '')) or diag(explain \%codes);
    ok($r->{':max_ms'} < $timeout_ms + $margin_ms, "killed under load ($mode): slowest request $r->{':max_ms'}ms");
    ok(($r->{':values'}{ERROR} // 0) > 0, "killed under load ($mode): on_error applied (ERROR seen)");
    ok(($r->{':values'}{PASSED} // 0) > 0, "killed under load ($mode): Redis decided before the kill");
    $redis = start_redis(port => $rport, args => ['--enable-debug-command', 'local']);
    my $t = $n->resumes_within("/$mode?k=" . fresh_key());
    ok($t < 1.0, sprintf("Redis back after a kill ($mode): limiting resumes in %.2fs", $t));
}

# 3. Restarted: its state is gone and its scripts too; the limit starts afresh, no errors.
{
    my $k = fresh_key();
    my @s = map { ($n->timed("/deny?k=$k"))[0] } 1 .. 6;
    is("@s", '200 200 200 200 200 429', 'before the restart: 5 admitted, then rejected');
    $redis->restart;
    my $t = $n->resumes_within("/deny?k=" . fresh_key());
    ok($t < 1.0, sprintf('restarted Redis: limiting resumes in %.2fs', $t));
    @s = map { join ' ', ($n->timed("/deny?k=$k"))[0, 1] } 1 .. 2;
    is("@s", '200 PASSED 200 PASSED', 'after the restart the key starts afresh (state was lost)');
}

# 4. FUNCTION FLUSH and SCRIPT FLUSH under load: the missing code is loaded again (FUNCTION
# LOAD, or SCRIPT LOAD on a server without Functions) without failing any request. Each round
# has keys of its own (5 an hour each): with shared keys the second round could admit only on
# keys the first had not reached, as many as the first left it, which depended on speed.
for my $flush (['FUNCTION', 'FLUSH'], ['SCRIPT', 'FLUSH']) {
    my $name = join ' ', @$flush;
    my $round = lc $flush->[0];
    my $r = run_clients($n->port, sub { "/deny?k=flush${round}_$_[0]_" . int($_[1] / 8) }, 4, 1000000, keepalive => 1,
        until => time + 2, record => 'X-Status',
        during => sub { for (1 .. 5) { sleep 0.25; $redis->cli(@$flush) } });
    my %codes = map { $_ => $r->{$_} } grep { !/^:/ } keys %$r;
    is(join(',', sort keys %codes), '200,429', "$name under load: only 200 and 429") or diag(explain \%codes);
    is($r->{':values'}{ERROR} // 0, 0, "$name under load: no request saw an error");
    ok($r->{200} > 100, "$name under load: $r->{200} admitted");
}

# 5. Stalled longer than the timeout: DEBUG SLEEP, then CLIENT PAUSE.
for my $stall (['DEBUG', 'SLEEP', '1.2'], ['CLIENT', 'PAUSE', '1200', 'ALL']) {
    my $name = join ' ', @$stall[0, 1];
    my $tag = lc $stall->[0];
    my $r = run_clients($n->port, sub { "/deny?k=$tag$_[0]_" . int($_[1] / 8) }, 4, 1000000, keepalive => 1,
        until => time + 2.2, record => 'X-Status',
        during => sub {
            sleep 0.3;
            my $pid = fork // die;
            if (!$pid) { $redis->cli(@$stall); POSIX::_exit(0) }
            waitpid $pid, 0 if $stall->[0] eq 'CLIENT';
        });
    my %codes = map { $_ => $r->{$_} } grep { !/^:/ } keys %$r;
    is(join(',', sort keys %codes), '200,429,503', "$name: 200/429 from Redis, 503 (deny) while it stalls")
      or diag(explain \%codes);
    ok($r->{':max_ms'} < $timeout_ms + $margin_ms, "$name: slowest request $r->{':max_ms'}ms");
    my $t = $n->resumes_within('/deny?k=' . fresh_key());
    ok($t < 1.0, sprintf("$name: limiting resumes in %.2fs after the stall", $t));
    1 while waitpid(-1, POSIX::WNOHANG()) > 0;
}

# A request denied because Redis stalled must not keep what Redis consumes for it late.
{
    my $k = fresh_key();
    my @s = map { ($n->timed("/deny?k=$k"))[0] } 1 .. 2;
    is("@s", '200 200', 'late admission: two of five used');
    my $pid = fork // die;
    if (!$pid) { $redis->cli('DEBUG', 'SLEEP', '0.6'); POSIX::_exit(0) }
    ok($redis->wait_asleep, 'late admission: Redis sleeps');
    @s = map { join ' ', ($n->timed("/deny?k=$k"))[0, 1] } 1 .. 3;
    is("@s", '503 ERROR 503 ERROR 503 ERROR', 'late admission: three denied while Redis sleeps');
    waitpid $pid, 0;
    # the late replies come in and the units go back: awaited, then they must stay
    is($n->settle_remaining("/peek?k=$k", 3), 3, 'late admission: Redis admitted them late, and gave the units back');
}

# 6. Wrong password and wrong database: on_error applies, quickly, the reason is logged.
for my $case (['/wrong', qr/handshake failed: WRONGPASS|handshake failed: ERR AUTH|handshake failed: ERR invalid password/],
              ['/baddb', qr/handshake failed: ERR DB index is out of range/]) {
    my ($path, $re) = @$case;
    my @r = map { [$n->timed("$path?k=" . fresh_key())] } 1 .. 5;
    is(join(' ', map { "$_->[0] $_->[1]" } @r), join(' ', ('503 ERROR') x 5), "$path: on_error deny applies");
    my ($slowest) = sort { $b <=> $a } map { $_->[2] } @r;
    ok($slowest < $timeout_ms + $margin_ms, "$path: slowest request ${slowest}ms");
    like($n->error_log, $re, "$path: the reason is logged");
}
unlike($n->error_log, qr/not-the-password/, 'the password is never logged');

# Errors are logged at most once per second (per ratelimit_redis), not per request.
{
    my @lines = grep { /\[error\].*ratelimit redis "wrong"/ } split /\n/, $n->error_log;
    my %per_second;
    $per_second{$_}++ for map { /^(\S+ \S+)/ ? $1 : () } @lines;
    my ($worst) = sort { $b <=> $a } values %per_second;
    ok(($worst // 0) <= 2, "errors of one ratelimit_redis: at most one a second per worker (worst $worst)");
}

# No worker crashed through all of this.
is(join(' ', $n->worker_pids), join(' ', @workers), 'the same workers run: none crashed');
unlike($n->error_log, qr/exited on signal|\[alert\]|\[emerg\]/, 'no crash, alert or emerg in the log');

done_testing;
