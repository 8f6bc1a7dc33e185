# Tiers: rate= and burst= of ratelimit_zone from variables (a plan per request), in shared
# memory, in Redis and in a 3-primary Redis Cluster. A key that changes plan mid-stream keeps
# what it consumed (windows: their count; buckets: their level by time); the RateLimit headers
# and $ratelimit_limit show the policy that applied to the request; N/TIME rates; invalid
# values fall back (default_rate, burst 0) and are logged at warn once a second, sanitized;
# nginx -t refuses what cannot work.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use RLTest;
use Test::More;
use Time::HiRes qw(time sleep);

avoid_window_edge(900, 20);    # the hour and its quarters: every window below stays the same

my $redis   = start_redis();
my $cluster = start_redis_cluster(primaries => 3);
my %redis_of = (shm => '', one => ' redis=one', rc => ' redis=rc');
my @backends = qw(shm one rc);
my @windows  = qw(fixed sliding);
my @buckets  = qw(gcra token leaky);

my ($zones, $locs) = ('', '');
for my $b (@backends) {
    my $r = $redis_of{$b};
    for my $a (@windows, @buckets) {
        my $burst = grep({ $_ eq $a } @buckets) ? ' burst=$plan_burst' : '';
        $zones .= "    ratelimit_zone ${b}_$a key=\$arg_k rate=\$plan_rate default_rate=60r/h$burst algo=$a$r;\n";
        $locs  .= "        location /$b/$a { ratelimit zone=${b}_$a quantity=\$arg_q; empty_gif; }\n";
    }
    $zones .= "    ratelimit_zone ${b}_raw key=\$arg_k rate=\$http_x_rate default_rate=60r/h burst=\$http_x_burst$r;\n";
    $zones .= "    ratelimit_zone ${b}_quarter key=\$arg_k rate=100/15m algo=fixed$r;\n";
    $locs  .= "        location /$b/raw { ratelimit zone=${b}_raw quantity=\$arg_q; empty_gif; }\n";
    $locs  .= "        location /$b/quarter { ratelimit zone=${b}_quarter; empty_gif; }\n";
}

my $n = start_nginx(<<"EOF2");
    ratelimit_redis one 127.0.0.1:${\ $redis->port} timeout=2s;
    ratelimit_redis rc cluster ${\ $cluster->seeds } timeout=2s;
    map \$http_x_plan \$plan_rate  { default 60r/h; pro 5000r/h; internal 100r/s; quarter 100/15m; }
    map \$http_x_plan \$plan_burst { default 59;    pro 4999;    internal 99;     quarter 9; }
$zones
    ratelimit_zone warm_one key=\$arg_k rate=1000r/s redis=one;
    ratelimit_zone warm_rc  key=\$arg_k rate=1000r/s redis=rc;
    server {
        listen 127.0.0.1:%%PORT%%;
        ratelimit_headers all;
        ratelimit_on_error deny;
        add_header X-Status \$ratelimit_status always;
        add_header X-Limit \$ratelimit_limit always;
        add_header X-Who \$pid always;
$locs
        location /warm/one { ratelimit zone=warm_one; empty_gif; }
        # A burst on the line replaces the zone's variable one.
        location /line/gcra { ratelimit zone=shm_gcra burst=3 quantity=\$arg_q; empty_gif; }
        location /line/raw  { ratelimit zone=shm_raw burst=100000; empty_gif; }
        # delay= shapes at the request's rate: 0.72 s a request for pro, 60 s for free.
        location /line/delay { ratelimit zone=shm_gcra delay=0 max_delay=2s;
            add_header X-Delay \$ratelimit_delay always; add_header X-Status \$ratelimit_status always; empty_gif; }
        location /warm/rc  { ratelimit zone=warm_rc; empty_gif; }
    }
EOF2

ok(defined $n->wait_decided(sub { '/warm/one?k=' . fresh_key('w') }), 'every worker decides in Redis');
ok(defined $n->wait_decided(sub { '/warm/rc?k=' . fresh_key('w') }), 'every worker decides in the cluster');

