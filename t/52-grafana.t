# The Grafana board (examples/grafana-ratelimit.json, issue 32) against a real Prometheus
# (Debian's) scraping a real nginx under traffic, with zones in shared memory, in Redis, a sync
# zone and an in-flight zone: every panel's every query, its variables at "All", returns at least
# one series, and the main ones the values the traffic makes (rejections of the zone rejecting,
# a ratio between 0 and 1, Redis calls and a round trip, sync rounds and hosts); the variables'
# label queries find the zones and the Redis; every selector honours $instance and $zone or
# $redis. The alerting rules (examples/ratelimit-alerts.yml): `promtool check rules`, `promtool
# test rules` (examples/ratelimit-alerts.test.yml: each alert fires on series that should fire
# it, not on ones that should not), and the same Prometheus evaluates them on the real series
# without error.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use RLTest;
use RLTest::Util qw(temp_dir stop_child);
use Test::More;
use JSON::PP qw(decode_json);
use POSIX ();
use Time::HiRes qw(time sleep);

my $PROM     = '/usr/bin/prometheus';
my $PROMTOOL = '/usr/bin/promtool';
plan skip_all => 'needs prometheus and promtool (./build.sh test installs them)' unless -x $PROM && -x $PROMTOOL;

my $examples = repo_root() . '/examples';
my $board = decode_json(slurp("$examples/grafana-ratelimit.json"));

# ---- the rules, offline
for my $cmd (['check', 'rules', 'ratelimit-alerts.yml'], ['test', 'rules', 'ratelimit-alerts.test.yml']) {
    my ($rc, $out) = run_cmd(60, '/bin/sh', '-c', "cd '$examples' && $PROMTOOL @$cmd");
    is($rc, 0, "promtool @$cmd") or diag($out);
}

# ---- the board's shape
my %vars = map { $_->{name} => $_ } @{ $board->{templating}{list} };
ok($vars{zone} && $vars{zone}{type} eq 'query' && $vars{zone}{includeAll} && $vars{zone}{allValue} eq '.*',
    'a $zone variable, All = .*');
