package RLTest::Sync;
# Helpers of the sync-zone tests (t/61-sync.t, t/62-sync-cluster.t, ...): zones with sync=TIME
# described as Perl hashes, what their global state in Redis counts, what one exact limiter
# admits over a span, traffic sent to several hosts at once, and a host's rounds awaited.
#
# A zone: { name, algo, requests, period (s), burst, sync (s), mode (optimistic|lease|undef) }.
#   zone_line($z, $redis_name)       its ratelimit_zone line (keyed on $arg_k)
#   capacity($z)                     burst + 1 (buckets) or requests (windows)
#   is_bucket($z)
#   zone_count($store, $z)           the units the global state of the zone's keys holds, summed
#                                    (the replies of sync calls the script keeps, "...:call:<id>",
#                                    are not states: skipped)
#                                    over its keys (buckets: each key's level rounded up; see
#                                    units_of_state), and how many keys; $store: RLTest::Redis or
#                                    RLTest::RedisCluster
#   settle($store, $z, $want, %o)    polls zone_count until it is $want (up to $want + o{extra},
#                                    default 0) for o{timeout} seconds (5), then waits o{after}
#                                    seconds more (3 sync intervals, at most 2 s) and reads it
#                                    again: a count that only passes by on its way elsewhere
#                                    fails -> (ok, count)
#   exact_bound($z, $t0, $t1)        the most one exact limiter admits from a fresh key in [t0, t1]
#   hammer(\@ports, $path, %o)       o{clients} (8) send for o{seconds} (2.5), o{gap} (4 ms) apart
#   paced(\@ports, $path, %o)        each client sends o{rate} requests/s for o{seconds}
#   converge($nginx, $path, $limit, $base [, $timeout])  sends $path to $nginx every 50 ms
#                                    (each one admitted) until X-Rem ($ratelimit_remaining) is
#                                    $limit - $base - (requests sent so far): its view holds
#                                    $base units of others -> (seconds or undef, sent, last X-Rem)
#       hammer, paced -> { 200 => n, 429 => n, ..., ':values' => { X-Status value => n }, ':t0', ':t1' }: t0..t1
#       holds every decision (t0: before the first request left, t1: after the last reply)
#   sync_total($nginx, $zone, $what) a counter of the zone on that host, $what 'rounds' (done:
#                                    Redis answered, or the round failed) or 'failures' (rounds
#                                    or lease asks that failed): nginx_ratelimit_sync_<what>_total
#                                    (its server needs a `location = /metrics { ratelimit_metrics; }`),
#                                    -1 if not there
#   wait_sync($nginx, $zone, $what, $n [, $timeout])  until that counter grew by $n: what $n
#                                    intervals would be slept for (or "a round fails"), awaited ->
#                                    true, false after $timeout seconds (3)
use strict;
use warnings;
use Exporter 'import';
use POSIX qw(floor);
use Time::HiRes qw(time sleep);
use RLTest;

our @EXPORT = qw(zone_line capacity is_bucket zone_count settle exact_bound hammer paced converge units_of_state
  sync_total wait_sync);

