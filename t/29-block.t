# Block after abuse (block=TIME): a key its limit rejected stays rejected for TIME though its rate
# refills, in shared memory and in Redis (two nginx sharing it); Retry-After counts the block
# down; $ratelimit_status BLOCKED; other keys and other limits' rejections unaffected; the
# block of a `ratelimit` line overrides the zone's; dry run passes and logs "would block";
# nginx -t refuses it on concurrency and sync zones.
# runs alone: it measures time (blocks of seconds)
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use RLTest;
use Test::More;
use Time::HiRes qw(time sleep);
use POSIX qw(ceil);

my $redis = start_redis();
my $rp = $redis->port;

my $http = <<"EOF";
    # timeout: a loaded machine must not let a request through by ratelimit_on_error (allow)
    ratelimit_redis main 127.0.0.1:$rp prefix=t29: timeout=2s;
    ratelimit_zone shm   key=\$arg_k rate=10r/s block=2s;
    ratelimit_zone plain key=\$arg_k rate=10r/s;
    ratelimit_zone long  key=\$arg_k rate=10r/s block=30s;
    ratelimit_zone tight key=\$arg_k requests=1 period=1h;
    ratelimit_zone bys   key=\$arg_k rate=10r/s block=2s;
    ratelimit_zone dry   key=\$arg_k rate=10r/s block=2s;
    ratelimit_zone red   key=\$arg_k rate=10r/s block=2s redis=main;
    ratelimit_zone mb    key=\$arg_k requests=1 period=1h block=1h;
    ratelimit_zone mbr   key=\$arg_k requests=1 period=1h block=1h redis=main;
    ratelimit_zone redb  key=\$arg_k requests=1 period=1h block=2s redis=main;
    server {
        listen 127.0.0.1:%%PORT%%;
        add_header X-Status \$ratelimit_status always;
        location /shm      { ratelimit zone=shm; empty_gif; }
        location /plain    { ratelimit zone=plain; empty_gif; }
        location /line     { ratelimit zone=plain block=3s; empty_gif; }
        location /override { ratelimit zone=long block=2s; empty_gif; }
        location /two      { ratelimit zone=tight; ratelimit zone=bys; empty_gif; }
        location /bys      { ratelimit zone=bys; empty_gif; }
        location /dry      { ratelimit_dry_run on; ratelimit zone=dry; empty_gif; }
        location /redis    { ratelimit zone=red; empty_gif; }
        location /mb       { ratelimit zone=mb; empty_gif; }
        location /mbd      { ratelimit_dry_run on; ratelimit zone=mb; empty_gif; }
        location /mbr      { ratelimit zone=mbr; empty_gif; }
        location /redb     { ratelimit zone=redb; empty_gif; }
        location = /metrics { ratelimit_metrics; }
    }
EOF
my $n = start_nginx($http);
my $m = start_nginx($http);  # a second host on the same Redis

