# limit_req and this module side by side: one nginx, locations per setting set (one limited by
# limit_req, the others by ratelimit algo=leaky, algo=gcra and algo=leaky in Redis, the same
# rate, burst and delay), the same timed requests sent to all at the same moment; they must make
# the same decisions (PASSED, DELAYED, REJECTED) with the same delays. The differences that are
# meant are listed in %KNOWN and asserted too (against leaky in shared memory).
#
# Why leaky: limit_req is a leaky bucket as a meter. It keeps (excess, last) per key, the leaky
# algorithm keeps (level, last leak): the same state, and excess = level - 1 (a new key's first
# request stores excess 0, a bucket holding that one request). gcra and token make identical
# decisions (a unit test on random timelines); gcra, the default, runs here too.
#
# Timing: decisions depend on when requests arrive. Every sequence below is planned against a
# model of that bucket, and the test first checks that no planned request is within 0.3 units
# of a threshold (burst, delay=, empty), i.e. 60 ms at 5r/s, 150 ms at 2r/s: a loaded machine
# shifts arrivals by far less, so the decisions do not depend on the load.
# Delays are compared with each other (limit_req's computed from the excess it logs, ours is
# $ratelimit_delay), not with the planned times; the waits measured ($request_time) must be at
# least the delay and close to limit_req's.
# runs alone: it measures time (delays against limit_req's)
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use RLTest;
use Test::More;
use IO::Select;
use IO::Socket::INET;
use Time::HiRes qw(sleep time);

# The intended differences, each with why: each is asserted below (known_ok), and the end checks
# that each was.
my %KNOWN = (
    status    => 'a rejection is 503 with limit_req (limit_req_status), 429 here (ratelimit_status): '
               . '429 is the status RFC 6585 gives to rate limiting; 503 would say the server is down',
    headers   => 'limit_req sends no rate-limit header; here RateLimit-Policy and RateLimit on limited '
               . 'responses and Retry-After on every rejection: a client can tell when to come back',
    defaults  => 'without nodelay or delay=, limit_req delays all excess (delay=0); here the default is '
               . 'nodelay: it was the behaviour before delay= existed, existing configurations keep it',
    close     => 'a client that closes its connection while delayed: limit_req keeps its unit, here it is '
               . 'given back: the request was never served',
    precision => 'limit_req keeps a rate as whole 1/1000 requests per second: 2r/m is 0.033 r/s, one '
               . 'request every 30.3 s; here exactly one every 30 s: the rate is kept as an exact fraction',
    empty_key => '$limit_req_status is empty when the key is empty; $ratelimit_status is EXEMPT: an '
               . 'exempted request is told apart from one no limit applies to',
    config    => 'limit_req refuses burst=0, delay=0 and rates in r/h; here all three are valid: 0 is '
               . 'written out as any other value, and rates run from r/s to r/d',
    log       => 'a rejection is logged with the excess there ("limiting requests, excess: 1.000 by zone"), '
               . 'with the wait here ("limiting request by zone ..., retry in 0.200s"); a delay is logged '
               . 'alike, plus the wait here ("delaying request, excess: 1.000, by zone ..., delay 0.200s"): '
               . 'the wait is what a client sees',
);
my %asserted;
sub known_ok {
    my ($what, $name, $ok) = @_;    # $ok last: a failed match in list context is no argument
    die "unknown difference $what" unless $KNOWN{$what};
    $asserted{$what} = 1;
    ok($ok, "known difference ($what): $name") or diag($KNOWN{$what});
}

# ------------------------------------------------------------------ the model of the bucket

