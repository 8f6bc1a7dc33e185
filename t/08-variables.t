# $ratelimit_status, $ratelimit_zone, $ratelimit_limit, $ratelimit_remaining, $ratelimit_reset
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use RLTest;
use Test::More;
use Time::HiRes qw(sleep time);

my $n = start_nginx(<<'EOF2');
    ratelimit_zone a key=$arg_k requests=5 period=1h burst=4;
    ratelimit_zone b key=$arg_k requests=2 period=1h burst=1;
    ratelimit_zone x key=$arg_x requests=5 period=1h burst=4;
    log_format rl '$uri|$arg_k|$status|$ratelimit_status|$ratelimit_zone|$ratelimit_limit|$ratelimit_remaining|$ratelimit_reset';
    server {
        listen 127.0.0.1:%%PORT%%;
        access_log %%DIR%%/access.log rl;
        add_header X-Status    $ratelimit_status always;
        add_header X-Zone      $ratelimit_zone always;
        add_header X-Limit     $ratelimit_limit always;
        add_header X-Remaining $ratelimit_remaining always;
        add_header X-Reset     $ratelimit_reset always;
        location /a    { ratelimit zone=a; empty_gif; }
        location /ab   { ratelimit zone=a; ratelimit zone=b; empty_gif; }
        location /abq  { ratelimit zone=a quantity=3; ratelimit zone=b; empty_gif; }
        location /ax   { ratelimit zone=a; ratelimit zone=x; empty_gif; }
        location /none { empty_gif; }
        location /ret  { return 200 "[$ratelimit_status][$ratelimit_zone][$ratelimit_limit][$ratelimit_remaining][$ratelimit_reset]"; }
    }
EOF2

sub vars {
    my ($path) = @_;
    my ($s, $h) = $n->get($path);
    return join '|', $s // 'ERR', map { $h->{"x-$_"} // '-' } qw(status zone limit remaining reset);
}

like(vars('/a?k=1'), qr/^200\|PASSED\|a\|5\|4\|(719|720)$/, 'one zone: PASSED a 5 4 720');

like(vars('/ab?k=2'), qr/^200\|PASSED\|b\|2\|1\|(1799|1800)$/, 'two zones: the most restrictive (b, fewest remaining)');
like(vars('/ab?k=2'), qr/^200\|PASSED\|b\|2\|0\|(3599|3600)$/, 'two zones: b remaining 0, reset = full refill');
like(vars('/ab?k=2'), qr/^429\|REJECTED\|b\|2\|0\|\d+$/, 'rejected: REJECTED by b');

# The rejecting zone is named even when another limit has fewer units left.
like(vars('/abq?k=3'), qr/^200\|PASSED\|b\|2\|1\|/, 'abq first: a has 2 left, b 1: most restrictive b');
like(vars('/abq?k=3'), qr/^429\|REJECTED\|a\|5\|2\|/, 'abq second: a (cost 3, 2 left) rejects: zone a although b has fewer left');

# Exempt
like(vars('/ax'), qr/^200\|EXEMPT\|/, 'every key empty: EXEMPT');
like(vars('/ax?x=1'), qr/^200\|PASSED\|x\|5\|4\|/, 'one key empty: PASSED, the applied zone');

# No ratelimit: empty.
{
    my ($s, $h) = $n->get('/none?k=1');
    is($s, 200, 'no ratelimit: 200');
    ok(!defined $h->{'x-status'}, 'no ratelimit: $ratelimit_status empty (header not sent)')
      or diag("X-Status: $h->{'x-status'}");
    ok(!defined $h->{'x-zone'}, 'no ratelimit: $ratelimit_zone empty');
    my ($s2, $h2, $body) = $n->get('/ret?k=1');
    is($body, '[][][][][]', 'no ratelimit: all variables empty in a return body');
}

# Access log sees the same values, for passed and rejected requests.
{
    my $log = '';
    my $deadline = time + 3;
    while (time < $deadline) {
        $log = RLTest::slurp($n->dir . '/access.log');
        last if $log =~ m{^/ret\|}m;
        sleep 0.05;
    }
    like($log, qr{^/a\|1\|200\|PASSED\|a\|5\|4\|(719|720)$}m, 'access log: passed request');
    like($log, qr{^/ab\|2\|429\|REJECTED\|b\|2\|0\|\d+$}m, 'access log: rejected request');
    like($log, qr{^/abq\|3\|429\|REJECTED\|a\|5\|2\|\d+$}m, 'access log: rejected by a');
    like($log, qr{^/ax\|-?\|200\|EXEMPT\|}m, 'access log: exempt');
    like($log, qr{^/none\|1\|200\|-?\|}m, 'access log: no ratelimit, empty status');
}

done_testing;