sub is_bucket { return $_[0]{algo} =~ /^(gcra|token|leaky)$/ ? 1 : 0 }
sub capacity  { my ($z) = @_; return is_bucket($z) ? ($z->{burst} // 0) + 1 : $z->{requests} }

# seconds -> nginx time: '1h' as '3600s', '0.1' as '100ms'
sub _ms { my ($s) = @_; return $s == int($s) ? "${s}s" : sprintf('%dms', $s * 1000 + 0.5) }

sub zone_line {
    my ($z, $redis) = @_;
    my $l = "ratelimit_zone $z->{name} key=\$arg_k requests=$z->{requests} period=" . _ms($z->{period});
    $l .= " burst=$z->{burst}" if is_bucket($z) && $z->{burst};
    $l .= " algo=$z->{algo} redis=$redis";
    $l .= " sync=" . _ms($z->{sync}) if $z->{sync};
    $l .= " sync_mode=$z->{mode}" if $z->{mode};
    return "$l;";
}

sub _gcd { my ($a, $b) = @_; ($a, $b) = ($b, $a % $b) while $b; return $a }

# The policy's integers as src/core/algo/policy.cpp derives them.
sub _policy {
    my ($z) = @_;
    my $p = int($z->{period} * 1e6 + 0.5);
    my $g = _gcd($z->{requests}, $p);
    my ($refill, $token) = ($z->{requests} / $g, $p / $g);
    return { period_us => $p, refill => $refill, token => $token, depth => capacity($z) * $token };
}

# The units a state (24 bytes: three little-endian doubles; a lease bucket's key holding shares
# keeps its book after them: the pool's level, counted the same) holds at Redis time $now_us:
# windows: the counts of the window of the state (previous + current; the tests use periods
# no test outlives); buckets: the level in units, rounded up (what was admitted, less what has
# drained since: the tests use rates that drain less than one unit over a test).
sub units_of_state {
    my ($z, $bytes, $now_us) = @_;
    return 0 unless defined $bytes;
    # A lease bucket's key holding shares keeps its book after the state (96 bytes, sync_command.h).
    die "state of $z->{name} is " . length($bytes) . " bytes\n" unless length $bytes == 24 || length $bytes == 96;
    my ($a, $b, $c) = unpack 'd<3', substr($bytes, 0, 24);
    return $b if $z->{algo} eq 'fixed';
    return $b + $c if $z->{algo} eq 'sliding';
    my $p = _policy($z);
    my $level;
    if ($z->{algo} eq 'gcra') {
        $level = $a >= $now_us ? ($a - $now_us) * $p->{refill} + $b : 0;
    } elsif ($z->{algo} eq 'token') {
        return 0 unless $c;
        my $tokens = $a < $p->{depth} ? $a : $p->{depth};
        $level = $p->{depth} - $tokens - ($now_us > $b ? ($now_us - $b) * $p->{refill} : 0);
    } else {    # leaky
        $level = $a - ($now_us > $b ? ($now_us - $b) * $p->{refill} : 0);
    }
    return 0 if $level <= 0;
    my $u = $level / $p->{token};
    return $u == int($u) ? $u : int($u) + 1;
}

sub _now_us {
    my ($store, $node) = @_;
    my ($ok, $t) = $node ? $store->cmd($node, 'TIME') : $store->cmd('TIME');
    die "TIME: " . ($ok ? $t : 'failed') . "\n" unless $ok && ref $t eq 'ARRAY';
    return $t->[0] * 1e6 + $t->[1];
}

sub zone_count {
    my ($store, $z) = @_;
    my $pattern = "rl:{$z->{name}:*";
    my ($sum, $n) = (0, 0);
    if ($store->isa('RLTest::RedisCluster')) {
        for my $kn ($store->scan($pattern)) {
            my ($key, $node) = @$kn;
            next if $key =~ /:call:/;    # a sync call's reply, kept a while (sync_command.h)
            my ($ok, $v) = $store->cmd($node, 'GET', $key);
            next unless $ok;
            $sum += units_of_state($z, $v, _now_us($store, $node));
            $n++;
        }
    } else {
        for my $key (grep { !/:call:/ } $store->keys_matching($pattern)) {
            my ($ok, $v) = $store->cmd('GET', $key);
            next unless $ok;
            $sum += units_of_state($z, $v, _now_us($store));
            $n++;
        }
    }
    return wantarray ? ($sum, $n) : $sum;
}

sub settle {
    my ($store, $z, $want, %o) = @_;
    my $extra = $o{extra} // 0;
    my $ok = sub { $_[0] >= $want && $_[0] <= $want + $extra };
    my $deadline = time + ($o{timeout} // 5);
    my $got;
    while (1) {
        $got = eval { zone_count($store, $z) } // -1;
        last if $ok->($got) || time > $deadline;
        sleep 0.05;
    }
    return (0, $got) unless $ok->($got);
    my $after = $o{after} // (3 * $z->{sync} < 2 ? 3 * $z->{sync} : 2);
    sleep $after;
    $got = eval { zone_count($store, $z) } // -1;
    return ($ok->($got) ? 1 : 0, $got);
}

sub exact_bound {
    my ($z, $t0, $t1) = @_;
    if (is_bucket($z)) {
        return capacity($z) + $z->{requests} * ($t1 - $t0) / $z->{period};
    }
    my $windows = floor($t1 / $z->{period}) - floor($t0 / $z->{period}) + 1;
    return $z->{requests} * $windows;
}

sub _run {
    my ($ports, $path, $clients, $per, %o) = @_;
    my $t0 = time;
    my $r = run_clients($ports, $path, $clients, $per, keepalive => 1, record => 'X-Status', %o);
    $r->{':t1'} = time;
    $r->{':t0'} = $t0 + 0.3;    # run_clients starts its clients 0.3 s after the call
    return $r;
}

sub hammer {
    my ($ports, $path, %o) = @_;
    my $secs = $o{seconds} // 2.5;
    my $gap = $o{gap} // 0.004;    # a pause after each reply: ~200 requests/s per client, far above the limits
    my $each = sub { sleep $gap if $_[1]; return ref $path ? $path->(@_) : $path };
    return _run($ports, $each, $o{clients} // 8, $o{max} // 20000, until => time + 0.3 + $secs);
}

sub paced {
    my ($ports, $path, %o) = @_;
    my ($rate, $secs, $clients) = ($o{rate}, $o{seconds} // 2, $o{clients} // 2);
    my $start = time + 0.4;
    my $gap = 1 / $rate;
    my $each = sub {
        my ($c, $i) = @_;
        my $wait = $start + ($i + $c / $clients) * $gap - time;
        sleep $wait if $wait > 0;
        return ref $path ? $path->($c, $i) : $path;
    };
    return _run($ports, $each, $clients, int($secs * $rate));
}

sub sync_total {
    my ($n, $zone, $what) = @_;
    my (undef, undef, $body) = $n->get('/metrics');
    return ($body // '') =~ /^nginx_ratelimit_sync_\Q$what\E_total\{zone="\Q$zone\E"\} (\d+)$/m ? $1 : -1;
}

sub wait_sync {
    my ($n, $zone, $what, $count, $timeout) = @_;
    my $from = sync_total($n, $zone, $what);
    return $from >= 0 && wait_until(sub { sync_total($n, $zone, $what) >= $from + $count }, timeout => $timeout // 3) ? 1 : 0;
}

sub converge {
    my ($n, $path, $limit, $base, $timeout) = @_;
    my $t0 = time;
    my $c = $n->keepalive;
    my ($sent, $last) = (0, '');
    while (time - $t0 < ($timeout // 5)) {
        my ($s, $h) = $c->get($path);
        $sent++;
        $last = $h->{'x-rem'} // '';
        return (time - $t0, $sent, $last) if ($s // 0) == 200 && $last eq $limit - $base - $sent;
        sleep 0.05;
    }
    return (undef, $sent, $last);
}

1;

