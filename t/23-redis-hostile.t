# A hostile or broken Redis, played by RLTest::Proxy in front of a real redis-server: a
# connection that goes silent (half-open), a truncated reply, replies dripped byte by byte, a
# corrupt reply, a reply announcing a huge bulk or array, error replies full of control
# characters. Requests get on_error within the timeout; a stuck connection is closed and opened
# again, so limiting resumes by itself once Redis answers (no reload); a worker's memory stays
# bounded; every kind of failure is logged, at most once a second per ratelimit_redis and
# worker, and what Redis sends is logged sanitized.
# runs alone: it measures time (timeouts, a log line a second)
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use RLTest;
use Test::More;
use Time::HiRes qw(time sleep);

my $timeout_ms = 100;
my $margin_ms  = 250;    # scheduling slack of a loaded 2-core test machine
my $resume_s   = 1.5;    # "about a second" after Redis answers again, with that slack
my $max_growth = 32 * 1024;    # kB a worker may grow while it is sent a huge reply
# Under AddressSanitizer freed memory waits in its quarantine (256 MB by default) instead of
# being reused, so each reconnect's buffer adds up: the bound is wider there, still far below
# what an unbounded reply took (65 MB and 470 MB per worker).
$max_growth *= 3 if ($ENV{LD_PRELOAD} // '') =~ /libasan/;

my $redis = start_redis();
my $p     = start_proxy(upstream => $redis);
my $p2    = start_proxy(upstream => $redis);
my $dead  = free_port();

my $n = start_nginx(<<"EOF2");
    ratelimit_redis h    127.0.0.1:${\ $p->port} timeout=${timeout_ms}ms;
    ratelimit_redis mp   127.0.0.1:${\ $p2->port} timeout=${timeout_ms}ms max_pending=1;
    ratelimit_redis gone 127.0.0.1:$dead timeout=${timeout_ms}ms;
    ratelimit_zone z  key=\$arg_k requests=1000 period=1h redis=h;
    ratelimit_zone zm key=\$arg_k requests=1000 period=1h redis=mp;
    ratelimit_zone zg key=\$arg_k requests=1000 period=1h redis=gone;
    server {
        listen 127.0.0.1:%%PORT%% reuseport;
        ratelimit_on_error deny;
        add_header X-Status \$ratelimit_status always;
        add_header X-Who \$pid always;
        location /h    { ratelimit zone=z; empty_gif; }
        location /mp   { ratelimit zone=zm; empty_gif; }
        location /gone { ratelimit zone=zg; empty_gif; }
    }
EOF2
my @workers = $n->worker_pids;
ok(defined $n->wait_decided(sub { '/h?k=' . fresh_key('ready') }), 'both workers decide through the proxy');

# Requests while the proxy misbehaves, until both workers answered at least two (bounded):
# -> (the answers "status X-Status", the slowest in ms).
sub failing {
    my %who;
    my (@got, $slowest);
    $slowest = 0;
    for (1 .. 40) {
        my $t0 = time;
        my ($s, $h) = $n->get('/h?k=' . fresh_key());
        my $ms = int((time - $t0) * 1000);
        $slowest = $ms if $ms > $slowest;
        push @got, ($s // 'ERR') . ' ' . ($h->{'x-status'} // '');
        $who{ $h->{'x-who'} // '' }++;
        last if @got >= 6 && (grep { $_ >= 2 } values %who) >= 2;
    }
    return (\@got, $slowest);
}

# Many commands lost or late at once, as under traffic: 8 clients for a second.
sub flood {
    my $r = run_clients($n->port, sub { '/h?k=fl' . fresh_key() }, 8, 1000, keepalive => 1, until => time + 1);
    return $r;
}

# Switches back to pass; seconds until limiting has resumed: from the first of 10 requests in a
# row decided in Redis (PASSED), by both workers (99: not within 4s). A connection out of step
# (lost commands) answers some requests with the replies of others: one PASSED is not enough.
# If it does not resume, a reload gives the next case working connections (the failure counts).
# -> (seconds, connections the proxy accepted since $acc, before any reload)
my $stuck = 0;
sub resumes {
    my ($acc) = @_;
    $p->mode('pass');
    my $t0 = time;
    my ($t, $streak, $since, %who) = (99, 0, undef);
    while (time - $t0 < 4) {
        my $sent = time - $t0;
        my ($s, $h) = $n->get('/h?k=' . fresh_key());
        if (($h->{'x-status'} // '') eq 'PASSED') {
            $since //= $sent;
            $streak++;
            $who{ $h->{'x-who'} // '' } = 1;
            if ($streak >= 10 && keys %who >= 2) { $t = $since; last }
        } else {
            ($streak, $since, %who) = (0, undef);
            sleep 0.02;
        }
    }
    my $new = $p->accepted - ($acc // 0);
    if ($t == 99) {
        $stuck++;
        $n->reload;
        $n->wait_decided(sub { '/h?k=' . fresh_key('after_reload') }, 4);
    }
    return ($t, $new);
}

# Passes if a line of the error log written since offset $at names ratelimit redis "$name"
# and matches $re; else shows those lines (at most 5).
sub logged_since {
    my ($at, $name, $re, $what) = @_;
    my @mine = grep { /ratelimit redis "\Q$name\E"/ } split /\n/, substr($n->error_log, $at);
    ok(scalar(grep { $_ =~ $re } @mine), $what)
      or diag(@mine ? join("\n", map { substr($_, 0, 200) } @mine[0 .. ($#mine < 4 ? $#mine : 4)])
                    : "no line about ratelimit redis \"$name\"");
}

# 1. A stuck connection (silent), a truncated reply, replies dripped slower than the timeout,
#    a corrupt reply: on_error within the timeout, then limiting resumes by itself.
for my $case (['silent', undef, qr/timed out|timeout/i],
              ['truncate', undef, qr/timed out|timeout/i],
              ['drip', 200, qr/timed out|timeout/i],
              ['corrupt', undef, qr/protocol/i]) {
    my ($mode, $arg, $logged) = @$case;
    sleep 1.1;    # out of the second in which the previous case may have logged
    my $acc = $p->accepted;
    my $at = length $n->error_log;
    $p->mode($mode, $arg);
    my ($got, $slowest) = failing();
    my @bad = grep { $_ ne '503 ERROR' } @$got;
    is("@bad", '', "$mode: every request gets on_error deny (" . scalar(@$got) . ' requests)');
    ok($slowest < $timeout_ms + $margin_ms, "$mode: slowest request ${slowest}ms");
    my $r = flood();
    is(codes($r), '503', "$mode: a flood of " . ($r->{503} // 0) . ' requests, all on_error deny') or diag(explain $r);
    ok($r->{':max_ms'} < $timeout_ms + $margin_ms, "$mode: slowest of the flood $r->{':max_ms'}ms");
    sleep 0.3;    # every command sent is now overdue
    my ($t, $new) = resumes($acc);
    ok($t < $resume_s, sprintf("$mode, then pass: limiting resumes by itself in %.2fs, without reload", $t));
    ok($new > 0, "$mode: the connection was opened again ($new new)");
    logged_since($at, 'h', qr/$logged/, "$mode: logged");
}

# 2. A reply announcing a huge bulk string or array: memory stays bounded, a protocol error is
#    logged, limiting resumes. The bulk announces 999999999 bytes and sends 64 MB; the array
#    announces 10 million elements (999999999 made today's code grow 8 GB per worker) and
#    sends 32 MB of them: both far above anything the script returns.
for my $case (['huge_bulk', 64 * 1024 * 1024], ['huge_array', 32 * 1024 * 1024, 10_000_000]) {
    my ($mode, $bytes, $announce) = @$case;
    sleep 1.1;
    my @w = $n->worker_pids;
    my %before = map { $_ => worker_rss($_) } @w;
    my %peak = %before;
    my $at = length $n->error_log;
    $p->mode($mode, $bytes, $announce);
    my ($got) = failing();
    my @bad = grep { $_ ne '503 ERROR' } @$got;
    is("@bad", '', "$mode: every request gets on_error deny");
    # While the proxy streams (at most $bytes per connection), watch every worker's RSS.
    my $until = time + 3;
    while (time < $until) {
        for (@w) { my $r = worker_rss($_); $peak{$_} = $r if $r > $peak{$_} }
        sleep 0.05;
    }
    my @growth = map { $peak{$_} - $before{$_} } @w;
    ok(!grep({ $_ >= $max_growth } @growth), "$mode: worker RSS growth (kB) @growth, each under $max_growth");
    logged_since($at, 'h', qr/protocol|too large|too long/i, "$mode: the error is logged");
    my ($t) = resumes();
    ok($t < $resume_s, sprintf("$mode, then pass: limiting resumes in %.2fs", $t));
}

# 3. A reset connection and a refused one are logged.
{
    sleep 1.1;
    my $at = length $n->error_log;
    $p->mode('reset');
    my ($got) = failing();
    is(join(' ', grep { $_ ne '503 ERROR' } @$got), '', 'reset: every request gets on_error deny');
    logged_since($at, 'h', qr/reset|closed/i, 'reset: logged');
    ok((resumes())[0] < $resume_s, 'reset, then pass: limiting resumes');

    my @g = map { join ' ', ($n->timed('/gone?k=' . fresh_key()))[0, 1] } 1 .. 4;
    is("@g", join(' ', ('503 ERROR') x 4), 'nothing listening: on_error deny');
    # by a worker (the master's probe at start, which is to go, does not count)
    my $by_worker = sub {
        my $log = $n->error_log;
        my %w = map { $_ => 1 } $log =~ /start worker process (\d+)/g;
        return grep { /ratelimit redis "gone".*refused/i && /^\S+ \S+ \[\w+\] (\d+)#/ && $w{$1} } split /\n/, $log;
    };
    my $deadline = time + 2;
    sleep 0.05 while !$by_worker->() && time < $deadline;
    ok(scalar($by_worker->()), 'nothing listening: "refused" is logged by the workers');
}

# 4. max_pending full: one command in flight per connection to a healthy Redis, a flood from 8
#    clients (no timeouts: nothing else to log).
{
    my $r = run_clients($n->port, sub { "/mp?k=f$_[0]_$_[1]" }, 8, 1000, keepalive => 1, until => time + 1);
    ok(($r->{503} // 0) > 0, 'max_pending full: on_error deny applies (' . ($r->{503} // 0) . ' of '
        . (($r->{200} // 0) + ($r->{503} // 0)) . ')');
    ok(defined $n->wait_log(qr/ratelimit redis "mp"[^\n]*(?:max_pending|too many)/i, 2), 'max_pending full: logged');
}

# 5. Error replies: logged, sanitized (no control characters, no forged line, length capped).
{
    my $forged = "\n2026/01/01 00:00:00 [emerg] 1#1: forged by Redis";
    my $reply = "-ERR hostile\x1b[31m\x00\x07\x7f\x08\r\t$forged " . ('A' x 5000) . "\r\n";
    sleep 1.1;
    my $at = length $n->error_log;
    $p->mode('error', $reply);
    my ($got) = failing();
    is(join(' ', grep { $_ ne '503 ERROR' } @$got), '', 'error replies: every request gets on_error deny');
    logged_since($at, 'h', qr/error reply|ERR/, 'error replies: logged');
    ok((resumes())[0] < $resume_s, 'error replies, then pass: limiting resumes');
}

my @lines = split /\n/, $n->error_log;
my @ctl = grep { /[\x00-\x08\x0a-\x1f\x7f]/ } @lines;
is(scalar @ctl, 0, 'no control characters in error.log') or diag(explain [map { substr($_, 0, 200) } @ctl[0 .. ($#ctl > 2 ? 2 : $#ctl)]]);
is(scalar(grep { m{^2026/01/01 00:00:00 \[emerg\]} } @lines), 0, 'a reply cannot forge a log line');
my ($longest) = sort { $b <=> $a } map { length } @lines;
ok($longest <= 1536, "what Redis sent is logged capped: longest error.log line $longest bytes (at most 1536)");

# Every failure at most once a second per ratelimit_redis and worker (2 absorbs the boundaries).
{
    my %count;
    for (@lines) {
        next unless m{^(\S+ \S+) \[\w+\] (\d+)#\d+: .*ratelimit redis "(\w+)"};
        $count{"$3 $2 $1"}++;
    }
    my ($worst) = sort { $count{$b} <=> $count{$a} } keys %count;
    ok(!$worst || $count{$worst} <= 2, 'failures logged at most once a second per ratelimit_redis and worker'
        . ($worst ? " (worst: $count{$worst} at $worst)" : ''));
}

is($stuck, 0, 'no reload was needed to resume (after a case that did not resume, a reload let the next one start clean)');
is(join(' ', $n->worker_pids), join(' ', @workers), 'the same workers run: none crashed') if !$stuck;
done_testing;