# Decides a sequence as limit_req and ratelimit algo=leaky both should. Zones: { r (requests a
# second), burst, delay (undef: nodelay) }; steps: [ms, [ [key of zone 0, key of zone 1 ...], ...]].
# Returns ([ [class, delay ms], ... ] in order, the smallest distance in units of a planned
# request's level to a threshold: the burst, the delay, and 0 where the bucket empties).
sub model {
    my ($zones, $steps) = @_;
    my (%st, @out);
    my $margin = 99;
    for my $s (@$steps) {
        my ($t, $reqs) = @$s;
        for my $keys (@$reqs) {
            my ($ok, @lvl) = (1);
            for my $zi (0 .. $#$zones) {
                my $z = $zones->[$zi];
                my $e = $st{"$zi $keys->[$zi]"} //= { level => 0, t => undef };
                # The level before this request, undrained below 0 to measure its distance.
                my $u = defined $e->{t} ? $e->{level} - ($t - $e->{t}) / 1000 * $z->{r} : -99;
                # Requests of one step arrive a few ms apart, and drain only lowers the level:
                # in a step that began on an empty bucket, a level equal to a threshold passes
                # it whatever the timing. After a step that began on a partly full one, the
                # level also carries the jitter of earlier arrivals: equality is a knife edge.
                my $same_step = defined $e->{t} && $e->{t} == $t;
                $e->{exact} = $u <= 0 unless $same_step;
                for my $th (0, $z->{burst}, defined $z->{delay} ? $z->{delay} : ()) {
                    next if $same_step && $e->{exact} && abs($u - $th) < 1e-9;
                    next if $u == -99;
                    $margin = abs($u - $th) if abs($u - $th) < $margin;
                }
                push @lvl, $u > 0 ? $u : 0;
                $ok = 0 if $lvl[-1] > $z->{burst} + 1e-9;
            }
            my $delay = 0;
            if ($ok) {
                for my $zi (0 .. $#$zones) {
                    my $z = $zones->[$zi];
                    my $e = $st{"$zi $keys->[$zi]"};
                    if (defined $z->{delay} && $lvl[$zi] > $z->{delay} + 1e-9) {
                        my $d = ($lvl[$zi] - $z->{delay}) * 1000 / $z->{r};
                        $delay = $d if $d > $delay;
                    }
                    @$e{qw(level t)} = ($lvl[$zi] + 1, $t);
                }
            }
            push @out, [!$ok ? 'REJECTED' : $delay > 0 ? 'DELAYED' : 'PASSED', $delay];
        }
    }
    return (\@out, $margin);
}

# ------------------------------------------------------------------ the setting sets

# The locations of each set: /lr/NAME (limit_req), /rl/NAME, /gc/NAME, /rd/NAME (ratelimit).
my @SIDES = qw(lr rl gc rd);
my %SIDES = (lr => 'limit_req', rl => 'leaky', gc => 'gcra', rd => 'leaky in Redis');

# Steps for one key: [ms, count] -> [ms, [[key] x count]].
sub one_key { return [map { my ($t, $n) = @$_; [$t, [map { ['k'] } 1 .. $n]] } @_] }

# Concurrent bursts and gaps: at 5r/s and at 2r/s, for each setting below, no request is within
# 0.4 units of a threshold.
my $MAIN = one_key([0, 6], [300, 2], [1200, 1], [1750, 4], [2700, 1], [3300, 3], [4250, 2]);

# Zone fields: rate (the text), r (requests a second), burst, delay (a number, 'nodelay');
# key: which request argument keys it (k by default). Set fields: level (both log levels),
# dry (both dry runs), defaults (neither nodelay nor delay= written: the defaults differ).
my @SETS = (
    { name => 'nodelay', zones => [{ rate => '5r/s', r => 5, burst => 3, delay => 'nodelay' }], steps => $MAIN },
    { name => 'delay0', level => 'warn', zones => [{ rate => '5r/s', r => 5, burst => 3, delay => 0 }], steps => $MAIN },
    { name => 'delayn', level => 'info', zones => [{ rate => '5r/s', r => 5, burst => 5, delay => 2 }], steps => $MAIN },
    { name => 'burst0', zones => [{ rate => '5r/s', r => 5, burst => 0, delay => 0 }], steps => $MAIN },
    { name => 'perminute', level => 'notice', zones => [{ rate => '120r/m', r => 2, burst => 2, delay => 1 }], steps => $MAIN },
    # Two limits with different keys (a client k, its group g): the longest delay applies (a's
    # at 0 ms, g's later), and a request that one rejects consumes from neither (k1's 4th at
    # 0 ms, rejected by a, would else cost g a unit). A step holds one client's requests: the
    # order of requests of different clients arriving together is not defined.
    { name => 'multi',
      zones => [{ rate => '5r/s', r => 5, burst => 2, delay => 0, key => 'k' },
                { rate => '2r/s', r => 2, burst => 5, delay => 2, key => 'g' }],
      steps => [map { my ($t, $k, $count) = @$_; [$t, [map { [$k, 'g'] } 1 .. $count]] }
                [0, k1 => 4], [150, k2 => 1], [750, k3 => 2], [1400, k2 => 2],
                [2150, k1 => 1], [2750, k3 => 3], [3450, k2 => 1], [4250, k1 => 2]] },
    { name => 'dryrun', dry => 1, zones => [{ rate => '5r/s', r => 5, burst => 2, delay => 0 }],
      steps => one_key([0, 5], [300, 2], [1100, 3]) },
    { name => 'defaults', defaults => 1, zones => [{ rate => '5r/s', r => 5, burst => 3, delay => 0 }],
      steps => one_key([0, 3], [700, 2]) },
);