sub hit {
    my ($inst, $path) = @_;
    my ($st, $h) = $inst->get($path);
    my ($item) = parse_sf_list($h->{ratelimit} // '');
    return ($st // 'ERR', $h->{'x-status'} // '', $h->{'retry-after'} // '', $item ? $item->{r} : '-');
}

# Hits until a request passes (nothing a blocked key sends extends its block): the time it took
# from $t0 (undef if none passed within $limit seconds), and when the last request rejected was
# sent, from $t0 (-1 if none was).
sub passes_after {
    my ($inst, $path, $t0, $limit) = @_;
    my $rejected = -1;
    while (time - $t0 < $limit) {
        my $sent = time - $t0;
        my ($st) = hit($inst, $path);
        return (time - $t0, $rejected) if $st eq '200';
        $rejected = $sent;
        sleep 0.05;
    }
    return (undef, $rejected);
}

# The seconds of block left that a request sent at $sent saw, at least and at most, the block
# of $secs started by a request sent at $t0 and answered at $t1 (its decision between them):
# what a loaded machine's delays make of "$secs less the time slept".
sub block_left {
    my ($secs, $t0, $t1, $sent) = @_;
    return (sprintf('%.3f', $secs - (time - $t0)), sprintf('%.3f', $secs - ($sent - $t1)));
}

# The first "blocked for S" of $re (its capture) in $log, and whether S lies within @left (to
# the millisecond both ways: the times logged are nginx's, cached once per event loop turn).
sub logged_left {
    my ($log, $re, @left) = @_;
    my ($s) = $log =~ $re;
    return (defined $s && $s >= $left[0] - 0.002 && $s <= $left[1] + 0.002, $s // 'none');
}

# The rejection that starts a block, then the block: in shared memory and in Redis.
my %left;    # case -> the block left the third request saw, at least and at most
for my $c (['shared memory', '/shm', $n, $n, 'p1'], ['Redis', '/redis', $n, $m, 'p2']) {
    my ($what, $path, $first, $other, $pk) = @$c;
    my @plain = map { (hit($n, "/plain?k=$pk"))[0] } 1 .. 2;
    is("@plain", '200 429', "$what: (a zone without block rejects the second request too)");
    my ($st) = hit($first, "$path?k=a");
    is($st, '200', "$what: the first request passes");
    my $t0 = time;
    my ($st2, $x2, $ra2) = hit($first, "$path?k=a");
    my $t1 = time;
    is("$st2 $x2", '429 REJECTED', "$what: the second, 10r/s, is rejected by the rate");
    is($ra2, '2', "$what: its Retry-After is the block's 2s, not the rate's 0.1s");
    sleep 0.3;  # the rate has refilled three times over
    my ($pst) = hit($n, "/plain?k=$pk");
    is($pst, '200', "$what: (and then passes: the rate refilled)");
    my $sent3 = time;
    my ($st3, $x3, $ra3, $r3) = hit($other, "$path?k=a");
    my @left = block_left(2, $t0, $t1, $sent3);
    $left{$what} = \@left;
    is("$st3 $x3", '429 BLOCKED', "$what: blocked though the rate refilled"
       . ($other == $first ? '' : ', on the other nginx too'));
    ok($ra3 ne '' && $ra3 >= ceil($left[0]) && $ra3 <= ceil($left[1]),
        "$what: Retry-After $ra3 counts the block down ($left[1] s left, 1.7 unless the machine is slow)");
    is($r3, '0', "$what: RateLimit remaining 0 while blocked");
    my ($sb, $xb) = hit($first, "$path?k=b");
    is("$sb $xb", '200 PASSED', "$what: another key is not blocked");
    my $ra = settle_value(sub { (hit($first, "$path?k=a"))[2] }, '1', timeout => 2, after => 0);
    is($ra, '1', "$what: Retry-After 1 in the block's last second");
    my ($took, $rejected) = passes_after($other, "$path?k=a", $t0, 4);
    ok(defined $took && $took >= 1.95, "$what: passes again once the block is over, not before")
      or diag('after ' . ($took // 'never'));
    # a request sent after the block's end (2 s after the second's answer at most) passes
    ok(defined $took && $rejected < $t1 - $t0 + 2, "$what: requests while blocked did not extend the block")
      or diag('after ' . ($took // 'never') . ", the last rejected sent at $rejected");
}
like($n->error_log, qr/limiting request by zone "shm", retry in 0\.\d{3}s, blocked for 2\.000s/,
     'log: the rejection that starts a block');
# (the first such line: the third request's, the block less the time since the second)
my ($in, $s) = logged_left($n->error_log, qr/limiting request by zone "shm", blocked for (\d+\.\d{3})s/, @{ $left{'shared memory'} });
ok($in, "log: a rejection by the block (blocked for $s, within @{ $left{'shared memory'} })");
($in, $s) = logged_left($m->error_log, qr/limiting request by zone "red", blocked for (\d+\.\d{3})s/, @{ $left{Redis} });
ok($in, "log: the other nginx, blocked by Redis (blocked for $s, within @{ $left{Redis} })");

# The block lives in Redis beside the key's state.
{
    # one request per hour: the second is rejected however slow the machine
    my @st = map { (hit($n, '/redb?k=c'))[0] } 1 .. 2;
    is("@st", '200 429', 'Redis: the second request rejected: a block starts');
    my $keys = $redis->cli('--scan', '--pattern', 't29:{redb:*}:gcra:block');
    my @keys = grep { length } split /\n/, $keys;
    is(scalar @keys, 1, 'Redis: one block key') or diag($keys);
    my $ttl = @keys ? $redis->cli('PTTL', $keys[0]) : -2;
    ok($ttl > 1000 && $ttl <= 2001, 'Redis: the block key expires with the block') or diag("PTTL $ttl");
}

# A block on the `ratelimit` line: where the zone has none, and overriding the zone's 30s.
{
    hit($n, '/line?k=l') for 1 .. 2;
    like($n->error_log, qr/by zone "plain", retry in 0\.\d{3}s, blocked for 3\.000s/, 'the line\'s block=3s');
    hit($n, '/override?k=o');
    my $t0 = time;
    hit($n, '/override?k=o');
    my $t1 = time;
    like($n->error_log, qr/by zone "long", retry in 0\.\d{3}s, blocked for 2\.000s/, 'the line\'s 2s over the zone\'s 30s');
    my ($took, $rejected) = passes_after($n, '/override?k=o', $t0, 5);
    ok(defined $took && $rejected < $t1 - $t0 + 2, 'the line\'s block ends after 2s')
      or diag('after ' . ($took // 'never') . ", the last rejected sent at $rejected");
}

# Another limit's rejection starts no block.
{
    is((hit($n, '/two?k=x'))[0], '200', 'two limits: the first request passes both');
    sleep 0.3;
    my ($st, $x) = hit($n, '/two?k=x');
    is("$st $x", '429 REJECTED', 'two limits: the second is rejected by the 1 per hour');
    my ($sb, $xb) = hit($n, '/bys?k=x');
    is("$sb $xb", '200 PASSED', 'the 10r/s limit with a block admitted it, and is not blocked');
}

# Dry run: the block is recorded, requests pass, the log says what would happen.
{
    my (@st, @t);
    for (1 .. 2) { push @t, time; my ($s, $x) = hit($n, '/dry?k=d'); push @st, "$s $x"; push @t, time }
    is("@st", '200 PASSED 200 REJECTED_DRY_RUN', 'dry run: both pass, the second would be rejected');
    like($n->error_log, qr/limiting request \(dry run\) by zone "dry", would block for 2\.000s/, 'dry run: would block');
    sleep 0.3;
    my $sent = time;
    my ($s, $x) = hit($n, '/dry?k=d');
    my @left = block_left(2, @t[2, 3], $sent);
    is("$s $x", '200 REJECTED_DRY_RUN', 'dry run: the block is recorded: would be rejected though refilled');
    my ($in, $logged) = logged_left($n->error_log, qr/limiting request \(dry run\) by zone "dry", blocked for (\d+\.\d{3})s/, @left);
    ok($in, "dry run: blocked, logged (blocked for $logged, within @left)");
    unlike($n->error_log, qr/limiting request by zone "dry"/, 'dry run: no line without "(dry run)"');
}

# Metrics: a request rejected by a live block counts as "blocked" ("blocked_dry_run"), apart
# from the rejection that started the block.
{
    my @seen;
    push @seen, join ' ', map { (hit($n, '/mb?k=m'))[1] } 1 .. 5;
    push @seen, join ' ', map { (hit($n, '/mbd?k=md'))[1] } 1 .. 4;
    push @seen, join ' ', map { (hit($n, '/mbr?k=m'))[1] } 1 .. 4;
    is_deeply(\@seen, ['PASSED REJECTED BLOCKED BLOCKED BLOCKED', 'PASSED REJECTED_DRY_RUN REJECTED_DRY_RUN REJECTED_DRY_RUN',
        'PASSED REJECTED BLOCKED BLOCKED'], 'metrics: the statuses sent (dry run: BLOCKED shows as REJECTED_DRY_RUN)');
    my ($st, $h, $body) = $n->get('/metrics');
    my %v;
    $v{"$1 $2"} = $3 while ($body // '') =~ /^nginx_ratelimit_requests_total\{zone="(mbr?)",result="(\w+)"\} (\d+)$/mg;
    my %want = ('mb passed' => 2, 'mb rejected' => 1, 'mb blocked' => 3, 'mb rejected_dry_run' => 1,
        'mb blocked_dry_run' => 2, 'mbr passed' => 1, 'mbr rejected' => 1, 'mbr blocked' => 2);
    is_deeply({ map { $_ => $v{$_} // 'absent' } keys %want }, \%want, 'metrics: blocked requests counted apart from rejected ones')
        or diag($body);
    is($v{'mbr rejected_dry_run'} // '', '0', 'metrics: every result is listed, zeros too');
}

# nginx -t
for my $c (
    ['block below 1s', 'ratelimit_zone z key=$arg_k rate=1r/s block=500ms;   # BAD', qr/invalid block "block=500ms", it must be from 1s to 1y/],
    ['block above a year', 'ratelimit_zone z key=$arg_k rate=1r/s block=1y1d;   # BAD', qr/invalid block "block=1y1d"/],
    ['block on the line, invalid', "ratelimit_zone z key=\$arg_k rate=1r/s;\n    server { listen 127.0.0.1:%%PORT%%; location / {\n        ratelimit zone=z block=x;   # BAD\n    } }", qr/invalid block "block=x"/],
    ['block on a concurrency zone', 'ratelimit_zone c key=$arg_k concurrency=2 block=10s;   # BAD', qr/"block" cannot be used with the concurrency zone "c"/],
    ['block on a sync zone', "ratelimit_redis r 127.0.0.1:6379;\n    ratelimit_zone s key=\$arg_k rate=1r/s redis=r sync=100ms block=10s;   # BAD", qr/"block" cannot be used with "sync" in ratelimit zone "s": a block is not reconciled between hosts/],
    ['block on the line of a concurrency zone', "ratelimit_zone c key=\$arg_k concurrency=2;\n    server { listen 127.0.0.1:%%PORT%%; location / {\n        ratelimit zone=c block=10s;   # BAD\n    } }", qr/"block" cannot be used with the concurrency zone "c"/],
    ['block on the line of a sync zone', "ratelimit_redis r 127.0.0.1:6379;\n    ratelimit_zone s key=\$arg_k rate=1r/s redis=r sync=100ms;\n    server { listen 127.0.0.1:%%PORT%%; location / {\n        ratelimit zone=s block=10s;   # BAD\n    } }", qr/"block" cannot be used with "sync" in ratelimit zone "s"/],
) {
    my ($name, $conf, $re) = @$c;
    my ($rc, $out, $file) = nginx_t($conf);
    my $line = conf_line_of($file, '# BAD');
    isnt($rc, 0, "$name: nginx -t fails");
    like($out, $re, "$name: message") or diag($out);
    like($out, qr/\Q in $file:$line\E\b/, "$name: names $file:$line") or diag($out);
    like($out, qr/"ratelimit\w*" directive/, "$name: names the directive") or diag($out);
}
{
    my ($rc, $out) = nginx_t('ratelimit_zone a key=$arg_k rate=1r/s block=1s; ratelimit_zone b key=$arg_k rate=1r/s block=1y algo=fixed;');
    is($rc, 0, 'block from 1s to 1y: accepted') or diag($out);
}

done_testing();