ok($vars{$_} && $vars{$_}{allValue} eq '.*', "a \$$_ variable") for qw(instance redis);
is($vars{datasource}{type}, 'datasource', 'the data source chosen at import');
my (@targets, %ids);
for my $p (@{ $board->{panels} }) {
    $ids{ $p->{id} }++;
    my $g = $p->{gridPos};
    ok($g && $g->{x} >= 0 && $g->{x} + $g->{w} <= 24, "panel '$p->{title}' fits the grid");
    next if $p->{type} eq 'row';
    is($p->{datasource}{uid}, '${datasource}', "panel '$p->{title}': the chosen data source");
    ok(@{ $p->{targets} // [] }, "panel '$p->{title}' has queries");
    for my $t (@{ $p->{targets} }) {
        push @targets, { panel => $p->{title}, ref => $t->{refId}, expr => $t->{expr} };
        for my $sel ($t->{expr} =~ /(nginx_ratelimit_\w+\{[^}]*\})/g) {
            my $scope = $sel =~ /^nginx_ratelimit_redis_/ ? 'redis' : 'zone';
            like($sel, qr/instance=~"\$instance"/, "'$p->{title}' $t->{refId}: $sel honours \$instance");
            like($sel, qr/$scope=~"\$$scope"/, "'$p->{title}' $t->{refId}: $sel honours \$$scope");
        }
    }
}
is(scalar(grep { $_ > 1 } values %ids), 0, 'panel ids are unique');
my @titles = map { $_->{panel} } @targets;
for my $want ('Requests by zone and result', 'Rejection ratio by zone', 'Top rejecting zones',
    'Redis calls and checks', 'Redis errors by reason', 'Redis round trip', 'Sync rounds and failures',
    'Sync hosts', 'In flight (concurrency zones)') {
    ok((grep { $_ eq $want } @titles), "a panel '$want'");
}

# ---- nginx, Redis, Prometheus
my $redis = start_redis();
my $rp = $redis->port;
my $n = start_nginx(<<"EOF");
    ratelimit_redis main 127.0.0.1:$rp timeout=500ms;
    ratelimit_zone api key=\$arg_k rate=2r/s burst=1;
    ratelimit_zone red key=\$arg_k rate=2r/s burst=1 redis=main;
    ratelimit_zone syn key=\$arg_k rate=5r/s burst=2 redis=main sync=100ms;
    ratelimit_zone cc key=\$arg_k concurrency=5;
    server {
        listen 127.0.0.1:%%PORT%%;
        location /api { ratelimit zone=api; empty_gif; }
        location /red { ratelimit zone=red; empty_gif; }
        location /syn { ratelimit zone=syn; empty_gif; }
        location /cc  { ratelimit zone=cc; empty_gif; }
        location = /metrics { ratelimit_metrics; }
    }
EOF
my $np = $n->port;

my $dir = temp_dir('rl-prom');
my $pp = free_port();
spew("$dir/prometheus.yml", <<"EOF");
global:
  scrape_interval: 1s
  evaluation_interval: 1s
rule_files:
  - $examples/ratelimit-alerts.yml
scrape_configs:
  - job_name: nginx-ratelimit
    metrics_path: /metrics
    static_configs:
      - targets: ['127.0.0.1:$np']
EOF
my @kids;
END { local $?; stop_child($_, 'TERM', 5) for grep { $_ } @kids }

sub spawn {
    my ($log, @cmd) = @_;
    my $pid = fork // die "fork: $!";
    if (!$pid) {
        open STDIN, '<', '/dev/null';
        open STDOUT, '>', $log;
        open STDERR, '>&', \*STDOUT;
        $SIG{$_} = 'DEFAULT' for qw(ALRM TERM INT PIPE);
        alarm 0;
        exec(@cmd) or POSIX::_exit(127);
    }
    push @kids, $pid;
    return $pid;
}
spawn("$dir/prometheus.log", $PROM, "--config.file=$dir/prometheus.yml", "--storage.tsdb.path=$dir/data",
    "--web.listen-address=127.0.0.1:$pp", '--log.level=warn', '--storage.tsdb.retention.time=1h');

# Traffic for at most 90 s, ~20 requests a second: one key of api and red rejected (2r/s burst 1
# at ~4/s), fresh keys passing, the sync zone, the in-flight zone.
my $traffic_pid = fork // die "fork: $!";
if (!$traffic_pid) {
    $SIG{ALRM} = sub { POSIX::_exit(0) };
    alarm 90;
    my $i = 0;
    while (1) {
        $i++;
        for my $path ("/api?k=hot", "/api?k=c$i", "/red?k=hot", "/red?k=c$i", "/syn?k=c" . ($i % 50)) {
            http_request($np, $path);
        }
        http_request($np, "/cc?k=x") if $i % 4 == 0;
        sleep 0.2;
    }
}
push @kids, $traffic_pid;

sub uri_escape {
    my ($s) = @_;
    $s =~ s/([^A-Za-z0-9\-._~])/sprintf('%%%02X', ord $1)/ge;
    return $s;
}

sub prom_get {
    my ($path) = @_;
    my ($st, undef, $body) = http_request($pp, $path);
    return undef unless ($st // 0) == 200;
    my $d = eval { decode_json($body) };
    return $d && $d->{status} eq 'success' ? $d->{data} : undef;
}

# The series of an instant query, once $ok accepts them (30 s at most): [{metric, value}].
sub series_until {
    my ($expr, $ok) = @_;
    my $deadline = time + 30;
    my $got = [];
    while (1) {
        my $d = prom_get('/api/v1/query?query=' . uri_escape($expr));
        $got = [map { { metric => $_->{metric}, value => $_->{value}[1] } } @{ $d ? $d->{result} : [] }];
        return $got if $ok->($got) || time > $deadline;
        sleep 0.5;
    }
}

my $ready = 0;
for (1 .. 150) {
    my ($st) = http_request($pp, '/-/ready');
    if (($st // 0) == 200) { $ready = 1; last }
    sleep 0.2;
}
ok($ready, 'Prometheus is ready') or diag(slurp("$dir/prometheus.log"));
my $up = series_until('up{job="nginx-ratelimit"} == 1', sub { @{ $_[0] } == 1 });
is(scalar @$up, 1, 'it scrapes nginx');

# ---- every query returns series
my %subst = ('$instance' => '.*', '$zone' => '.*', '$redis' => '.*', '$__rate_interval' => '30s', '$__range' => '5m');
sub expand {
    my ($e) = @_;
    $e =~ s/(\$\w+)/exists $subst{$1} ? $subst{$1} : $1/ge;
    return $e;
}
my %results;
for my $t (@targets) {
    my $e = expand($t->{expr});
    unlike($e, qr/\$/, "'$t->{panel}' $t->{ref}: no variable left");
    my $s = series_until($e, sub { @{ $_[0] } > 0 });
    ok(@$s > 0, "'$t->{panel}' $t->{ref}: " . scalar(@$s) . ' series') or diag($e);
    $results{"$t->{panel}/$t->{ref}"} = $e;
}

# ---- what the traffic makes them show
sub value_of {
    my ($key, $match, $ok) = @_;
    my $s = series_until($results{$key}, sub {
        grep { $match->($_->{metric}) && $ok->($_->{value}) } @{ $_[0] }
    });
    my ($v) = map { $_->{value} } grep { $match->($_->{metric}) } @$s;
    return $v;
}
my $num = qr/^[0-9.e+-]+$/;
my $pos = sub { $_[0] =~ $num && $_[0] > 0 };
my $v = value_of('Requests by zone and result/A', sub { $_[0]{zone} eq 'api' && $_[0]{result} eq 'rejected' }, $pos);
ok(defined $v && $v > 0, "api rejects: " . ($v // 'nothing') . '/s');
$v = value_of('Requests by zone and result/A', sub { $_[0]{zone} eq 'api' && $_[0]{result} eq 'passed' }, $pos);
ok(defined $v && $v > 0, "api passes: " . ($v // 'nothing') . '/s');
$v = value_of('Rejection ratio by zone/A', sub { $_[0]{zone} eq 'red' }, sub { $_[0] =~ $num && $_[0] > 0 && $_[0] < 1 });
ok(defined $v && $v > 0 && $v < 1, "red's rejection ratio: " . ($v // 'none'));
$v = value_of('Top rejecting zones/A', sub { ($_[0]{zone} // '') eq 'api' }, $pos);
ok(defined $v && $v > 0, "api among the top rejecting zones: " . ($v // 'no'));
$v = value_of('Redis calls and checks/A', sub { $_[0]{redis} eq 'main' }, $pos);
ok(defined $v && $v > 0, "Redis calls: " . ($v // 'none') . '/s');
$v = value_of('Redis round trip/C', sub { $_[0]{redis} eq 'main' }, sub { $_[0] =~ $num && $_[0] > 0 && $_[0] <= 1 });
ok(defined $v && $v > 0 && $v <= 1, "Redis p99 round trip: " . ($v // 'none') . ' s');
$v = value_of('Sync rounds and failures/A', sub { $_[0]{zone} eq 'syn' }, $pos);
ok(defined $v && $v > 0, "sync rounds: " . ($v // 'none') . '/s');
$v = value_of('Sync hosts/A', sub { $_[0]{zone} eq 'syn' }, sub { $_[0] =~ $num && $_[0] >= 1 });
ok(defined $v && $v >= 1, "sync hosts: " . ($v // 'none'));
$v = value_of('In flight (concurrency zones)/A', sub { $_[0]{zone} eq 'cc' }, sub { $_[0] =~ $num });
ok(defined $v, "in flight of cc: " . ($v // 'none'));
$v = value_of('Zone fill/A', sub { $_[0]{zone} eq 'api' }, sub { $_[0] =~ $num && $_[0] > 0 && $_[0] < 1 });
ok(defined $v && $v > 0 && $v < 1, "api's fill: " . ($v // 'none'));

# ---- the variables' label queries (label_values(metric, label))
for my $var (qw(zone redis instance)) {
    my ($metric, $label) = $vars{$var}{definition} =~ /^label_values\((\w+)(?:\{[^}]*\})?, (\w+)\)$/;
    ok($metric, "\$$var: label_values of a metric") or next;
    my $vals = prom_get("/api/v1/label/$label/values?match[]=$metric") // [];
    my @want = $var eq 'zone' ? qw(api cc red syn) : $var eq 'redis' ? ('main') : ("127.0.0.1:$np");
    is_deeply([sort @$vals], [sort @want], "\$$var finds @want");
}

# ---- the alerting rules, evaluated by this Prometheus on the real series
my $rules = [];
my $deadline = time + 30;
while (1) {
    my $d = prom_get('/api/v1/rules');
    $rules = [map { @{ $_->{rules} } } @{ $d ? $d->{groups} : [] }];
    last if (@$rules && !grep { !$_->{lastEvaluation} || $_->{lastEvaluation} =~ /^0001/ } @$rules) || time > $deadline;
    sleep 0.5;
}
is(scalar @$rules, 5, 'the five alerting rules are loaded');
is_deeply([map { "$_->{name}: $_->{health}" } grep { $_->{health} ne 'ok' } @$rules], [], 'each evaluates without error');

kill 'TERM', $traffic_pid;
done_testing();
