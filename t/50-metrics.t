# ratelimit_metrics: after a known sequence of requests over both workers, the scrape says
# exactly what was sent (results by kind, zone keys and evictions, Redis calls, checks, errors
# by reason, the round-trip histogram, Redis Cluster redirects), keeps its counters over a
# reload, is clean for `promtool check metrics` and is read by prometheus_client's own parser
# (not regexes).
# runs alone: it counts Redis timeouts of 100 ms that a loaded machine would add to
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use RLTest;
use Test::More;
use IO::Socket::INET;
use JSON::PP qw(decode_json);
use POSIX ();
use Time::HiRes qw(time sleep);

my $PARSER   = "$FindBin::Bin/lib/parse_metrics.py";
my $PROMTOOL = '/usr/bin/promtool';
plan skip_all => 'needs promtool and python3-prometheus-client (./build.sh test installs them)'
  unless -x $PROMTOOL && system('/usr/bin/python3', '-c', 'import prometheus_client') == 0;

# GET /metrics: checked by promtool, parsed; returns (sample key => value, families, headers).
sub scrape {
    my ($n, $what) = @_;
    my ($st, $h, $body) = $n->get('/metrics');
    is($st, 200, "$what: /metrics answers");
    my $file = $n->dir . '/scrape.txt';
    spew($file, $body);
    my $lint = `$PROMTOOL check metrics < $file 2>&1`;
    is($?, 0, "$what: promtool check metrics is clean") or diag($lint);
    my $json = `/usr/bin/python3 $PARSER < $file`;
    is($?, 0, "$what: prometheus_client parses it") or diag($body);
    my $d = decode_json($json || '{"samples":[],"families":{}}');
    my %v = map { skey($_->[0], %{ $_->[1] }) => $_->[2] } @{ $d->{samples} };
    return (\%v, $d->{families}, $h);
}

sub skey {
    my ($name, %l) = @_;
    return $name . '{' . join(',', map { "$_=$l{$_}" } sort keys %l) . '}';
}

# For waiting only (scrape checks): until the sum of the samples of $name whose labels hold
# every string of @$labels, as exposed (e.g. 'reason="reset"'), satisfies $cond; 3 s at most.
sub wait_metric {
    my ($n, $name, $labels, $cond) = @_;
    my $deadline = time + 3;
    while (1) {
        my (undef, undef, $body) = $n->get('/metrics');
        my $sum = 0;
        for (split /\n/, $body // '') {
            next unless /^\Q$name\E\{(.*)\} (\S+)$/;
            my ($ls, $val) = ($1, $2);
            $sum += $val unless grep { index($ls, $_) < 0 } @$labels;
        }
        return 1 if $cond->($sum);
        return 0 if time > $deadline;
        sleep 0.05;
    }
}

# The value of one sample, or 'absent'.
sub val {
    my ($v, $name, %l) = @_;
    return $v->{ skey($name, %l) } // 'absent';
}

