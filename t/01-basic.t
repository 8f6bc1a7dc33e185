# Rejection with 429 and Retry-After, accuracy of the admission times.
# runs alone: it measures time (rates of 1 and 2 a second, Retry-After waited out)
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use RLTest;
use Test::More;
use Time::HiRes qw(time sleep);

my $n = start_nginx(<<'EOF2');
    ratelimit_zone one   key=$arg_k rate=1r/s;
    ratelimit_zone two   key=$arg_k rate=2r/s;
    ratelimit_zone b2    key=$arg_k rate=1r/s burst=2;
    ratelimit_zone min1  key=$arg_k rate=1r/m;
    ratelimit_zone min2  key=$arg_k rate=2r/m;
    ratelimit_zone hour  key=$arg_k rate=1r/h;
    ratelimit_zone day   key=$arg_k rate=1r/d;
    ratelimit_zone per   key=$arg_k requests=1 period=90s;
    server {
        listen 127.0.0.1:%%PORT%%;
        location /one  { ratelimit zone=one;  empty_gif; }
        location /two  { ratelimit zone=two;  empty_gif; }
        location /b2   { ratelimit zone=b2;   empty_gif; }
        location /min1 { ratelimit zone=min1; empty_gif; }
        location /min2 { ratelimit zone=min2; empty_gif; }
        location /hour { ratelimit zone=hour; empty_gif; }
        location /day  { ratelimit zone=day;  empty_gif; }
        location /per  { ratelimit zone=per;  empty_gif; }
        location /s503 { ratelimit zone=one; ratelimit_status 503; empty_gif; }
        location /free { empty_gif; }
    }
EOF2

sub ra_ok {
    my ($h, $lo, $hi, $name) = @_;
    my $ra = $h->{'retry-after'};
    ok(defined $ra && $ra =~ /^\d+$/ && $ra >= $lo && $ra <= $hi,
        "$name: Retry-After is an integer in [$lo, $hi]") or diag('Retry-After: ' . ($ra // 'missing') . "\n" . ($h->{':raw'} // ''));
    return $ra;
}

# 1r/s: one admitted, the next rejected with Retry-After: 1; waiting it out admits again.
{
    my $t0 = time;
    my ($st, $h, $body) = $n->get('/one?k=a');
    is($st, 200, '1r/s: first request admitted');
    ok(gif_body_ok($body), '... content served');
    ok(!defined $h->{'retry-after'}, '... no Retry-After on an admitted response');
    ($st, $h, $body) = $n->get('/one?k=a');
    my $t1 = time;
    is($st, 429, '1r/s: second request at once rejected with 429');
    ok(!gif_body_ok($body), '... content handler not run');
    my $ra = ra_ok($h, 1, 1, '1r/s');
    is($h->{':count'}{'retry-after'}, 1, '... exactly one Retry-After header');
    sleep 0.3;
    ($st) = $n->get('/one?k=a');
    is($st, 429, '1r/s: still rejected after 0.3s');
    my $wait = $t1 + ($ra // 1) - time;
    sleep $wait if $wait > 0;
    ($st) = $n->get('/one?k=a');
    is($st, 200, '1r/s: admitted after waiting Retry-After');
    ($st) = $n->get('/one?k=a');
    is($st, 429, '1r/s: and the next one rejected again');
}

# Rejected requests consume nothing: hammering during the wait does not delay the next slot.
# The times count from the first request's answer: it was admitted before that, however long
# a loaded machine took to answer it (from its sending, the next slot could be later than 1.1 s).
{
    my ($st) = $n->get('/one?k=hammer');
    my $t0 = time;
    is($st, 200, 'hammer: first admitted');
    my @rej;
    while (time < $t0 + 0.8) { push @rej, ($n->get('/one?k=hammer'))[0]; sleep 0.05; }
    ok(@rej >= 5 && !grep({ $_ != 429 } @rej), 'hammer: ' . scalar(@rej) . ' requests in 0.8s all rejected');
    sleep $t0 + 1.1 - time;
    ($st) = $n->get('/one?k=hammer');
    is($st, 200, 'hammer: admitted 1.1s after the first request despite the rejections');
}

# 2r/s: one every 500ms.
{
    my ($st) = $n->get('/two?k=a');
    my $t0 = time;
    is($st, 200, '2r/s: first admitted');
    my ($st2, $h) = $n->get('/two?k=a');
    is($st2, 429, '2r/s: second at once rejected');
    ra_ok($h, 1, 1, '2r/s');
    sleep $t0 + 0.6 - time;
    ($st) = $n->get('/two?k=a');
    is($st, 200, '2r/s: admitted after 0.6s (interval 0.5s)');
    ($st) = $n->get('/two?k=a');
    is($st, 429, '2r/s: next one at once rejected');
}

# burst=2: three at once, then one per second.
{
    my @s = statuses($n, '/b2?k=a', 3);
    is("@s", '200 200 200', 'burst=2: burst+1 admitted at once');
    my ($st, $h) = $n->get('/b2?k=a');
    my $t1 = time;
    is($st, 429, 'burst=2: the 4th rejected');
    my $ra = ra_ok($h, 1, 1, 'burst=2') // 1;
    sleep $t1 + $ra - time;
    @s = statuses($n, '/b2?k=a', 2);
    is("@s", '200 429', 'burst=2: one more admitted after 1s');
}

# Retry-After is rounded up to whole seconds of the real wait.
{
    for my $case (['/min1', 59, 60], ['/min2', 29, 30], ['/hour', 3599, 3600],
                  ['/day', 86399, 86400], ['/per', 89, 90]) {
        my ($path, $lo, $hi) = @$case;
        my ($st) = $n->get("$path?k=a");
        is($st, 200, "$path: first admitted");
        my ($st2, $h) = $n->get("$path?k=a");
        is($st2, 429, "$path: second rejected");
        ra_ok($h, $lo, $hi, $path);
    }
}

# ratelimit_status
{
    my ($st) = $n->get('/s503?k=s');
    is($st, 200, 'ratelimit_status 503: first admitted');
    my ($st2, $h) = $n->get('/s503?k=s');
    is($st2, 503, 'ratelimit_status 503: rejection uses 503');
    ra_ok($h, 1, 1, '503');
}

# A location without ratelimit is never limited.
{
    my @s = statuses($n, '/free?k=a', 10);
    is("@s", join(' ', ('200') x 10), 'location without ratelimit never limited');
}

unlike($n->error_log, qr/\[(emerg|alert|crit)\]/, 'no emerg/alert/crit in the error log');

done_testing;
