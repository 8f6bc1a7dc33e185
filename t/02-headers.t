# RateLimit-Policy / RateLimit (draft-10), legacy X-RateLimit-*, all, off.
# runs alone: it measures time (six requests within one emission interval of 100 ms)
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use RLTest;
use Test::More;
use POSIX qw(ceil);
use Time::HiRes qw(time);

avoid_window_edge(3600, 5);

my $n = start_nginx(<<'EOF2');
    ratelimit_zone a key=$arg_k rate=10r/s burst=4;
    ratelimit_zone m key=$arg_k rate=30r/m;
    ratelimit_zone p key=$arg_k requests=100 period=15m;
    ratelimit_zone h key=$arg_k requests=3 period=1h burst=2;
    ratelimit_zone f key=$arg_k requests=5 period=1h algo=fixed;
    ratelimit_zone d key=$arg_k rate=2r/d burst=1;
    server {
        listen 127.0.0.1:%%PORT%%;
        location /on     { ratelimit zone=a; empty_gif; }
        location /m      { ratelimit zone=m; empty_gif; }
        location /p      { ratelimit zone=p; empty_gif; }
        location /f      { ratelimit zone=f; empty_gif; }
        location /d      { ratelimit zone=d; empty_gif; }
        location /ha     { ratelimit zone=h; ratelimit zone=a; empty_gif; }
        location /ah     { ratelimit zone=a; ratelimit zone=h; empty_gif; }
        location /legacy { ratelimit_headers legacy; ratelimit zone=a; ratelimit zone=h; empty_gif; }
        location /all    { ratelimit_headers all; ratelimit zone=a; ratelimit zone=h; empty_gif; }
        location /off    { ratelimit_headers off; ratelimit zone=h; empty_gif; }
        location /explicit_on { ratelimit_headers on; ratelimit zone=h; empty_gif; }
    }
EOF2