# "status q=Q w=W r=R": what RateLimit-Policy and RateLimit said (and X-RateLimit-Limit and
# $ratelimit_limit agree with q), for a request of `q` units under plan `plan`.
sub req {
    my ($path, $plan, %h) = @_;
    $h{'X-Plan'} = $plan if defined $plan;
    my ($s, $h) = $n->get($path, \%h);
    my ($pol) = parse_sf_list($h->{'ratelimit-policy'});
    my ($st)  = parse_sf_list($h->{ratelimit});
    my $q = $pol ? $pol->{q} // '?' : '-';
    my $agree = ($h->{'x-ratelimit-limit'} // '') eq $q && ($h->{'x-limit'} // '') eq $q ? '' : ' (limits disagree)';
    return sprintf('%s q=%s w=%s r=%s%s', $s // 'ERR', $q, $pol ? $pol->{w} // '?' : '-', $st ? $st->{r} // '?' : '-',
        $agree);
}

for my $b (@backends) {
    # Windows: 50 of 60/h used, then pro (5000/h): 4950 left in that hour; back to free: none.
    for my $a (@windows) {
        my $k = fresh_key("$b$a");
        my $p = "/$b/$a?k=$k";
        is(req("$p&q=50"), '200 q=60 w=3600 r=10', "$b $a: 50 of the free 60/h");
        is(req("$p&q=0", 'pro'), '200 q=5000 w=3600 r=4950', "$b $a: moved to pro, 4950 left in that hour");
        is(req("$p&q=4950", 'pro'), '200 q=5000 w=3600 r=0', "$b $a: pro takes its 4950");
        is(req("$p&q=1", 'pro'), '429 q=5000 w=3600 r=0', "$b $a: pro is then exhausted");
        is(req("$p&q=1"), '429 q=60 w=3600 r=0', "$b $a: back on free, nothing left");
    }
    # Buckets: 50 of 60/h (burst 59, an hour deep) is 50 minutes of level; at 5000/h (burst
    # 4999, also an hour deep) that is 4166.7 requests: 833 left (834 once 480 ms drained).
    for my $a (@buckets) {
        my $k = fresh_key("$b$a");
        my $p = "/$b/$a?k=$k";
        is(req("$p&q=50"), '200 q=60 w=3600 r=10', "$b $a: 50 of the free 60/h");
        like(req("$p&q=0", 'pro'), qr/^200 q=5000 w=3600 r=83[34]$/, "$b $a: moved to pro, the level carried by time");
        like(req("$p&q=900", 'pro'), qr/^429 q=5000 w=3600 r=83[34]$/, "$b $a: pro does not admit 900 more");
        like(req("$p&q=800", 'pro'), qr/^200 q=5000 w=3600 r=3[34]$/, "$b $a: it admits 800");
        my ($s, $h) = $n->get("$p&q=1");
        is($s, 429, "$b $a: back on free: 3576 s of its hour used, the next request 24 s short");
        ok(($h->{'retry-after'} // 0) >= 35 && ($h->{'retry-after'} // 0) <= 36, "$b $a: Retry-After 36 s")
            or diag($h->{'retry-after'});
    }
    # A plan with another period, from the map: 100/15m, and 100r/s; a static N/TIME rate.
    is(req("/$b/gcra?k=" . fresh_key('i') . '&q=100', 'internal'), '200 q=100 w=1 r=0', "$b: internal, 100r/s burst 99");
    is(req("/$b/gcra?k=" . fresh_key('q') . '&q=10', 'quarter'), '200 q=100 w=900 r=0', "$b: quarter, 100/15m burst 9");
    {
        my $k = fresh_key('fq');
        is(req("/$b/fixed?k=$k&q=60"), '200 q=60 w=3600 r=0', "$b fixed: the free hour used up");
        is(req("/$b/fixed?k=$k&q=0", 'quarter'), '200 q=100 w=900 r=40',
            "$b fixed: to 100/15m, the hour's 60 count in this quarter");
        my $p = "/$b/quarter?k=" . fresh_key('sq');
        my @s = map { req($p) } 1 .. 3;
        is("@s", '200 q=100 w=900 r=99 200 q=100 w=900 r=98 200 q=100 w=900 r=97', "$b: rate=100/15m");
    }
    # Values from a request header: invalid rate -> default_rate, invalid or empty burst -> 0.
    {
        my $p = "/$b/raw?k=";
        is(req($p . fresh_key('r'), undef, 'X-Rate' => '5/1s', 'X-Burst' => '4'), '200 q=5 w=1 r=4', "$b: rate 5/1s burst 4");
        my $k = fresh_key('r');
        is(req("$p$k", undef, 'X-Rate' => 'lots', 'X-Burst' => '2'), '200 q=60 w=3600 r=2', "$b: invalid rate: default_rate");
        $k = fresh_key('r');
        my @s = map { req("$p$k", undef, 'X-Rate' => '10r/m', 'X-Burst' => 'many') } 1 .. 2;
        is("@s", '200 q=10 w=60 r=0 429 q=10 w=60 r=0', "$b: invalid burst counts 0");
        $k = fresh_key('r');
        @s = map { req("$p$k") } 1 .. 2;
        is("@s", '200 q=60 w=3600 r=0 429 q=60 w=3600 r=0', "$b: no values: default_rate, burst 0");
        $k = fresh_key('r');
        @s = map { req("$p$k", undef, 'X-Rate' => '1r/d', 'X-Burst' => '1000000') } 1 .. 2;
        is("@s", '200 q=1 w=86400 r=0 429 q=1 w=86400 r=0', "$b: a burst too large for the rate counts 0");
    }
}

# A static burst on the `ratelimit` line: the plan's rate, the line's burst; a variable rate too
# fast for that burst falls back to default_rate.
{
    my $k = fresh_key('l');
    is(req("/line/gcra?k=$k&q=4", 'pro'), '200 q=5000 w=3600 r=0', 'line burst=3 under pro: 4 at once');
    is(req("/line/gcra?k=$k&q=1", 'pro'), '429 q=5000 w=3600 r=0', '... and no more');
    sleep 1.05;    # the zone's warnings of the loop above are in an earlier second
    is(req('/line/raw?k=' . fresh_key('l'), undef, 'X-Rate' => '1r/d'), '200 q=60 w=3600 r=100000',
        'a rate too slow for the line\'s burst: default_rate');
    ok(defined $n->wait_log(qr/\[warn\].*zone "shm_raw": invalid rate "1r\/d", too low for the burst, default_rate applies/),
        '... logged');
}

# delay= with a tier: the wait comes from the request's own rate.
{
    # 0.72 s less what the bucket drained between the two requests: a few ms. A run whose
    # second request left more than 20 ms after the first (a loaded machine) shows nothing
    # about the rate and is made again on a new key, five times at most; the last is checked.
    my ($k, $s, $h, $s1, $span);
    for my $try (1 .. 5) {
        $k = fresh_key('d');
        my $t0 = time;
        ($s1) = $n->get("/line/delay?k=$k", { 'X-Plan' => 'pro' });
        my $gap = time - $t0;
        ($s, $h) = $n->get("/line/delay?k=$k", { 'X-Plan' => 'pro' });
        $span = time - $t0;    # the two decisions lie within it
        last if $gap < 0.02;
    }
    is($s1, 200, 'delay=0 under pro: the first request at once');
    is("$s $h->{'x-status'}", '200 DELAYED', '... the next is delayed');
    my $wait = $h->{'x-delay'} // -1;
    my $least = 720 - int(1000 * $span) - 1;
    ok($wait <= 720 && $wait >= $least, "... by 0.72 s, the pro rate, less the time between the two ($least to 720 ms)")
      or diag("delay $wait ms");
    $k = fresh_key('d');
    $n->get("/line/delay?k=$k");
    ($s, $h) = $n->get("/line/delay?k=$k");
    is("$s $h->{'x-status'}", '429 REJECTED', 'under free the next would wait 60 s: beyond max_delay, rejected');
}

# The warnings: once a second per zone and worker, the value sanitized and capped.
{
    like($n->error_log, qr/\[warn\].*ratelimit zone "shm_raw": invalid rate "lots", default_rate applies/,
         'an invalid rate is logged at warn');
    sleep 1.05;    # past the second of the warnings above, in both workers
    is(req('/shm/raw?k=' . fresh_key('b'), undef, 'X-Burst' => 'bogus'), '200 q=60 w=3600 r=0', 'an invalid burst: 0');
    ok(defined $n->wait_log(qr/\[warn\].*ratelimit zone "shm_raw": invalid burst "bogus", counted as 0/),
       'an invalid burst is logged at warn');
    sleep 1.05;
    my $t0 = time;
    my $before = () = $n->error_log =~ /invalid rate "flood"/g;
    my @s = map { req('/shm/raw?k=' . fresh_key('f'), undef, 'X-Rate' => 'flood') } 1 .. 40;
    my $secs = time - $t0;
    my $lines = (() = $n->error_log =~ /invalid rate "flood"/g) - $before;
    is(scalar(grep { /^200 q=60 / } @s), 40, '40 invalid rates: each request under default_rate');
    ok($lines >= 1 && $lines <= 2 * (int($secs) + 2), "... logged $lines times in ${\ sprintf('%.1f', $secs)} s by 2 workers");
    sleep 1.05;
    my ($st) = $n->get('/shm/raw?k=' . fresh_key('e'), { 'X-Rate' => "\x1b[31m" . ('9' x 300) });
    is($st, 200, 'a hostile rate value: default_rate');
    ok(defined $n->wait_log(qr/invalid rate "\\x1b\[31m9{20}/, 3), '... logged escaped');
    my ($line) = grep { /invalid rate "\\x1b/ } split /\n/, $n->error_log;
    ok($line && $line !~ /[\x00-\x1f]/ && length($line) < 400, '... and capped') or diag($line);
}

# A key's state is one Redis key whatever its plan: the fixed zone saw two client keys.
{
    my @keys = grep { /one_fixed/ } split /\n/, $redis->cli('KEYS', '*');
    is(scalar @keys, 2, 'one Redis key per client key, whatever its plan') or diag("@keys");
}

# nginx -t: what cannot work is refused, saying why.
for my $case (
    ['a variable rate without default_rate', 'ratelimit_zone z key=$arg_k rate=$arg_r;',
     qr/a variable "rate" requires "default_rate" in ratelimit zone "z"/],
    ['default_rate without a variable rate', 'ratelimit_zone z key=$arg_k rate=1r/s default_rate=2r/s;',
     qr/"default_rate" is only for a variable "rate"/],
    ['log with a variable rate', 'ratelimit_zone z key=$arg_k rate=$arg_r default_rate=1r/s algo=log;',
     qr/the "log" algorithm cannot take a variable "rate" \(its memory per key depends on the rate\)/],
    ['ratelimit_algo log on a variable rate',
     "ratelimit_zone z key=\$arg_k rate=\$arg_r default_rate=1r/s;\n"
         . "server { listen 127.0.0.1:%%PORT%%; location / { ratelimit_algo log; ratelimit zone=z; empty_gif; } }",
     qr/the "log" algorithm cannot take the variable rate of zone "z" \(its memory per key depends on the rate\) in "ratelimit" directive in \S+:\d+/],
    ['an invalid default_rate', 'ratelimit_zone z key=$arg_k rate=$arg_r default_rate=fast;',
     qr/invalid default_rate "default_rate=fast"/],
    ['a variable burst on a window', 'ratelimit_zone z key=$arg_k rate=$arg_r default_rate=1r/s burst=$arg_b algo=fixed;',
     qr/"burst" is not supported by the "fixed" algorithm/],
    )
{
    my ($name, $http, $re) = @$case;
    my ($rc, $out) = nginx_t($http);
    isnt($rc, 0, "nginx -t: $name fails");
    like($out, $re, "nginx -t: $name: the message") or diag($out);
}
{
    my ($rc, $out) = nginx_t(
        'map $http_x_plan $r { default 60r/h; pro 5000r/h; } ratelimit_zone z key=$arg_k rate=$r default_rate=60r/h burst=$arg_b;'
          . ' ratelimit_zone h key=$arg_k rate=100/15m; ratelimit_zone d key=$arg_k rate=${arg_n}r/s default_rate=1r/s;'
          . ' server { listen 127.0.0.1:%%PORT%%; location / { ratelimit zone=z; ratelimit zone=h; ratelimit zone=d; empty_gif; } }');
    is($rc, 0, 'nginx -t: the README\'s tier configuration is accepted') or diag($out);
}

done_testing;