# The limit_req and ratelimit configuration of the sets.
my ($zones_conf, $locs_conf) = ('', '');
for my $set (@SETS) {
    my $name = $set->{name};
    my ($lr, $rl) = ('', '');
    my $zi = 0;
    for my $z (@{ $set->{zones} }) {
        my $key = '$arg_' . ($z->{key} // 'k');
        $zones_conf .= "    limit_req_zone $key zone=lr_${name}_$zi:1m rate=$z->{rate};\n";
        $zones_conf .= "    ratelimit_zone rl_${name}_$zi key=$key rate=$z->{rate} burst=$z->{burst} algo=leaky;\n";
        $zones_conf .= "    ratelimit_zone gc_${name}_$zi key=$key rate=$z->{rate} burst=$z->{burst} algo=gcra;\n";
        $zones_conf .= "    ratelimit_zone rd_${name}_$zi key=$key rate=$z->{rate} burst=$z->{burst} algo=leaky redis=r;\n";
        $lr .= " limit_req zone=lr_${name}_$zi" . ($z->{burst} ? " burst=$z->{burst}" : '');
        $rl .= " ratelimit zone=rl_${name}_$zi";
        if (!$set->{defaults}) {
            $lr .= $z->{delay} eq 'nodelay' ? ' nodelay' : $z->{delay} ? " delay=$z->{delay}" : '';
            $rl .= $z->{delay} eq 'nodelay' ? ' nodelay' : " delay=$z->{delay}";
        }
        $lr .= ';';
        $rl .= ';';
        $z->{delay} = undef if $z->{delay} eq 'nodelay';
        $zi++;
    }
    if ($set->{level}) {
        $lr .= " limit_req_log_level $set->{level};";
        $rl .= " ratelimit_log_level $set->{level};";
    }
    if ($set->{dry}) {
        $lr .= ' limit_req_dry_run on;';
        $rl .= ' ratelimit_dry_run on;';
    }
    $locs_conf .= "        location /lr/$name {$lr empty_gif; }\n";
    $locs_conf .= "        location /rl/$name {$rl empty_gif; }\n";
    for my $side (qw(gc rd)) {
        (my $lines = $rl) =~ s/zone=rl_/zone=${side}_/g;
        $locs_conf .= "        location /$side/$name {$lines empty_gif; }\n";
    }
}

# No planned request is on a knife edge.
for my $set (@SETS) {
    my ($out, $margin) = model($set->{zones}, $set->{steps});
    cmp_ok($margin, '>=', 0.3, "$set->{name}: every planned request is at least 0.3 units from a threshold");
    $set->{model} = $out;
}

# ------------------------------------------------------------------ the differences' settings

my $redis = start_redis();
my $rp = $redis->port;
my $conf = <<"EOF2";
    # A generous timeout: a verdict must never come from ratelimit_on_error here.
    ratelimit_redis r 127.0.0.1:$rp timeout=2s;
    ratelimit_zone warm key=\$arg_k rate=1000r/s redis=r;
$zones_conf
    # A client closing while delayed (2r/s: a unit is 500 ms).
    limit_req_zone \$arg_k zone=lr_close:1m rate=2r/s;
    ratelimit_zone rl_close key=\$arg_k rate=2r/s burst=1 algo=leaky;
    # Rate precision: 2r/m.
    limit_req_zone \$arg_k zone=lr_precision:1m rate=2r/m;
    ratelimit_zone rl_precision key=\$arg_k rate=2r/m algo=leaky;

    log_format cmp '\$uri \$arg_id \$status \$limit_req_status \$ratelimit_status \$ratelimit_delay \$request_time \$msec';
    server {
        listen 127.0.0.1:%%PORT%%;
        access_log %%DIR%%/access.log cmp;
$locs_conf
        location /lr/close { limit_req zone=lr_close burst=1; empty_gif; }
        location /rl/close { ratelimit zone=rl_close delay=0; empty_gif; }
        location /lr/precision { limit_req zone=lr_precision; empty_gif; }
        location /rl/precision { ratelimit zone=rl_precision; empty_gif; }
        location /warm {
            ratelimit zone=warm;
            add_header X-Who \$pid always;
            add_header X-Status \$ratelimit_status always;
            empty_gif;
        }
    }
EOF2

# What limit_req refuses and this module takes (before starting anything).
{
    my $zone = "limit_req_zone \$arg_k zone=z:1m rate=5r/s; ratelimit_zone y key=\$arg_k rate=5r/s;\n";
    my $loc = sub { "$zone server { listen 127.0.0.1:%%PORT%%; location / { $_[0] empty_gif; } }" };
    my ($rc, $out) = nginx_t($loc->('limit_req zone=z burst=0;'));
    known_ok('config', 'limit_req refuses burst=0', $rc != 0 && $out =~ /invalid burst value "burst=0"/);
    ($rc, $out) = nginx_t($loc->('limit_req zone=z burst=2 delay=0;'));
    known_ok('config', 'limit_req refuses delay=0', $rc != 0 && $out =~ /invalid delay value "delay=0"/);
    ($rc, $out) = nginx_t("limit_req_zone \$arg_k zone=z:1m rate=5r/h;");
    known_ok('config', 'limit_req refuses r/h', $rc != 0 && $out =~ /invalid rate "rate=5r\/h"/);
    ($rc, $out) = nginx_t("ratelimit_zone y key=\$arg_k rate=5r/h burst=0;\n"
        . "server { listen 127.0.0.1:%%PORT%%; location / { ratelimit zone=y burst=0 delay=0; empty_gif; } }");
    known_ok('config', 'ratelimit takes burst=0, delay=0 and r/h', $rc == 0) or diag($out);
}

my $n = start_nginx($conf, log_level => 'info');
ok(defined $n->wait_decided(sub { '/warm?k=' . fresh_key('warm') }), 'every worker decides in Redis');

# ------------------------------------------------------------------ the client

# Sends each request of @$reqs ({ id, path, at (seconds from the start), close_at }) at its
# time on a connection opened beforehand (so a request is one write), reads every response,
# closes a connection at close_at if it has no response by then. Requests due at the same time
# are written in list order, back to back. Returns { id => { status, h, closed } }.
sub run_schedule {
    my ($reqs) = @_;
    my @q = map { $reqs->[$_] } sort { $reqs->[$a]{at} <=> $reqs->[$b]{at} || $a <=> $b } 0 .. $#$reqs;
    my (%res, %of);
    for my $r (@q) {
        $r->{sock} = IO::Socket::INET->new(PeerAddr => '127.0.0.1', PeerPort => $n->port, Proto => 'tcp')
            or die "connect: $!";
        $r->{buf} = '';
        $of{ fileno $r->{sock} } = $r;
    }
    my $sel = IO::Select->new;
    my $t0 = time + 0.2;
    my $deadline = $t0 + $q[-1]{at} + 15;
    my $i = 0;
    my @open;
    while (time < $deadline) {
        while ($i < @q && time >= $t0 + $q[$i]{at}) {
            my $r = $q[$i++];
            syswrite($r->{sock}, "GET $r->{path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n");
            $sel->add($r->{sock});
            push @open, $r;
        }
        for my $r (grep { defined $_->{close_at} && !$_->{done} && time >= $t0 + $_->{close_at} } @open) {
            $sel->remove($r->{sock});
            close $r->{sock};
            $r->{done} = 1;
            $res{ $r->{id} } = { closed => 1, status => 'closed', h => {} };
        }
        @open = grep { !$_->{done} } @open;
        last if $i == @q && !@open;
        my $next = $i < @q ? $t0 + $q[$i]{at} : time + 0.05;
        $next = $t0 + $_->{close_at} for grep { defined $_->{close_at} && $t0 + $_->{close_at} < $next } @open;
        my $wait = $next - time;
        $wait = 0.05 if $wait > 0.05;
        $wait = 0 if $wait < 0;
        if (!$sel->count) {    # can_read returns at once on an empty set
            sleep $wait;
            next;
        }
        for my $s ($sel->can_read($wait)) {
            my $r = $of{ fileno $s };
            next if sysread($s, $r->{buf}, 65536, length $r->{buf});
            $sel->remove($s);
            close $s;
            $r->{done} = 1;
            my ($head) = split /\r\n\r\n/, $r->{buf}, 2;
            my ($status) = ($head // '') =~ m{^HTTP/1\.\d (\d{3})};
            my %h;
            for (split /\r\n/, $head // '') { $h{ lc $1 } = $2 if /^([^:]+):\s*(.*?)\s*$/ }
            $res{ $r->{id} } = { status => $status // 'ERR', h => \%h };
        }
    }
    return \%res;
}

# ------------------------------------------------------------------ the schedule

my (@reqs, %step_ids);
my $offset = 0;
for my $set (@SETS) {
    my $name = $set->{name};
    for my $si (0 .. $#{ $set->{steps} }) {
        my ($t, $reqs) = @{ $set->{steps}[$si] };
        for my $ri (0 .. $#$reqs) {
            my $id = "$name-$si-$ri";
            my %args = (k => "$name-$reqs->[$ri][0]");
            $args{g} = "$name-$reqs->[$ri][1]" if defined $reqs->[$ri][1];
            my $q = join '&', (map { "$_=$args{$_}" } sort keys %args), "id=$id";
            # Which side is written first rotates.
            my @sides = (@SIDES, @SIDES)[$ri % 4 .. $ri % 4 + 3];
            push @reqs, map { { id => "$_:$id", path => "/$_/$name?$q", at => $offset + $t / 1000 } } @sides;
            push @{ $step_ids{$name}[$si] }, $id;
        }
    }
    $offset += 0.04;    # sets start 40 ms apart, not all in the same millisecond
}

# The client that closes (2r/s, burst 1, delay=0): A passes at 0; B, 20 ms later, is delayed by
# about 490 ms; B's client closes at 150 ms; C at 300 ms. limit_req kept B's unit: the level is
# 2 - 0.6 = 1.4 > 1, C is rejected. Here B's unit was given back: 0.4, C is delayed ~200 ms.
for my $side (qw(lr rl)) {
    push @reqs, { id => "$side:close-A", path => "/$side/close?k=c&id=close-A", at => 0 },
                { id => "$side:close-B", path => "/$side/close?k=c&id=close-B", at => 0.02, close_at => 0.15 },
                { id => "$side:close-C", path => "/$side/close?k=c&id=close-C", at => 0.3 };
}

# Rate precision: 2r/m. A second request 30.15 s after the first: limit_req drains
# 33 * 30150 / 1000 = 994 of 1000 and rejects it (it admits from 30.303 s on); exactly 1.005
# units have drained here, it passes. Both sides see the same arrival times, 150 ms from
# either end of that window.
for my $side (qw(lr rl)) {
    push @reqs, { id => "$side:prec-1", path => "/$side/precision?k=p&id=prec-1", at => 0.5 },
                { id => "$side:prec-2", path => "/$side/precision?k=p&id=prec-2", at => 30.65 };
}

# An empty key.
push @reqs, map { { id => "$_:empty", path => "/$_/nodelay?k=&id=empty", at => 4.5 } } qw(lr rl);

my $res = run_schedule(\@reqs);
is(scalar(grep { !$res->{ $_->{id} } } @reqs), 0, 'every request got a response (or was closed on purpose)');

# The access log: "uri id status limit_req_status ratelimit_status ratelimit_delay request_time
# msec"; a request started at msec - request_time.
my %log;
my $want = @reqs;
for (1 .. 60) {
    %log = ();
    for (split /\n/, slurp($n->dir . '/access.log')) {
        my ($uri, $id, $status, $lrs, $rls, $delay, $rt, $msec) = split / /;
        my ($side) = $uri =~ m{^/(lr|rl|gc|rd)/} or next;
        $log{"$side:$id"} = { status => $status, class => $side eq 'lr' ? $lrs : $rls,
                              delay => $delay, rt => int($rt * 1000 + 0.5),
                              start => int($msec * 1000 + 0.5) - int($rt * 1000 + 0.5) };
    }
    last if keys %log >= $want;
    sleep 0.05;
}
is(scalar(keys %log), $want, 'every request is in the access log');

# The error log: each request's limiting line, and limit_req's delay computed from its excess
# exactly as limit_req computes it: (excess - delay) * 1000 / rate, in 1/1000 units.
my %elog;
for (split /\n/, $n->error_log) {
    next unless m{\[(\w+)\] .*?: \*\d+ (.*?), client: .*?request: "GET /(lr|rl|gc|rd)/\w+\?[^"]*\bid=([\w-]+)};
    push @{ $elog{"$3:$4"} }, { level => $1, msg => $2 };
}
my %rate_milli = map { $_->{name} => [map { int($_->{r} * 1000) } @{ $_->{zones} }] } @SETS;
sub lr_delay {
    my ($set, $id) = @_;
    for my $l (@{ $elog{"lr:$id"} || [] }) {
        next unless $l->{msg} =~ /^delaying request(?:, dry run)?, excess: (\d+)\.(\d{3}), by zone "\w+_(\d)"/;
        my $z = $set->{zones}[$3];
        return int(($1 * 1000 + $2 - ($z->{delay} // 0) * 1000) * 1000 / $rate_milli{ $set->{name} }[$3]);
    }
    return 0;
}

# ------------------------------------------------------------------ the same decisions

my ($max_diff, $max_skew, %skew) = (0, 0);
for my $set (@SETS) {
    my $name = $set->{name};
    my $dry = $set->{dry} ? '_DRY_RUN' : '';
    my $mi = 0;
    for my $si (0 .. $#{ $step_ids{$name} }) {
        my @ids = @{ $step_ids{$name}[$si] };
        my @model = map { $set->{model}[$mi++] } @ids;
        my $cls = sub { my ($side) = @_; [sort map { $log{"$side:$_"}{class} // '?' } @ids] };
        my $expect = [sort map { $_->[0] eq 'PASSED' ? $_->[0] : "$_->[0]$dry" } @model];
        my $t = $set->{steps}[$si][0];
        is_deeply($cls->('lr'), $expect, "$name, step at ${t}ms: limit_req decides as the model");
        my @dl = sort { $a <=> $b } map { lr_delay($set, $_) } @ids;
        my $rt = sub {
            my ($side) = @_;
            return sort { $a <=> $b } map { $log{"$side:$_"}{rt} } grep { ($log{"$side:$_"}{class} // '') eq 'DELAYED' } @ids;
        };
        my @lr_rt = $rt->('lr');
        for my $side (qw(rl gc rd)) {
            # A delay depends on when the request and the ones queued before it arrived: one side
            # reading a request some ms after the other (the test or a worker descheduled) moves
            # it by up to twice that. The skew is what nginx saw (ms), over the set so far. The
            # 10 ms cover what it does not see: limit_req's clock is the event loop's cached
            # millisecond, ours is read at each decision, in microseconds.
            $skew{$name}{$side} //= 0;
            for my $id (@ids) {
                my ($a, $b) = ($log{"lr:$id"}{start}, $log{"$side:$id"}{start});
                next unless defined $a && defined $b;
                $skew{$name}{$side} = abs($a - $b) if abs($a - $b) > $skew{$name}{$side};
            }
            my $skew = $skew{$name}{$side};
            $max_skew = $skew if $skew > $max_skew;
            my $algo = $SIDES{$side};
            if ($set->{defaults}) {
                # limit_req: delay=0 (the model); ratelimit: nodelay, every admitted request passes.
                my $nodelay = [sort map { $_->[0] eq 'REJECTED' ? 'REJECTED' : 'PASSED' } @model];
                known_ok('defaults', "step at ${t}ms: $algo passes what limit_req delays", eq_array($cls->($side), $nodelay))
                    or diag("$algo: @{ $cls->($side) }");
                next;
            }
            is_deeply($cls->($side), $cls->('lr'), "$name, step at ${t}ms: $algo decides as limit_req");

            # Delays: sorted within the step (its requests arrive together, in any order).
            my @dr = sort { $a <=> $b } map { $log{"$side:$_"}{delay} // -1 } @ids;
            my $worst = 0;
            for my $j (0 .. $#dl) {
                my $d = abs($dl[$j] - $dr[$j]);
                $worst = $d if $d > $worst;
            }
            $max_diff = $worst if $worst > $max_diff;
            cmp_ok($worst, '<=', 10 + 2 * $skew, "$name, step at ${t}ms: delays under $algo within 10 ms of limit_req's (+ 2 x skew $skew ms)")
                or diag("limit_req: @dl; $algo: @dr");
            next if $dry;
            # A delayed request really waited, about as long as under limit_req.
            my @side_rt = $rt->($side);
            my @dd = grep { $_ > 0 } @dr;
            my $waited = @side_rt == @dd && !grep { $side_rt[$_] < $dd[$_] - 2 } 0 .. $#dd;
            ok($waited, "$name, step at ${t}ms: $algo: each delayed request waited its delay")
                or diag("waited @side_rt, delays @dd");
            # Timers of a loaded machine fire late, not always alike on both sides: 100 ms.
            my $close = @side_rt == @lr_rt && !grep { abs($side_rt[$_] - $lr_rt[$_]) > 100 + 2 * $skew } 0 .. $#side_rt;
            ok($close, "$name, step at ${t}ms: $algo waited within 100 ms of limit_req's waits (+ 2 x skew)")
                or diag("$algo @side_rt, limit_req @lr_rt");
        }
    }
}
diag("largest delay difference in a step: $max_diff ms; largest arrival skew: $max_skew ms");

# Every set met every class it was meant to (the test can tell them apart).
my %classes = map { my $c = $_->[0]; ($c => 1) } map { @{ $_->{model} } } grep { !$_->{dry} } @SETS;
is(join(' ', sort keys %classes), 'DELAYED PASSED REJECTED', 'the sequences include passed, delayed and rejected requests');

# Log levels: rejections at the level set, delays one below (info stays info), on both sides.
my %below = (error => 'warn', warn => 'notice', notice => 'info', info => 'info');
for my $set (grep { !$_->{dry} && !$_->{defaults} } @SETS) {
    my $level = $set->{level} // 'error';
    my %bad;
    for my $id (map { @$_ } @{ $step_ids{ $set->{name} } }) {
        for my $side (@SIDES) {
            my $class = $log{"$side:$id"}{class} // '';
            next unless $class eq 'DELAYED' || $class eq 'REJECTED';
            my $want_level = $class eq 'DELAYED' ? $below{$level} : $level;
            my ($l) = grep { $_->{msg} =~ ($class eq 'DELAYED' ? qr/^delaying/ : qr/^limiting/) } @{ $elog{"$side:$id"} || [] };
            $bad{$side}{$id} = $l ? $l->{level} : 'none' if !$l || $l->{level} ne $want_level;
        }
    }
    for my $side (@SIDES) {
        my $b = $bad{$side} || {};
        is(join(' ', map { "$_: $b->{$_}" } sort keys %$b), '',
            $side eq 'lr' ? "$set->{name}: limit_req logs rejections at $level, delays at $below{$level}"
                          : "$set->{name}: $SIDES{$side} logs them at the same levels");
    }
}

# ------------------------------------------------------------------ the known differences

# Status codes and headers of every limited request.
{
    my (%lr_codes, %rl_codes, %bad);
    for my $set (grep { !$_->{dry} && !$_->{defaults} } @SETS) {
        for my $id (map { @$_ } @{ $step_ids{ $set->{name} } }) {
            my ($l, $r) = ($res->{"lr:$id"}, $res->{"rl:$id"});
            my $class = $log{"rl:$id"}{class} // '';
            $lr_codes{ ($log{"lr:$id"}{class} // '') . " $l->{status}" }++;
            $rl_codes{"$class $r->{status}"}++;
            $bad{"limit_req header on $id"}++ if grep { /^(retry-after|ratelimit|x-ratelimit)/ } keys %{ $l->{h} };
            $bad{"no RateLimit on $id"}++ unless defined $r->{h}{ratelimit} && defined $r->{h}{'ratelimit-policy'};
            if ($class eq 'REJECTED') {
                $bad{"Retry-After on $id"}++ unless ($r->{h}{'retry-after'} // '') =~ /^[1-9]\d*$/;
            } else {
                $bad{"Retry-After on $id"}++ if defined $r->{h}{'retry-after'};
            }
        }
    }
    known_ok('status', 'limit_req rejects with 503', join(' ', sort keys %lr_codes) eq 'DELAYED 200 PASSED 200 REJECTED 503')
        or diag(join ', ', sort keys %lr_codes);
    known_ok('status', 'ratelimit rejects with 429', join(' ', sort keys %rl_codes) eq 'DELAYED 200 PASSED 200 REJECTED 429')
        or diag(join ', ', sort keys %rl_codes);
    known_ok('headers', 'no header from limit_req; RateLimit on every ratelimit response, Retry-After on its rejections', !%bad)
        or diag(join ', ', sort keys %bad);
}

# Log lines.
{
    my %first;    # side, kind -> the first such line of the sets
    for my $id (map { @$_ } map { @{ $step_ids{$_} } } qw(delay0 nodelay)) {
        for my $side (qw(lr rl)) {
            for my $l (@{ $elog{"$side:$id"} || [] }) {
                my ($kind) = $l->{msg} =~ /^(limiting|delaying)/ or next;
                $first{"$side $kind"} //= $l->{msg};
            }
        }
    }
    my %want = (
        'lr limiting' => qr/^limiting requests, excess: \d+\.\d{3} by zone "lr_\w+"$/,
        'lr delaying' => qr/^delaying request, excess: \d+\.\d{3}, by zone "lr_\w+"$/,
        'rl limiting' => qr/^limiting request by zone "rl_\w+", retry in \d+\.\d{3}s$/,
        'rl delaying' => qr/^delaying request, excess: \d+\.\d{3}, by zone "rl_\w+", delay \d+\.\d{3}s$/,
    );
    my @bad = grep { ($first{$_} // '') !~ $want{$_} } sort keys %want;
    known_ok('log', 'rejection and delay lines', !@bad) or diag(map { "$_: " . ($first{$_} // 'none') . "\n" } @bad);
}

# The client that closed while delayed.
{
    my @got = map { my $s = $_; join ' ', map { $log{"$s:close-$_"}{class} // '-' } qw(A B C) } qw(lr rl);
    is($got[0], 'PASSED DELAYED REJECTED', 'close: limit_req delays B and rejects C');
    is(($log{'lr:close-B'}{status} // '') . ' ' . ($log{'rl:close-B'}{status} // ''), '499 499', 'close: B ends with 499 on both');
    known_ok('close', 'ratelimit gave back B\'s unit: C is delayed, not rejected', $got[1] eq 'PASSED DELAYED DELAYED')
        or diag("ratelimit: $got[1]");
    my $d = $log{'rl:close-C'}{delay} // -1;
    ok($d =~ /^\d+$/ && $d > 100 && $d < 300, "close: C's delay is about 200 ms ($d)");
}

# Rate precision.
{
    my @got = map { my $s = $_; join ' ', map { $log{"$s:prec-$_"}{class} // '-' } 1, 2 } qw(lr rl);
    known_ok('precision', '2r/m, 30.15 s apart: limit_req rejects, ratelimit passes',
        $got[0] eq 'PASSED REJECTED' && $got[1] eq 'PASSED PASSED') or diag("limit_req: $got[0]; ratelimit: $got[1]");
}

# An empty key.
known_ok('empty_key', 'empty key: $limit_req_status empty, $ratelimit_status EXEMPT',
    ($log{'lr:empty'}{class} // '') eq '-' && ($log{'rl:empty'}{class} // '') eq 'EXEMPT')
    or diag(($log{'lr:empty'}{class} // 'none') . ' / ' . ($log{'rl:empty'}{class} // 'none'));

is(join(' ', sort grep { !$asserted{$_} } keys %KNOWN), '', 'every known difference is asserted');

done_testing;