sub hdr { my ($h, $k) = @_; return $h->{$k} // '(missing)' }

# One zone, default headers. The six requests must come within one emission interval (100 ms
# at 10r/s), else a unit refills meanwhile and r is one more: a run that took longer (a loaded
# machine) shows nothing and is made again on a new key, five times at most; the last is checked.
{
    my @res;
    for my $try (1 .. 5) {
        my $k = fresh_key('on');
        my $t0 = time;
        @res = map { [$n->get("/on?k=$k")] } 1 .. 6;
        last if time - $t0 < 0.09;
    }
    for my $i (1 .. 5) {
        my ($st, $h) = @{ $res[ $i - 1 ] };
        is($st, 200, "/on request $i admitted");
        is(hdr($h, 'ratelimit-policy'), '"a";q=10;w=1', "/on request $i RateLimit-Policy");
        is($h->{':count'}{'ratelimit-policy'}, 1, '... one RateLimit-Policy field');
        is($h->{':count'}{'ratelimit'}, 1, '... one RateLimit field');
        my $want_r = 5 - $i;
        is(hdr($h, 'ratelimit'), "\"a\";r=$want_r;t=1", "/on request $i RateLimit r=$want_r t=1");
        ok(!defined $h->{'x-ratelimit-limit'}, '... no legacy headers with "on"');
    }
    my ($st, $h) = @{ $res[5] };
    is($st, 429, '/on 6th rejected');
    is(hdr($h, 'ratelimit-policy'), '"a";q=10;w=1', 'rejected response carries RateLimit-Policy');
    is(hdr($h, 'ratelimit'), '"a";r=0;t=1', 'rejected response carries RateLimit r=0');
    is(hdr($h, 'retry-after'), '1', 'rejected response carries Retry-After');
}

# q and w for the rate forms.
{
    my ($st, $h) = $n->get('/m?k=x');
    is(hdr($h, 'ratelimit-policy'), '"m";q=30;w=60', 'rate=30r/m -> q=30;w=60');
    is(hdr($h, 'ratelimit'), '"m";r=0;t=2', 'rate=30r/m, no burst: r=0, t=2 (one interval)');
    ($st, $h) = $n->get('/m?k=x');
    is($st, 429, 'rate=30r/m: second rejected');
    like(hdr($h, 'ratelimit'), qr/^"m";r=0;t=[12]$/, '... RateLimit on the rejection');

    ($st, $h) = $n->get('/p?k=x');
    is(hdr($h, 'ratelimit-policy'), '"p";q=100;w=900', 'requests=100 period=15m -> q=100;w=900');
    is(hdr($h, 'ratelimit'), '"p";r=0;t=9', '... r=0;t=9');

    ($st, $h) = $n->get('/d?k=x');
    is(hdr($h, 'ratelimit-policy'), '"d";q=2;w=86400', 'rate=2r/d -> q=2;w=86400');
    is(hdr($h, 'ratelimit'), '"d";r=1;t=43200', '... r=1 (burst 1), t=43200');
}

# Fixed window: t is the end of the window.
{
    my ($st, $h) = $n->get('/f?k=x');
    my $now = time;
    my $left = ceil(3600 - ($now - 3600 * int($now / 3600)));
    is(hdr($h, 'ratelimit-policy'), '"f";q=5;w=3600', 'fixed 5 per 1h -> q=5;w=3600');
    my ($r, $t) = hdr($h, 'ratelimit') =~ /^"f";r=(\d+);t=(\d+)$/;
    is($r, 4, 'fixed: r=4 after one request');
    ok(defined $t && abs($t - $left) <= 2, "fixed: t=$t is the time to the end of the hour window ($left)");
}

# Several limits: one item per line, in the order of the lines.
{
    my ($st, $h) = $n->get('/ha?k=ha');
    is(hdr($h, 'ratelimit-policy'), '"h";q=3;w=3600, "a";q=10;w=1', '/ha: policy items in line order');
    like(hdr($h, 'ratelimit'), qr/^"h";r=2;t=(1199|1200), "a";r=4;t=1$/, '/ha: RateLimit items in line order');
    ($st, $h) = $n->get('/ah?k=ah');
    is(hdr($h, 'ratelimit-policy'), '"a";q=10;w=1, "h";q=3;w=3600', '/ah: policy items in line order');
    like(hdr($h, 'ratelimit'), qr/^"a";r=4;t=1, "h";r=2;t=(1199|1200)$/, '/ah: RateLimit items in line order');
    is($h->{':count'}{'ratelimit'}, 1, '... a single RateLimit field');
}

# legacy: the most restrictive limit only.
{
    my ($st, $h) = $n->get('/legacy?k=leg');
    is($st, 200, 'legacy: admitted');
    ok(!defined $h->{'ratelimit'} && !defined $h->{'ratelimit-policy'}, 'legacy: no draft headers');
    is(hdr($h, 'x-ratelimit-limit'), '3', 'legacy: X-RateLimit-Limit of the most restrictive (h)');
    is(hdr($h, 'x-ratelimit-remaining'), '2', 'legacy: X-RateLimit-Remaining 2');
    like(hdr($h, 'x-ratelimit-reset'), qr/^(1199|1200)$/, 'legacy: X-RateLimit-Reset is a delta in seconds');
    $n->get('/legacy?k=leg') for 1 .. 2;
    ($st, $h) = $n->get('/legacy?k=leg');
    is($st, 429, 'legacy: 4th rejected');
    is(hdr($h, 'x-ratelimit-limit'), '3', 'legacy on rejection: limit');
    is(hdr($h, 'x-ratelimit-remaining'), '0', 'legacy on rejection: remaining 0');
    like(hdr($h, 'x-ratelimit-reset'), qr/^\d+$/, 'legacy on rejection: reset');
    like(hdr($h, 'retry-after'), qr/^(1199|1200)$/, 'legacy on rejection: Retry-After');
}

# all: both sets.
{
    my ($st, $h) = $n->get('/all?k=all');
    is(hdr($h, 'ratelimit-policy'), '"a";q=10;w=1, "h";q=3;w=3600', 'all: RateLimit-Policy');
    like(hdr($h, 'ratelimit'), qr/^"a";r=4;t=1, "h";r=2;t=(1199|1200)$/, 'all: RateLimit');
    is(hdr($h, 'x-ratelimit-limit'), '3', 'all: X-RateLimit-Limit');
    is(hdr($h, 'x-ratelimit-remaining'), '2', 'all: X-RateLimit-Remaining');
    like(hdr($h, 'x-ratelimit-reset'), qr/^(1199|1200)$/, 'all: X-RateLimit-Reset');
}

# off: nothing but Retry-After on rejection.
{
    my @hs;
    for (1 .. 4) { my ($st, $h) = $n->get('/off?k=off'); push @hs, [$st, $h]; }
    is(join(' ', map { $_->[0] } @hs), '200 200 200 429', 'off: limiting still works');
    my @leak = grep { my $h = $_->[1]; grep { defined $h->{$_} } qw(ratelimit ratelimit-policy x-ratelimit-limit x-ratelimit-remaining x-ratelimit-reset) } @hs;
    is(scalar @leak, 0, 'off: no rate-limit header on any response');
    like(hdr($hs[3][1], 'retry-after'), qr/^(1199|1200)$/, 'off: Retry-After still sent on rejection');
    my ($st, $h) = $n->get('/explicit_on?k=eon');
    is(hdr($h, 'ratelimit-policy'), '"h";q=3;w=3600', 'explicit "on" sends RateLimit-Policy');
    ok(!defined $h->{'x-ratelimit-limit'}, 'explicit "on" sends no legacy header');
}

done_testing;
