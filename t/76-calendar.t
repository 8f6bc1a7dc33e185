# Calendar quotas: requests=N period=day|week|month|year [timezone=Area/City] on the window
# algorithms. nginx (and Redis) run under libfaketime, started a few seconds before a local
# midnight: a daily quota resets at local midnight of its time zone, Retry-After and the
# RateLimit reset point at the boundary, across a month end and across DST changes (Berlin's
# 23- and 25-hour days), in shared memory and in Redis; nginx -t refuses what makes no sense.
# runs alone: it measures time (faketime a few seconds before midnight)
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use RLTest;
use Test::More;
use Time::HiRes qw(time sleep);

my ($libft) = grep { -e } map { "/usr/lib/$_/faketime/libfaketime.so.1" } qw(x86_64-linux-gnu aarch64-linux-gnu);
plan skip_all => 'libfaketime not installed (Debian: libfaketime)' unless $libft;
# Under ./build.sh test-asan the sanitizers' runtimes are preloaded too: with libfaketime beside
# them an nginx start may hang (seen once in three runs); the clock-free checks live in calendar_test.
plan skip_all => 'libfaketime and the sanitizers do not mix (an nginx start may hang)' if ($ENV{LD_PRELOAD} // '') =~ /asan/;

# ---- nginx -t -------------------------------------------------------------------------------

sub conf_error {
    my ($zone_line, $want, $name) = @_;
    my ($rc, $out, $file) = nginx_t(<<"EOF");
    $zone_line
    server { listen 127.0.0.1:%%PORT%%; location / { ratelimit zone=z; empty_gif; } }
EOF
    isnt($rc, 0, "$name: nginx -t fails");
    like($out, $want, "$name: the error");
    return ($out, $file);
}

my ($out, $file) = conf_error('ratelimit_zone z key=$arg_k requests=5 period=day timezone=Mars/Olympus_Mons;',
                              qr/unknown time zone "Mars\/Olympus_Mons" in ratelimit zone "z"/, 'unknown zone');
like($out, qr/\Q$file\E:\d+/, '... names the file and line');
conf_error('ratelimit_zone z key=$arg_k requests=5 period=day timezone=/etc/passwd;', qr/unknown time zone/,
           'a path is no zone name');
conf_error('ratelimit_zone z key=$arg_k requests=5 period=1h timezone=Europe/Berlin;',
           qr/"timezone=Europe\/Berlin" needs a calendar period/, 'timezone without a calendar period');
conf_error('ratelimit_zone z key=$arg_k rate=5r/s timezone=UTC;', qr/needs a calendar period/, 'timezone with rate=');
conf_error('ratelimit_zone z key=$arg_k requests=5 period=day algo=gcra;',
           qr/calendar period is for algo=fixed or algo=sliding, not "gcra"/, 'a bucket algorithm');
conf_error('ratelimit_zone z key=$arg_k requests=5 period=week algo=log;', qr/not "log"/, 'the log algorithm');
conf_error('ratelimit_zone z key=$arg_k requests=5 period=fortnight;', qr/invalid period/, 'an unknown period');
conf_error('ratelimit_zone z key=$arg_k concurrency=5 timezone=UTC;', qr/needs a calendar period/,
           'timezone on a concurrency zone');
conf_error('ratelimit_redis r 127.0.0.1:1; ratelimit_zone z key=$arg_k requests=5 period=day redis=r sync=1s;',
           qr/"sync" cannot be used with a calendar period/, 'sync');
{
    my ($rc, $o) = nginx_t(<<'EOF');
    ratelimit_zone d key=$arg_k requests=5 period=day timezone=America/New_York;
    ratelimit_zone w key=$arg_k requests=5 period=week algo=sliding;
    ratelimit_zone m key=$arg_k requests=5 period=month timezone=Europe/Berlin;
    ratelimit_zone y key=$arg_k requests=5 period=year timezone=UTC;
    server { listen 127.0.0.1:%%PORT%%;
             location / { ratelimit zone=d; ratelimit zone=w; ratelimit zone=m; ratelimit zone=y; empty_gif; } }
EOF
    is($rc, 0, 'day, week, month and year zones pass nginx -t') or diag $o;
}

# ---- under faketime ---------------------------------------------------------------------------

# A Redis on the real clock (redis-server does not start under libfaketime: jemalloc's early
# clock_gettime recurses into it). Its TIME decides: under a faked nginx clock months away,
# the bounds nginx passes do not hold Redis's now and the check is rejected (redis_command.h).
my $redis = start_redis();
my $rp = $redis->port;

# Starts nginx whose clock begins at $start (UTC, "YYYY-MM-DD hh:mm:ss") and runs.
sub faked {
    my ($start, $http) = @_;
    # after what is preloaded already (the sanitizers' runtimes must come first)
    local $ENV{LD_PRELOAD} = join(':', grep { defined && length } $ENV{LD_PRELOAD}, $libft);
    local $ENV{FAKETIME} = "\@$start";
    local $ENV{FAKETIME_DONT_RESET} = 1;
    local $ENV{TZ} = 'UTC';
    my $n = start_nginx($http, main => "env LD_PRELOAD;\nenv FAKETIME;\nenv FAKETIME_DONT_RESET;\nenv TZ;");
    return ($n, time);
}

sub hit {
    my ($n, $path) = @_;
    my ($st, $h) = $n->get($path);
    my ($item) = parse_sf_list($h->{ratelimit} // '');
    return ($st // 'ERR', $h->{'retry-after'}, $item ? $item->{t} : undef, $item ? $item->{r} : undef);
}

# Hits $path until it passes; the seconds that took from $t0, or undef past $limit.
sub passes_after {
    my ($n, $path, $t0, $limit) = @_;
    while (time - $t0 < $limit) {
        my ($st) = hit($n, $path);
        return time - $t0 if $st eq '200';
        sleep 0.1;
    }
    return undef;
}

my $zones = <<"EOF";
    ratelimit_redis main 127.0.0.1:$rp prefix=t76:;
    ratelimit_zone berlin  key=\$arg_k requests=2 period=day timezone=Europe/Berlin;
    ratelimit_zone utc     key=\$arg_k requests=2 period=day;
    ratelimit_zone month   key=\$arg_k requests=1 period=month;
    ratelimit_zone slide   key=\$arg_k requests=2 period=day algo=sliding timezone=Europe/Berlin;
    ratelimit_zone red     key=\$arg_k requests=2 period=day timezone=Europe/Berlin redis=main;
    server {
        listen 127.0.0.1:%%PORT%%;
        location /berlin { ratelimit zone=berlin; empty_gif; }
        location /utc    { ratelimit zone=utc; empty_gif; }
        location /month  { ratelimit zone=month; empty_gif; }
        location /slide  { ratelimit zone=slide; empty_gif; }
        location /red    { ratelimit zone=red; empty_gif; }
    }
EOF

# 1. 2026-03-29 21:59:55Z is 23:59:55 CEST at the end of Berlin's 23-hour day (the spring DST
#    change): the Berlin quota resets in 5 s; the UTC one (its day 22 h old) not before 2 h.
{
    my ($n, $t0) = faked('2026-03-29 21:59:55', $zones);
    for my $loc (qw(berlin utc slide)) {
        my @r = map { [hit($n, "/$loc?k=a")] } 1 .. 3;
        is_deeply([map { $_->[0] } @r], [200, 200, 429], "/$loc: a daily quota of 2");
    }
    my (undef, $ra, $t) = hit($n, '/berlin?k=a');
    ok(defined $ra && $ra >= 1 && $ra <= 6, "/berlin: Retry-After points at local midnight (" . ($ra // 'none') . " s)");
    ok(defined $t && $t >= 1 && $t <= 6, "/berlin: the RateLimit reset too (" . ($t // 'none') . " s)");
    is((hit($n, '/red?k=a'))[0], 429, "/red: Redis's clock, months from nginx's, holds none of the windows: rejected");
    (undef, $ra) = hit($n, '/utc?k=a');
    ok(defined $ra && $ra >= 7190 && $ra <= 7206, "/utc: Retry-After at UTC midnight, 2 h later (" . ($ra // 'none') . " s)");
    my $after = passes_after($n, '/berlin?k=a', $t0, 12);
    ok(defined $after && $after >= 1, 'the Berlin quota resets at local midnight') or diag $after;
    my (undef, undef, $t2) = hit($n, '/berlin?k=b');
    ok(defined $t2 && $t2 >= 86390 && $t2 <= 86400, "the new day is 24 hours: reset " . ($t2 // 'none') . " s");
    is((hit($n, '/utc?k=a'))[0], 429, 'the UTC quota has not reset');
    # Sliding: yesterday's 2 weigh (end - now) / (end - start) of the new 24-hour day: nearly
    # all of them right after midnight; one more fits once the weight is down to 1/2, at noon.
    my ($st, $ra2) = hit($n, '/slide?k=a');
    is($st, 429, '/slide: the previous day still weighs right after midnight');
    ok(defined $ra2 && $ra2 >= 43180 && $ra2 <= 43200, "/slide: until local noon (" . ($ra2 // 'none') . " s)");
    $n->stop;
}

# 2. A DST change inside the day: 2026-03-29 00:59:58Z is 01:59:58 CET, two seconds before the
#    clocks jump to 03:00 CEST. The day's window ends at 22:00Z, 21 h after the jump's 01:00Z.
{
    my ($n, $t0) = faked('2026-03-29 00:59:58', $zones);
    hit($n, '/berlin?k=d') for 1 .. 2;
    my ($st, $ra) = hit($n, '/berlin?k=d');
    is($st, 429, 'before the jump: quota used');
    ok(defined $ra && $ra >= 75590 && $ra <= 75603, "Retry-After counts the 23-hour day to its local midnight (not 79200, a 24-hour day: " . ($ra // 'none') . " s)");
    sleep 3 - (time - $t0) if time - $t0 < 3;
    is((hit($n, '/berlin?k=d'))[0], 429, 'after the jump to 03:00 CEST: the same day, no reset');
    $n->stop;
}

# 3. The end of a 25-hour day (autumn): 2026-10-25 22:59:57Z is 23:59:57 CET.
{
    my ($n, $t0) = faked('2026-10-25 22:59:57', $zones);
    hit($n, '/berlin?k=f') for 1 .. 2;
    my ($st, $ra) = hit($n, '/berlin?k=f');
    ok($st eq '429' && defined $ra && $ra >= 1 && $ra <= 4, "autumn: rejected until local midnight (" . ($ra // 'none') . " s)");
    my $after = passes_after($n, '/berlin?k=f', $t0, 10);
    ok(defined $after && $after >= 2.5, 'reset at local midnight after the 25-hour day');
    $n->stop;
}

# 4. A month end in UTC (the default time zone): January 31st 23:59:57Z.
{
    my ($n, $t0) = faked('2026-01-31 23:59:57', $zones);
    is((hit($n, '/month?k=m'))[0], 200, 'a monthly quota of 1');
    my ($st, $ra) = hit($n, '/month?k=m');
    ok($st eq '429' && defined $ra && $ra >= 1 && $ra <= 4, "rejected until February 1st (" . ($ra // 'none') . " s)");
    my $after = passes_after($n, '/month?k=m', $t0, 10);
    ok(defined $after && $after >= 2.5, 'the month quota resets on the 1st');
    my (undef, undef, $t2) = hit($n, '/month?k=n');
    ok(defined $t2 && $t2 >= 28 * 86400 - 10 && $t2 <= 28 * 86400, "February's window is 28 days (" . ($t2 // 'none') . " s)");
    $n->stop;
}

# 5. Redis, on the real clock: the windows nginx computes, Redis's TIME deciding; Retry-After at
#    the next local midnight of UTC and of Asia/Tokyo (UTC+9, no DST).
{
    my $n = start_nginx(<<"EOF");
    ratelimit_redis main 127.0.0.1:$rp prefix=t76r:;
    ratelimit_zone red   key=\$arg_k requests=1 period=day redis=main;
    ratelimit_zone tokyo key=\$arg_k requests=1 period=day timezone=Asia/Tokyo redis=main;
    ratelimit_zone slide key=\$arg_k requests=1 period=month algo=sliding timezone=Asia/Tokyo redis=main;
    server {
        listen 127.0.0.1:%%PORT%%;
        location /red   { ratelimit zone=red; empty_gif; }
        location /tokyo { ratelimit zone=tokyo; empty_gif; }
        location /slide { ratelimit zone=slide; empty_gif; }
    }
EOF
    for my $case (['red', 0], ['tokyo', 9 * 3600]) {
        my ($loc, $off) = @$case;
        is((hit($n, "/$loc?k=r"))[0], 200, "/$loc (Redis): the first of the day");
        my $want = 86400 - (int(time) + $off) % 86400;
        my ($st, $ra, $t) = hit($n, "/$loc?k=r");
        is($st, 429, "/$loc (Redis): the quota of 1 used");
        ok(defined $ra && abs($ra - $want) <= 2, "/$loc (Redis): Retry-After at the local midnight (" . ($ra // 'none') . " s, want $want)");
        ok(defined $t && abs($t - $want) <= 2, "/$loc (Redis): the RateLimit reset too");
    }
    is((hit($n, '/slide?k=r'))[0], 200, '/slide (Redis): a sliding monthly quota');
    is((hit($n, '/slide?k=r'))[0], 429, '/slide (Redis): of 1');
    $n->stop;
}

done_testing();
