# Shaping (delay=N, max_delay=TIME), in shared memory, in Redis and in a 3-primary Redis
# Cluster: the delays limit_req makes for the same rate, burst and delay; the wait is a timer
# (the worker serves others meanwhile); max_delay rejects with a Retry-After after which the
# request passes, consuming nothing; the longest delay of several limits, all or nothing; a
# client that closes while delayed gets its units back (499); a graceful stop lets delayed
# requests finish; dry run; $ratelimit_status, $ratelimit_delay, headers, log levels.
# Times: each delay is checked against the delay the module reports ($ratelimit_delay), and
# that one against the formula within the spread of the requests' own arrival (measured here).
# runs alone: it measures time (delays)
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use RLTest;
use Test::More;
use IO::Select;
use IO::Socket::INET;
use Time::HiRes qw(time sleep);

# The locations of one store: zone names get the store's suffix, zones its redis= parameter.
sub http_of {
    my ($sfx, $redis) = @_;
    my $r = $redis ? " redis=$redis" : '';
    my $z = '';
    $z .= "    ratelimit_zone $_->[0]$sfx key=\$arg_k $_->[1]$r;\n" for (
        ['a',  'rate=2r/s burst=4'],      # limit_req zone rate=2r/s, burst=4 delay=1
        ['m',  'rate=2r/s burst=5'],      # max_delay
        ['m2', 'rate=6r/m burst=9'],
        ['c',  'rate=6r/m burst=3'],      # client closes
        ['dz', 'rate=1r/s burst=5'],      # dry run
        ['t1', 'rate=2r/s burst=3'],      # two limits
        ['t2', 'rate=1r/s burst=3'],
        ['g',  'rate=1r/s burst=2'],      # graceful stop
        map({ ["l_$_", 'rate=1r/m burst=2'] } qw(error warn notice info)),
    );
    # Redis stores: the same two limits with t1 in shared memory.
    my $mix = '';
    if ($redis) {
        $z .= "    ratelimit_zone tm$sfx key=\$arg_k rate=2r/s burst=3;\n";
        $z .= "    ratelimit_zone t2m$sfx key=\$arg_k rate=1r/s burst=3$r;\n";
        $mix = "        location /mix { ratelimit zone=tm$sfx delay=0; ratelimit zone=t2m$sfx delay=0 max_delay=1500ms; empty_gif; }\n"
          . "        location /tmpeek { ratelimit zone=tm$sfx quantity=0; empty_gif; }\n";
    }
    my $l = '';
    $l .= "        location /l_$_ { ratelimit_log_level $_; ratelimit zone=l_$_$sfx delay=0; empty_gif; }\n"
      for qw(error warn notice info);
    return <<"EOF2";
$z
    log_format delays '\$uri \$arg_k \$status \$ratelimit_status \$ratelimit_delay';
    server {
        listen 127.0.0.1:%%PORT%%;
        access_log %%DIR%%/access.log delays;
        add_header X-Status \$ratelimit_status always;
        add_header X-Delay "d=\$ratelimit_delay" always;
        location /a     { ratelimit zone=a$sfx burst=4 delay=1; empty_gif; }
        location /m     { ratelimit zone=m$sfx delay=0 max_delay=700ms; empty_gif; }
        location /mpeek { ratelimit zone=m$sfx quantity=0; empty_gif; }
        location /m2    { ratelimit zone=m2$sfx delay=0 max_delay=15s quantity=\$arg_q; empty_gif; }
        location /c     { ratelimit zone=c$sfx delay=0; empty_gif; }
        location /cpeek { ratelimit zone=c$sfx quantity=0; empty_gif; }
        location /dry   { ratelimit_dry_run on; ratelimit zone=dz$sfx delay=0; empty_gif; }
        location /two   { ratelimit zone=t1$sfx delay=0; ratelimit zone=t2$sfx delay=0 max_delay=1500ms; empty_gif; }
        location /t1peek { ratelimit zone=t1$sfx quantity=0; empty_gif; }
        location /g     { ratelimit zone=g$sfx delay=0; empty_gif; }
        location /nodelay { ratelimit zone=a$sfx nodelay; empty_gif; }
        location /token { ratelimit_algo token; ratelimit zone=a$sfx delay=0; empty_gif; }
        location /leaky { ratelimit_algo leaky; ratelimit zone=a$sfx delay=0; empty_gif; }
        location /free  { empty_gif; }
$mix$l    }
EOF2
}