my %pids;
sub req {
    my ($n, $path) = @_;
    my ($st, $h) = $n->get($path);
    $pids{ $h->{'x-pid'} }++ if $h->{'x-pid'};
    return ($st // 'ERR', $h->{'x-status'} // '');
}

# ------------------------------------------------------------- zones in shared memory

my $zones = <<'EOF';
    ratelimit_zone api   key=$arg_k rate=3r/m size=1m;
    ratelimit_zone dry   key=$arg_k rate=1r/m size=1m;
    ratelimit_zone small key=$arg_k requests=100 period=1m size=32k;
    ratelimit_zone shape  key=$arg_k rate=20r/s burst=5 size=1m;
    ratelimit_zone shaped key=$arg_k rate=1r/m burst=5 size=1m;
EOF
my $server = <<'EOF';
    server {
        listen 127.0.0.1:%%PORT%% reuseport;
        add_header X-Pid $pid always;
        add_header X-Status $ratelimit_status always;
        location /a { ratelimit zone=api; empty_gif; }
        location /d { ratelimit zone=dry; ratelimit_dry_run on; empty_gif; }
        location /s { ratelimit zone=small; empty_gif; }
        location /sh { ratelimit zone=shape delay=0; empty_gif; }
        location /shd { ratelimit zone=shaped delay=0; ratelimit_dry_run on; empty_gif; }
        location /later { ratelimit zone=later; empty_gif; }
        location = /metrics { ratelimit_metrics; allow 127.0.0.1; deny all; }
    }
EOF
my $later = "    ratelimit_zone later key=\$arg_k rate=1r/m size=1m;\n";

my $n = start_nginx($zones . $later . $server);

my %sent;  # "zone result" => requests
for (1 .. 6) {
    my ($st) = req($n, '/a?k=x');
    $sent{ 'api ' . ($st eq '200' ? 'passed' : $st eq '429' ? 'rejected' : "status $st") }++;
}
for (1 .. 3) { my ($st) = req($n, '/a'); $sent{ 'api ' . ($st eq '200' ? 'exempt' : "status $st") }++ }
for (1 .. 4) {
    my ($st, $x) = req($n, '/d?k=y');
    $sent{ 'dry ' . ($st ne '200' ? "status $st" : $x eq 'PASSED' ? 'passed' : $x eq 'REJECTED_DRY_RUN' ? 'rejected_dry_run' : "status $x") }++;
}
# Delays: each request as $ratelimit_status says (a delayed one waits 50 ms at most).
my %kind = (PASSED => 'passed', DELAYED => 'delayed', DELAYED_DRY_RUN => 'delayed_dry_run');
for my $loc (['shape', '/sh?k=z'], ['shaped', '/shd?k=z']) {
    for (1 .. 4) {
        my ($st, $x) = req($n, $loc->[1]);
        $sent{"$loc->[0] " . ($st eq '200' && $kind{$x} ? $kind{$x} : "status $st $x")}++;
    }
}
ok($sent{'api passed'} && $sent{'api rejected'} && $sent{'dry rejected_dry_run'} && $sent{'shape delayed'}
   && $sent{'shaped delayed_dry_run'}, 'zones: each kind was sent')
  or diag(explain \%sent);

my ($v, $fam, $h) = scrape($n, 'zones');
is($h->{'content-type'}, 'text/plain; version=0.0.4', 'Content-Type of the text format 0.0.4');
my $capacity = val($v, 'nginx_ratelimit_zone_capacity_keys', zone => 'small');
like($n->error_log, qr/ratelimit zone "small": $capacity keys/, "zones: capacity $capacity as the zone logged");

# More distinct keys than the small zone holds, on a few keep-alive connections.
my @conns = map { $n->keepalive } 1 .. 4;
for my $i (1 .. $capacity + 5) {
    my ($st, $hh) = $conns[ $i % 4 ]->get("/s?k=key$i");
    $pids{ $hh->{'x-pid'} }++ if $hh->{'x-pid'};
    $sent{ 'small ' . ($st eq '200' ? 'passed' : "status $st") }++;
}
$_->close for @conns;
is(scalar(keys %pids), 2, 'the requests were served by both workers');

sub check_requests {
    my ($v, $what) = @_;
    my (@got, @want);
    for my $zone (qw(api dry small shape shaped)) {
        for my $result (qw(passed rejected rejected_dry_run exempt error_allowed error_denied error_local delayed
                           delayed_dry_run)) {
            push @got,  "$zone $result " . val($v, 'nginx_ratelimit_requests_total', zone => $zone, result => $result);
            push @want, "$zone $result " . ($sent{"$zone $result"} // 0);
        }
    }
    is_deeply(\@got, \@want, "$what: requests_total by zone and result is exactly what was sent");
}

($v, $fam) = scrape($n, 'zones, small filled');
check_requests($v, 'zones');
is(val($v, 'nginx_ratelimit_zone_keys', zone => 'small'), $capacity, 'small: keys = capacity');
is(val($v, 'nginx_ratelimit_zone_evictions_total', zone => 'small'), 5, 'small: 5 evictions');
is(val($v, 'nginx_ratelimit_zone_keys', zone => 'api'), 1, 'api: one key (an empty key takes none)');
is(val($v, 'nginx_ratelimit_zone_evictions_total', zone => 'api'), 0, 'api: no eviction');
for my $f (['nginx_ratelimit_requests', 'counter'], ['nginx_ratelimit_zone_keys', 'gauge'],
           ['nginx_ratelimit_zone_capacity_keys', 'gauge'], ['nginx_ratelimit_zone_evictions', 'counter']) {
    is($fam->{ $f->[0] }{type}, $f->[1], "$f->[0]: TYPE $f->[1]");
    ok(length($fam->{ $f->[0] }{help} // ''), "$f->[0]: HELP");
}
ok(!grep({ /^nginx_ratelimit_redis/ } keys %$v), 'no Redis metrics without ratelimit_redis');

# A reload that drops a zone: the others keep counting from where they were.
$n->reload($zones . $server =~ s/ *location \/later.*\n//r);
($v) = scrape($n, 'after a reload');
check_requests($v, 'after a reload');
is(val($v, 'nginx_ratelimit_zone_keys', zone => 'later'), 'absent', 'a zone no longer configured is not shown');
for (1 .. 2) { my ($st) = req($n, '/a?k=x'); $sent{ 'api ' . ($st eq '200' ? 'passed' : 'rejected') }++ }
($v) = scrape($n, 'after a reload and more requests');
check_requests($v, 'after a reload and more requests');

my ($st) = http_request($n->port, '/metrics', {}, 'POST');
is($st, 405, 'POST /metrics: 405');
$n->stop;

# ------------------------------------------------------------- Redis

my $redis = start_redis(args => ['--enable-debug-command', 'local']);
my $rp    = $redis->port;
my $dead  = free_port();  # nothing listens there

# A server that answers anything with bytes that are not RESP.
my $garbage = IO::Socket::INET->new(LocalAddr => '127.0.0.1', LocalPort => 0, Listen => 16, ReuseAddr => 1)
  or die "listen: $!";
my $gp = $garbage->sockport;
my $gpid = fork // die "fork: $!";
if (!$gpid) {
    $SIG{ALRM} = sub { POSIX::_exit(0) };
    alarm 120;
    while (my $c = $garbage->accept) {
        sysread($c, my $buf, 65536);
        syswrite($c, "?not resp\r\n");
        close $c;
    }
    POSIX::_exit(0);
}
close $garbage;
END { kill 'KILL', $gpid if $gpid; }

# The name has a quote and a backslash: its label value must come back as written.
my $odd = 'r"1\x';
my $redis_conf = <<"EOF" . <<'EOF2';
    ratelimit_redis 'r"1\\\\x' 127.0.0.1:$rp timeout=100ms;
    ratelimit_redis down     127.0.0.1:$dead timeout=100ms;
    ratelimit_redis badauth  127.0.0.1:$rp timeout=100ms password=wrong;
    ratelimit_redis garbage  127.0.0.1:$gp timeout=100ms;
    ratelimit_redis one      127.0.0.1:$rp timeout=100ms max_pending=1;
EOF
    ratelimit_zone rz key=$arg_k rate=100r/s 'redis=r"1\\x';
    ratelimit_zone dz key=$arg_k rate=100r/s redis=down;
    ratelimit_zone az key=$arg_k rate=100r/s redis=badauth;
    ratelimit_zone gz key=$arg_k rate=100r/s redis=garbage;
    ratelimit_zone oz key=$arg_k rate=100r/s redis=one;
    server {
        listen 127.0.0.1:%%PORT%% reuseport;
        add_header X-Pid $pid always;
        ratelimit_on_error deny;
        location /r  { ratelimit zone=rz; empty_gif; }
        location /da { ratelimit zone=dz; ratelimit_on_error allow; empty_gif; }
        location /dd { ratelimit zone=dz; empty_gif; }
        location /dl { ratelimit zone=dz; ratelimit_on_error local; empty_gif; }
        location /az { ratelimit zone=az; empty_gif; }
        location /gz { ratelimit zone=gz; empty_gif; }
        location /oz { ratelimit zone=oz; empty_gif; }
        location = /metrics { ratelimit_metrics; }
    }
EOF2
$n = start_nginx($redis_conf);
# the connections that fail at the workers' start have failed (a request waits for one coming up)
for my $w (['redis="down"', 'reason="refused"'], ['redis="badauth"', 'reason="error_reply"'], ['redis="garbage"', 'reason="protocol"']) {
    wait_metric($n, 'nginx_ratelimit_redis_errors_total', $w, sub { $_[0] >= 1 });
}
wait_metric($n, 'nginx_ratelimit_redis_reconnects_total', ['redis="down"'], sub { $_[0] >= 1 });

%sent = ();
sub count_path {
    my ($zone, $path, $times, $ok, $kind) = @_;
    for (1 .. $times) {
        my ($st) = req($n, $path);
        $sent{ "$zone " . ($st eq $ok ? $kind : "status $st") }++;
    }
}
count_path('rz', "/r?k=a$_", 1, '200', 'passed') for 1 .. 10;
count_path('dz', '/da?k=b', 3, '200', 'error_allowed');
count_path('dz', '/dd?k=b', 2, '503', 'error_denied');
count_path('dz', "/dl?k=l$_", 1, '200', 'error_local') for 1 .. 2;  # decided here: a key each
count_path('az', '/az?k=c', 2, '503', 'error_denied');
count_path('gz', '/gz?k=c', 2, '503', 'error_denied');

($v, $fam) = scrape($n, 'redis');
sub rv { my ($name, $redis, %l) = @_; return val($v, "nginx_ratelimit_redis_$name", redis => $redis, %l) }
is(rv('calls_total', $odd), 10, 'calls: one script run per request sent one at a time');
is(rv('checks_total', $odd), 10, 'checks: one per request');
is(rv('round_trip_seconds_count', $odd), 10, 'round trips: one per script run');
is(rv('round_trip_seconds_bucket', $odd, le => '+Inf'), 10, 'round trips: +Inf bucket = count');
ok(rv('round_trip_seconds_sum', $odd) > 0, 'round trips: a sum');
is(rv('in_flight', $odd), 0, 'nothing in flight once answered');
is(rv('errors_total', $odd, reason => $_), 0, "no $_ error on a healthy Redis") for qw(timeout refused reset protocol error_reply overflow out_of_bounds);
ok(rv('errors_total', 'down', reason => 'refused') >= 1, 'nothing listening: refused')
  or diag(join "\n", map { "$_ $v->{$_}" } grep { /down/ } sort keys %$v);
ok(rv('reconnects_total', 'down') >= 1, 'nothing listening: reconnects');
is(rv('calls_total', 'down'), 0, 'nothing listening: no call sent');
ok(rv('errors_total', 'badauth', reason => 'error_reply') >= 1, 'a wrong password: error_reply (the handshake)');
ok(rv('errors_total', 'garbage', reason => 'protocol') >= 1, 'a server that does not speak RESP: protocol');
is(rv('redirects_total', $odd, kind => $_), 0, "no $_ redirect from a standalone Redis") for qw(moved ask);
for my $f (['calls', 'counter'], ['checks', 'counter'], ['errors', 'counter'], ['reconnects', 'counter'],
           ['in_flight', 'gauge'], ['redirects', 'counter'], ['round_trip_seconds', 'histogram']) {
    is($fam->{"nginx_ratelimit_redis_$f->[0]"}{type}, $f->[1], "redis $f->[0]: TYPE $f->[1]");
}

sub redis_sleeps {
    my ($seconds, $during) = @_;
    my $pid = fork // die "fork: $!";
    if (!$pid) { $redis->cli('DEBUG', 'SLEEP', $seconds); POSIX::_exit(0) }
    ok($redis->wait_asleep, 'Redis sleeps');
    $during->();
    waitpid $pid, 0;
    # the late replies come in: nothing in flight any more
    wait_metric($n, 'nginx_ratelimit_redis_in_flight', [], sub { $_[0] == 0 });
}

# Timeouts: each request sent while Redis sleeps waits its 100 ms, then on_error deny.
redis_sleeps(0.8, sub { count_path('rz', "/r?k=t$_", 1, '503', 'error_denied') for 1 .. 3 });
# Overflow: max_pending=1 per worker, three requests at once: at least two meet in a worker.
my $oz;
redis_sleeps(0.8, sub {
    $oz = run_clients($n->port, sub { "/oz?k=o$_[0]" }, 3, 1, keepalive => 0);
});
$sent{'oz ' . ($_ eq '503' ? 'error_denied' : $_ eq '200' ? 'passed' : "status $_")} += $oz->{$_}
  for grep { !/^:/ } keys %$oz;

($v) = scrape($n, 'redis, after the sleeps');
is(rv('errors_total', $odd, reason => 'timeout'), 3, 'timeouts: one per request that timed out');
# A worker sends at most two script runs before a reply: of the three sequential requests, the
# third waits in its worker's queue if the first two went to the same worker, and times out there
# without being sent. So 2 or 3 of them were sent, and each one sent got its late reply measured.
my $calls = rv('calls_total', $odd);
ok($calls == 12 || $calls == 13, "calls: the timed-out ones were sent, at most two per worker ($calls, 10 before)");
is(rv('round_trip_seconds_count', $odd), $calls, 'round trips: their late replies are measured');
ok(rv('round_trip_seconds_bucket', $odd, le => '0.25') <= 10, 'round trips: the late ones are above 250 ms');
is(rv('in_flight', $odd), 0, 'nothing in flight once the late replies came');
is(rv('errors_total', 'one', reason => 'timeout') + rv('errors_total', 'one', reason => 'overflow'), 3,
   'max_pending=1: each request timed out or overflowed');
ok(rv('errors_total', 'one', reason => 'overflow') >= 1, 'max_pending=1: overflow');

my @got = map { my ($z, $r) = split / /; "$_ " . val($v, 'nginx_ratelimit_requests_total', zone => $z, result => $r) }
  sort keys %sent;
my @want = map { "$_ $sent{$_}" } sort keys %sent;
is_deeply(\@got, \@want, 'redis zones: requests_total by result is exactly what was sent')
  or diag(explain \%sent);

# Redis killed: its connections are reset.
$redis->kill_now('KILL');
my $odd_label = 'redis="' . ($odd =~ s/([\\"])/\\$1/gr) . '"';    # as exposed: r\"1\\x
wait_metric($n, 'nginx_ratelimit_redis_errors_total', [$odd_label, 'reason="reset"'], sub { $_[0] >= 1 });
# Read between two reconnection attempts: an attempt counts its handshake in flight from its
# start until it fails (src/ngx/redis/conn.cpp), a scrape may fall within one.
my $idle = wait_metric($n, 'nginx_ratelimit_redis_in_flight', [$odd_label], sub { $_[0] == 0 });
($v) = scrape($n, 'redis killed');
ok(rv('errors_total', $odd, reason => 'reset') >= 1, 'Redis killed: reset');
ok($idle, 'Redis killed: nothing in flight (between reconnection attempts)');

unlike($n->error_log, qr/\[(alert|crit|emerg)\]/, 'redis: no alert, crit or emerg in the error log');

$n->stop;

# ------------------------------------------------------------- Redis Cluster redirects

my $c = start_redis_cluster(primaries => 3);
$n = start_nginx(<<"EOF");
    ratelimit_redis rc cluster ${\ $c->seeds} timeout=150ms;
    ratelimit_zone cz key=\$arg_k rate=1r/m burst=1000 redis=rc;  # keys that live a minute: new_key scans for them
    server {
        listen 127.0.0.1:%%PORT%% reuseport;
        ratelimit_on_error deny;
        location /c { ratelimit zone=cz; empty_gif; }
        location = /metrics { ratelimit_metrics; }
    }
EOF
my $deadline = time + 5;
sleep 0.05 until (($n->get('/c?k=ready'))[0] // '') eq '200' || time > $deadline;

# A request for key $k: its status, and the primary, slot and name of the Redis key it created.
my %seen;
sub new_key {
    my ($k) = @_;
    my ($st) = $n->get("/c?k=$k");
    my ($new) = grep { !$seen{ $_->[0] }++ } $c->scan('rl:{cz:*');
    return ($st, $new ? ($new->[1], $c->keyslot($new->[0]), $new->[0]) : ());
}
new_key('ready');

# ASK: the slot is migrating and the key has moved; CLUSTER SLOTS still names the source,
# so every request for the key is redirected once.
my ($st0, $from, $slot, $rkey) = new_key('ask');
is($st0, '200', 'cluster: a first request');
my ($to) = grep { $_->port != $from->port } $c->primaries;
$c->begin_migration($slot, $to, $rkey);
my @st = map { ($n->get('/c?k=ask'))[0] } 1 .. 4;
is("@st", '200 200 200 200', 'cluster: requests for a key in migration pass');
($v) = scrape($n, 'cluster, ASK');
is(rv('redirects_total', 'rc', kind => 'ask'), 4, 'cluster: one ASK per request');
$c->finish_migration($slot);

# MOVED: the slot moved; a worker learns it from the first MOVED (or from its periodic refresh
# of the slot map, once a second: then tried again with another slot).
my $moved = 0;
for my $try (1 .. 3) {
    my (undef, $owner, $mslot) = new_key("moved$try");
    my ($dest) = grep { $_->port != $owner->port } $c->primaries;
    $c->migrate_slot($mslot, $dest);
    @st = map { (http_request($n->port, "/c?k=moved$try"))[0] } 1 .. 10;
    is("@st", join(' ', ('200') x 10), "cluster: requests for a key whose slot moved pass (try $try)");
    ($v) = scrape($n, "cluster, MOVED (try $try)");
    $moved = rv('redirects_total', 'rc', kind => 'moved');
    last if $moved > 0;
}
ok($moved >= 1, "cluster: MOVED counted ($moved)");
is(rv('redirects_total', 'rc', kind => 'ask'), 4, 'cluster: no more ASK');
unlike($n->error_log, qr/\[(alert|crit|emerg)\]/, 'cluster: no alert, crit or emerg in the error log');

# The examples' scrape configuration and alerting rules are valid.
my $examples = repo_root() . '/examples';
for my $check (['rules', 'ratelimit-alerts.yml'], ['config', 'prometheus.yml']) {
    my $out = `cd $examples && $PROMTOOL check @$check 2>&1`;
    is($?, 0, "promtool check @$check") or diag($out);
}
done_testing();
