# Zones with sync=TIME (issue 10) on a Redis Cluster of 3 primaries, two nginx instances with
# two workers each: the keys of one sync round live on different primaries, so a round is
# routed per node. Fewer cases than t/61-sync.t (one Redis):
#  - deltas not lost: N requests over many keys, admitted across the hosts => the global states
#    on all primaries add up to exactly N, in both modes (gcra, fixed, sliding);
#  - a hot key hammered from both hosts: lease never above one exact limiter over the span,
#    optimistic within its bound;
#  - a graceful stop sends what is unsent, to every primary.
# runs alone: it measures time and loads the machine (bounds over sync intervals)
use strict;
use warnings;
BEGIN { $ENV{RLTEST_TIMEOUT} ||= 240 }
use FindBin;
use lib "$FindBin::Bin/lib";
use RLTest;
use RLTest::Sync;
use Test::More;
use Time::HiRes qw(time sleep);

my @modes = qw(optimistic lease);
my $H     = 2;
my $T     = 0.1;
my $L     = 0.25;    # round trip + timer lateness allowed for, per sync (see t/61-sync.t)
my $lag   = 2 * ($T + $L);
my $day   = 86400;

avoid_window_edge($day, 180);
alarm($ENV{RLTEST_TIMEOUT});

my $c = start_redis_cluster(primaries => 3);
is(scalar($c->primaries), 3, 'the cluster has three primaries');

my (%Z, @zones);
sub zone { my (%z) = @_; $z{sync} //= $T; push @zones, \%z; $Z{ $z{name} } = \%z; return \%z }
for my $m (@modes) {
    zone(name => "n_${m}_gcra",    algo => 'gcra',    mode => $m, requests => 10,   period => 3600, burst => 999);
    zone(name => "n_${m}_fixed",   algo => 'fixed',   mode => $m, requests => 1000, period => $day);
    zone(name => "n_${m}_sliding", algo => 'sliding', mode => $m, requests => 1000, period => $day);
    zone(name => "h_$m", algo => 'gcra', mode => $m, requests => 5, period => 1, burst => 19);
    zone(name => "s_$m", algo => 'fixed', mode => $m, requests => 1000, period => $day, sync => 10);
}

my $zone_lines = join '', map { '    ' . zone_line($_, 'rc') . "\n" } @zones;
my $locations  = join '', map { "        location = /$_->{name} { ratelimit zone=$_->{name}; empty_gif; }\n" } @zones;
my $http = <<"EOF2";
    ratelimit_redis rc cluster ${\ $c->seeds } timeout=500ms;
$zone_lines
    server {
        listen 127.0.0.1:%%PORT%% reuseport;
        add_header X-Status \$ratelimit_status always;
$locations
    }
EOF2
my $n1 = start_nginx($http);
my $n2 = start_nginx($http);
my @ports = ($n1->port, $n2->port);

sub only_codes {
    my ($r, $what, @allowed) = @_;
    my %ok = map { $_ => 1 } @allowed;
    my @other = grep { !$ok{$_} } split /,/, codes($r);
    ok(!@other, "$what: statuses " . codes($r)) or diag(explain $r);
}

# ---------------------------------------------------------------- deltas not lost
{
    my @nz = grep { $_->{name} =~ /^n_/ } @zones;
    # 8 clients x 120 new connections; request i goes to zone i % 6 with key i % 20: 160 per
    # zone over 20 keys
    my $r = run_clients(\@ports, sub { my ($cl, $i) = @_; '/' . $nz[ $i % @nz ]{name} . '?k=' . ($i % 20) }, 8, 120,
        keepalive => 0, record => 'X-Status');
    is($r->{200} // 0, 960, 'not lost: all 960 requests admitted (160 per zone, over 20 keys)') or diag(explain $r);
    is(join(',', sort keys %{ $r->{':values'} }), 'PASSED', 'not lost: every request decided');
    for my $z (@nz) {
        # lease buckets: unspent units under another host's grants drain instead (t/61-sync.t)
        my $lb = $z->{mode} eq 'lease' && is_bucket($z);
        my ($ok, $got) = settle($c, $z, 160, timeout => $lb ? 3 : 8, extra => $lb ? 1e9 : 0);
        ok($ok, "not lost, $z->{algo} $z->{mode}: 160 admitted on 2 hosts, the states on the primaries add up to "
          . ($lb ? 'at least ' : '') . 160) or diag("they hold $got");
        note("not lost, $z->{algo} lease: the states hold $got") if $lb;
        my %nodes = map { $_->[1]->port => 1 } $c->scan("rl:{$z->{name}:*");
        is(scalar(keys %nodes), 3, "not lost, $z->{algo} $z->{mode}: its 20 keys are on all three primaries");
    }
}

# ---------------------------------------------------------------- hot key
for my $m (@modes) {
    my $z = $Z{"h_$m"};
    my $r = hammer(\@ports, "/$z->{name}?k=hot", seconds => 2.5);
    my $admitted = $r->{200} // 0;
    my $exact = exact_bound($z, $r->{':t0'}, $r->{':t1'});
    if ($m eq 'lease') {
        cmp_ok($admitted, '<=', $exact, "hot key, lease: admitted <= one exact limiter over the span");
    } else {
        my $bound = $exact + ($H - 1) * (capacity($z) + $z->{requests} / $z->{period} * $lag);
        cmp_ok($admitted, '<=', $bound, "hot key, optimistic: admitted <= one exact limiter + (H-1)(C + r lag)");
    }
    cmp_ok($admitted, '>=', $exact / 2, "hot key, $m: admitted at least half of one exact limiter");
    note(sprintf('hot key, %s: admitted %d of %d in %.2fs, one exact limiter %.1f', $m, $admitted,
        $admitted + ($r->{429} // 0), $r->{':t1'} - $r->{':t0'}, $exact));
    only_codes($r, "hot key, $m", 200, 429);
    is(join(',', sort grep { $_ ne 'REJECTED' } keys %{ $r->{':values'} }), 'PASSED', "hot key, $m: decided throughout");
}

# ---------------------------------------------------------------- graceful stop
for my $m (@modes) {
    my $z = $Z{"s_$m"};
    my $r = run_clients($n2->port, sub { "/$z->{name}?k=" . $_[1] }, 3, 10, keepalive => 0, record => 'X-Status');
    is($r->{200} // 0, 30, "stop, $m: 30 admitted on host 2, over 10 keys") or diag(explain $r);
    note("stop, $m: before the stop the states hold " . zone_count($c, $z) . ' (sync=10s)');
}
$n2->stop;
for my $m (@modes) {
    my ($ok, $got) = settle($c, $Z{"s_$m"}, 30, timeout => 1, after => 0.5);
    ok($ok, "stop, $m: after a graceful stop the states on the primaries hold all 30") or diag("they hold $got");
}

done_testing;