# Each path on its own connection, sent one after the other without waiting for answers:
# (the milliseconds the sending took, the requests).
sub send_all {
    my ($port, @paths) = @_;
    my @c;
    my $t0 = time;
    for my $p (@paths) {
        my $s = IO::Socket::INET->new(PeerAddr => '127.0.0.1', PeerPort => $port, Proto => 'tcp', Timeout => 10)
          or die "connect: $!";
        $s->autoflush(1);
        print $s "GET $p HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n";
        push @c, { s => $s, t0 => time, buf => '' };
    }
    return ((time - $t0) * 1000, @c);
}

# Reads every answer of send_all's requests: per request {status, h (headers), delay
# ($ratelimit_delay), ms (from its send to the end of its response)}, in the order sent.
sub read_all {
    my (@c) = @_;
    my $sel = IO::Select->new(map { $_->{s} } @c);
    my $deadline = time + 20;
    while ($sel->count && time < $deadline) {
        for my $s ($sel->can_read(0.2)) {
            my ($c) = grep { $_->{s} == $s } @c;
            my $n = sysread($s, $c->{buf}, 65536, length $c->{buf});
            next if $n;
            $c->{ms} = (time - $c->{t0}) * 1000;
            $sel->remove($s);
            close $s;
        }
    }
    for my $c (@c) {
        my ($head) = split /\r\n\r\n/, $c->{buf}, 2;
        my ($status) = ($head // '') =~ m{^HTTP/1\.\d (\d+)};
        my %h = map { /^([^:]+):\s*(.*)$/ ? (lc $1 => $2) : () } split /\r\n/, $head // '';
        $c->{status} = $status // 'ERR';
        $c->{h} = \%h;
        ($c->{delay}) = ($h{'x-delay'} // '') =~ /^d=(\d+)$/;
        delete @$c{qw(s buf)};
    }
    return @c;
}

sub at_once {
    my ($spread, @c) = send_all(@_);
    return ($spread, read_all(@c));
}

# Waits until the error log has $count lines matching $re.
sub wait_count {
    my ($n, $re, $count) = @_;
    for (1 .. 100) {
        my @m = $n->error_log =~ /$re/g;
        return 1 if @m >= $count;
        sleep 0.05;
    }
    return 0;
}

# Sends a request that will wait, until the log shows its delay matching $re; the connection.
sub send_delayed {
    my ($n, $path, $re) = @_;
    my (undef, $c) = send_all($n->port, $path);
    my $ok = $n->wait_log($re);
    return ($ok, $c);
}

sub delay_of { my ($h) = @_; my ($d) = ($h->{'x-delay'} // '') =~ /^d=(\d*)$/; return $d }
sub remaining_of { my ($h) = @_; my ($i) = parse_sf_list($h->{ratelimit}); return $i ? $i->{r} : '-' }

# A delay reported by the module is the formula's, less what drained while the requests
# arrived: within [want - spread - slack, want].
sub near {
    my ($got, $want, $spread) = @_;
    return defined $got && $got <= $want && $got >= $want - $spread - 60;
}

sub scenarios {
    my ($n, $label, $sfx) = @_;
    my $port = $n->port;
    my ($mcount, $t2count) = (0, 0);

    # limit_req zone rate=2r/s burst=4 delay=1: two pass at once, the next three wait 500, 1000
    # and 1500 ms (limit_req: (excess - delay) / rate), the sixth is beyond the burst.
    my $k = fresh_key();
    my ($spread, @r) = at_once($port, map { "/a?k=$k" } 1 .. 6);
    # In the order they were decided: by delay, and the two that pass at once by what they left
    # (sent together, they may reach the store in either order: Redis Cluster does swap them).
    my @ok = sort { $a->{delay} <=> $b->{delay} || remaining_of($b->{h}) <=> remaining_of($a->{h}) }
      grep { $_->{status} eq '200' } @r;
    my @no = grep { $_->{status} ne '200' } @r;
    is(scalar @ok, 5, "$label: five admitted");
    is(join(',', map { $_->{status} } @no), '429', "$label: the sixth rejected");
    my @want = (0, 0, 500, 1000, 1500);
    for my $i (0 .. $#ok) {
        ok(near($ok[$i]{delay}, $want[$i], $spread), "$label: delay $i is $want[$i] ms (limit_req's)")
          or diag("got $ok[$i]{delay}, sending took $spread ms");
        is($ok[$i]{h}{'x-status'}, $want[$i] ? 'DELAYED' : 'PASSED', "$label: status of delay $i");
        # A timer fires on the worker's cached clock: at most a few ms early.
        cmp_ok($ok[$i]{ms}, '>=', $ok[$i]{delay} - 15, "$label: request $i waited its delay");
        is(remaining_of($ok[$i]{h}), 4 - $i, "$label: RateLimit shows the state after request $i");
    }
    ok(@no && $no[0]{h}{'retry-after'}, "$label: the rejection has a Retry-After");
    is(delay_of($no[0]{h}), 0, "$label: a rejected request has \$ratelimit_delay 0");

    # The wait is a timer: the only worker answers another request meanwhile.
    $k = fresh_key();
    my (undef, @bg) = at_once($port, map { "/a?k=$k" } 1 .. 4);    # the last waits 1 s
    my $t0 = time;
    my ($s) = $n->get('/free');
    my $free_ms = (time - $t0) * 1000;
    is($s, 200, "$label: a request while others wait");
    my ($longest) = sort { $b <=> $a } map { $_->{ms} } @bg;
    cmp_ok($free_ms * 4, '<', $longest, "$label: answered while a request waited (${free_ms} ms vs $longest ms)");

    # The token and leaky buckets delay alike (delay=0: every excess request waits its turn).
    for my $algo (qw(token leaky)) {
        $k = fresh_key();
        ($spread, @r) = at_once($port, map { "/$algo?k=$k" } 1 .. 3);
        @ok = sort { $a->{delay} <=> $b->{delay} } @r;
        ok(near($ok[0]{delay}, 0, $spread) && near($ok[1]{delay}, 500, $spread) && near($ok[2]{delay}, 1000, $spread),
           "$label: $algo: delays 0, 500, 1000 ms") or diag(join ' ', map { $_->{delay} } @ok);
    }

    # nodelay (the default): the same excess passes at once.
    $k = fresh_key();
    (undef, @r) = at_once($port, map { "/nodelay?k=$k" } 1 .. 5);
    is(join(' ', map { $_->{status} } @r), '200 200 200 200 200', "$label: nodelay admits the burst");
    is(join(' ', map { $_->{delay} } @r), '0 0 0 0 0', "$label: nodelay delays nothing");

    # max_delay=700ms on rate=2r/s delay=0: 0 and 500 ms pass, 1000 ms would be too long:
    # rejected, consuming nothing; after its Retry-After the same request passes within max_delay.
    $k = fresh_key();
    my @sent;
    ($spread, @sent) = send_all($port, map { "/m?k=$k" } 1 .. 4);
    ok(wait_count($n, qr/limiting request by zone "m$sfx"/, $mcount += 2), "$label: max_delay rejects two");
    (undef, my $h) = $n->get("/mpeek?k=$k");
    is(remaining_of($h), 4, "$label: the rejections consumed nothing (2 of 6 used)");
    @r = read_all(@sent);
    is(join(' ', sort map { $_->{status} } @r), '200 200 429 429', "$label: max_delay rejects the waits over 700 ms");
    @ok = sort { $a->{delay} <=> $b->{delay} } grep { $_->{status} eq '200' } @r;
    ok(near($ok[1]{delay}, 500, $spread), "$label: a 500 ms wait is within max_delay") or diag($ok[1]{delay});
    my ($rej) = grep { $_->{status} eq '429' } @r;
    is($rej->{h}{'retry-after'}, 1, "$label: Retry-After 1 s (300 ms until the wait is 700 ms)");
    is($rej->{h}{'x-status'}, 'REJECTED', "$label: REJECTED by max_delay");
    sleep $rej->{h}{'retry-after'};
    ($s, $h) = $n->get("/m?k=$k");
    is($s, 200, "$label: admitted after Retry-After");
    cmp_ok(delay_of($h), '<=', 700, "$label: ... with a wait within max_delay");
    # At 6r/m the seconds show: after q=1, q=2 would wait 20 s, 5 s beyond max_delay=15s.
    $k = fresh_key();
    $n->get("/m2?k=$k&q=1");
    ($s, $h) = $n->get("/m2?k=$k&q=2");
    is($s, 429, "$label: q=2 would wait 20 s: rejected");
    is($h->{'retry-after'}, 5, "$label: Retry-After exactly 5 s");
    ($s, $h) = $n->get("/m2?k=$k&q=7");
    is($s, 429, "$label: q=7 would wait 60 s even on an empty bucket: never admitted");
    ok(wait_count($n, qr/limiting request by zone "m2$sfx", quantity 7 exceeds its capacity/, 1),
       "$label: ... logged as beyond capacity");

    # A client that closes while delayed: 499, and its unit goes back (limit_req keeps it).
    $k = fresh_key();
    ($s, $h) = $n->get("/c?k=$k");
    is(delay_of($h), 0, "$label: the first request of c passes at once");
    my $sock = IO::Socket::INET->new(PeerAddr => '127.0.0.1', PeerPort => $port, Proto => 'tcp') or die;
    print $sock "GET /c?k=$k HTTP/1.1\r\nHost: localhost\r\n\r\n";
    ok($n->wait_log(qr/delaying request, excess: (?:0\.99\d|1\.000), by zone "c$sfx", delay (?:9\.9\d\d|10\.000)s/), "$label: the second waits 10 s");
    (undef, $h) = $n->get("/cpeek?k=$k");
    is(remaining_of($h), 2, "$label: while it waits, 2 of 4 used");
    close $sock;
    my $back = 0;
    for (1 .. 100) {
        (undef, $h) = $n->get("/cpeek?k=$k");
        last if ($back = remaining_of($h) == 3);
        sleep 0.05;
    }
    ok($back, "$label: the client closed: its unit is given back") or diag(remaining_of($h));
    like(slurp($n->dir . '/access.log'), qr{^/c $k 499 DELAYED (?:99\d\d|10000)$}m, "$label: logged as 499, DELAYED 10 s");

    # Two limits: the request waits for the longer delay (t2: 1000 ms at 1r/s); one whose t2 wait
    # would pass max_delay is rejected and t1 keeps nothing of it.
    $k = fresh_key();
    ($spread, @sent) = send_all($port, map { "/two?k=$k" } 1 .. 2);
    ok(wait_count($n, qr/delaying request, excess: [\d.]+, by zone "t2$sfx"/, ++$t2count), "$label: t2 delays");
    ($s, $h) = $n->get("/two?k=$k");
    is($s, 429, "$label: t2 would wait about 2 s, beyond its max_delay");
    (undef, $h) = $n->get("/t1peek?k=$k");
    is(remaining_of($h), 2, "$label: all or nothing: t1 gave its unit back (2 of 4 used)");
    @ok = sort { $a->{delay} <=> $b->{delay} } read_all(@sent);
    is(join(' ', map { $_->{status} } @ok), '200 200', "$label: two limits admit both");
    ok(near($ok[1]{delay}, 1000, $spread), "$label: the longer delay applies (t2's 1000 ms, not t1's 500)")
      or diag($ok[1]{delay});

    # The same with t1 in shared memory and t2 in Redis: the longest delay across stores, and
    # shared memory gives back what Redis's max_delay rejected.
    if ($n->conf =~ m{location /mix}) {
        $k = fresh_key();
        ($spread, @sent) = send_all($port, map { "/mix?k=$k" } 1 .. 2);
        ok(wait_count($n, qr/delaying request, excess: [\d.]+, by zone "t2m$sfx"/, 1), "$label: mixed stores: Redis delays");
        ($s, $h) = $n->get("/mix?k=$k");
        is($s, 429, "$label: mixed stores: Redis's max_delay rejects");
        (undef, $h) = $n->get("/tmpeek?k=$k");
        is(remaining_of($h), 2, "$label: mixed stores: shared memory gave its unit back (2 of 4 used)");
        @ok = sort { $a->{delay} <=> $b->{delay} } read_all(@sent);
        ok(near($ok[1]{delay}, 1000, $spread), "$label: mixed stores: Redis's longer delay applies") or diag($ok[1]{delay});
    }

    # Dry run: would-be-delayed requests pass at once.
    $k = fresh_key();
    $t0 = time;
    my @dry = map { [$n->get("/dry?k=$k")] } 1 .. 3;
    my $dry_ms = (time - $t0) * 1000;
    is(join(' ', map { $_->[1]{'x-status'} } @dry), 'PASSED DELAYED_DRY_RUN DELAYED_DRY_RUN', "$label: dry run statuses");
    my @dd = map { delay_of($_->[1]) } @dry;
    ok($dd[0] == 0 && $dd[1] > 500 && $dd[2] > $dd[1] + 500, "$label: dry run: \$ratelimit_delay is the would-be delay")
      or diag("@dd");
    cmp_ok($dry_ms, '<', $dd[2] / 2, "$label: dry run: no request waited ($dry_ms ms for three)");
    ok($n->wait_log(qr/delaying request \(dry run\), excess: (?:0\.9\d\d|1\.\d\d\d), by zone "dz/), "$label: dry run delays are logged");

    # Log levels: one below ratelimit_log_level, info stays info.
    my %level = (error => 'warn', warn => 'notice', notice => 'info', info => 'info');
    for my $lv (sort keys %level) {
        $k = fresh_key();
        $n->get("/l_$lv?k=$k");
        my ($ok, $c) = send_delayed($n, "/l_$lv?k=$k", qr/\[$level{$lv}\][^\n]*delaying request, excess: (?:0\.99\d|1\.000), by zone "l_$lv$sfx"/);
        ok($ok, "$label: ratelimit_log_level $lv: delays at $level{$lv}");
        close $c->{s};
    }
}

# Variables where no limit applies, and where nothing waits.
sub variables {
    my ($n, $label) = @_;
    my ($s, $h) = $n->get('/free');
    is($h->{'x-delay'}, 'd=', "$label: \$ratelimit_delay not found without a limit");
    ($s, $h) = $n->get('/a?k=' . fresh_key());
    is($h->{'x-delay'}, 'd=0', "$label: \$ratelimit_delay 0 without a wait");
}

# A graceful stop while a request waits: it finishes, then the worker exits.
sub graceful_stop {
    my ($n, $label) = @_;
    my $k = fresh_key();
    $n->get("/g?k=$k");
    my $t0 = time;
    my $sock = IO::Socket::INET->new(PeerAddr => '127.0.0.1', PeerPort => $n->port, Proto => 'tcp') or die;
    print $sock "GET /g?k=$k HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n";
    ok($n->wait_log(qr/delaying request, excess: (?:0\.9\d\d|1\.000), by zone "g[^"]*", delay (?:0\.9\d\d|1\.000)s/), "$label: a request waits 1 s");
    my $master = $n->master_pid;
    kill 'QUIT', $master;
    my $buf = '';
    my $sel = IO::Select->new($sock);
    while ($sel->can_read(5)) { last unless sysread($sock, $buf, 65536, length $buf) }
    my $ms = (time - $t0) * 1000;
    like($buf, qr{^HTTP/1\.1 200}, "$label: nginx -s quit: the delayed request completes");
    like($buf, qr/X-Status: DELAYED/, "$label: ... as DELAYED");
    cmp_ok($ms, '>=', 900, "$label: ... after its delay");
    my $gone = 0;
    for (1 .. 100) { last if ($gone = !kill 0, $master); sleep 0.05 }
    ok($gone, "$label: then nginx exits");
}

# Until the worker's Redis connection decides requests.
sub wait_redis {
    my ($n) = @_;
    for (1 .. 100) {
        my (undef, $h) = $n->get('/nodelay?k=' . fresh_key('warm'));
        return 1 if ($h->{'x-status'} // '') eq 'PASSED';
        sleep 0.05;
    }
    return 0;
}

my $shm = start_nginx(http_of('', undef), workers => 1);
variables($shm, 'shm');
scenarios($shm, 'shm', '');
graceful_stop($shm, 'shm');

my $redis = start_redis();
my $rn = start_nginx("    ratelimit_redis main ${\ $redis->addr} timeout=2s;\n" . http_of('_r', 'main'), workers => 1);
ok(wait_redis($rn), 'redis: connected');
variables($rn, 'redis');
scenarios($rn, 'redis', '_r');
graceful_stop($rn, 'redis');

my $cluster = start_redis_cluster(primaries => 3);
my $cn = start_nginx("    ratelimit_redis rc cluster ${\ $cluster->seeds} timeout=2s;\n" . http_of('_c', 'rc'), workers => 1);
ok(wait_redis($cn), 'cluster: connected');
scenarios($cn, 'cluster', '_c');
graceful_stop($cn, 'cluster');

done_testing;
