# quantity: fixed costs, 0 (report only), variables, costs above the capacity.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use RLTest;
use Test::More;

my @algos = qw(gcra token leaky fixed sliding log);
avoid_window_edge(3600, 10);

my ($zones, $locs) = ('', '');
for my $a (@algos) {
    my $burst = $a =~ /^(gcra|token|leaky)$/ ? ' burst=9' : '';
    $zones .= "    ratelimit_zone qa_$a key=\$arg_k requests=10 period=1h$burst algo=$a;\n";
    $locs  .= "        location /alg/$a { ratelimit zone=qa_$a quantity=\$arg_cost; empty_gif; }\n";
}

my $n = start_nginx(<<"EOF2");
    ratelimit_zone q key=\$arg_k requests=10 period=1h burst=9;
    ratelimit_zone qh key=\$arg_k requests=10 period=1h burst=9;
$zones
    map \$arg_tier \$tier_cost {
        default 1;
        big     5;
    }
    server {
        listen 127.0.0.1:%%PORT%%;
        add_header X-Status \$ratelimit_status always;
        location /one   { ratelimit zone=q; empty_gif; }
        location /three { ratelimit zone=q quantity=3; empty_gif; }
        location /zero  { ratelimit zone=q quantity=0; empty_gif; }
        location /c     { ratelimit zone=q quantity=\$arg_cost; empty_gif; }
        location /map   { ratelimit zone=q quantity=\$tier_cost; empty_gif; }
        location /h     { ratelimit zone=qh quantity=\$http_x_cost; empty_gif; }
$locs
    }
EOF2

sub req {
    my ($path) = @_;
    my ($s, $h) = $n->get($path);
    my ($item) = parse_sf_list($h->{ratelimit});
    return ($s // 'ERR') . ' r=' . ($item ? $item->{r} // '?' : '-');
}

is(req('/three?k=a'), '200 r=7', 'quantity=3: r=7');
is(req('/three?k=a'), '200 r=4', 'quantity=3: r=4');
is(req('/three?k=a'), '200 r=1', 'quantity=3: r=1');
is(req('/three?k=a'), '429 r=1', 'quantity=3 with 1 left: rejected, nothing consumed');
is(req('/zero?k=a'),  '200 r=1', 'quantity=0: admitted, reports r=1');
is(req('/one?k=a'),   '200 r=0', 'quantity=1: the last unit');
is(req('/zero?k=a'),  '200 r=0', 'quantity=0 with nothing left: still admitted (report only)');
is(req('/one?k=a'),   '429 r=0', 'then quantity=1 rejected');

{
    my @r = map { req('/zero?k=z') } 1 .. 5;
    is("@r", join(' ', ('200 r=10') x 5), 'quantity=0 on a fresh key never consumes');
    my ($s, $h) = $n->get('/zero?k=z');
    is($h->{'x-status'} // '', 'PASSED', 'quantity=0: $ratelimit_status PASSED');
    is(req('/c?k=z&cost=10'), '200 r=0', 'the key still has its full 10');
}

# Variable quantity.
is(req('/c?k=b&cost=4'),  '200 r=6', '$arg_cost=4');
is(req('/c?k=b&cost=0'),  '200 r=6', '$arg_cost=0 consumes nothing');
is(req('/c?k=b&cost=6'),  '200 r=0', '$arg_cost=6 takes the rest');
is(req('/c?k=b&cost=1'),  '429 r=0', 'then rejected');

is(req('/c?k=c&cost=11'), '429 r=10', 'cost above the capacity: rejected even on a fresh key, nothing consumed');
is(req('/c?k=c&cost=11'), '429 r=10', '... always');
is(req('/c?k=c&cost=10'), '200 r=0', '... the full capacity is still there');

is(req('/map?k=d&tier=big'), '200 r=5', 'quantity from a map: 5');
is(req('/map?k=d'),          '200 r=4', 'quantity from a map: default 1');

# README: an empty value counts 1; a non-number counts 1 and is logged at warn.
is(req('/c?k=e'),           '200 r=9', 'empty $arg_cost counts 1');
is(req('/c?k=f&cost=abc'),  '200 r=9', 'non-numeric $arg_cost counts 1');
like($n->error_log, qr/\[warn\][^\n]*abc/, '... and is logged at warn');

# A number too large to represent is a cost no limit admits: rejected (never as 1), logged.
for my $big ('1000000000001', '18446744073709551616', '9' x 400) {
    my $short = length $big > 24 ? substr($big, 0, 12) . '...' : $big;
    is(req("/c?k=g&cost=$big"), '429 r=10', "cost $short: rejected, nothing consumed");
    for my $a (@algos) {
        is(req("/alg/$a?k=big&cost=$big"), '429 r=10', "$a: cost $short rejected");
    }
}
like($n->error_log, qr/\[error\][^\n]*limiting request by zone "q", quantity over 1000000000000 exceeds its capacity/,
     'a cost too large is logged as a rejection');
# The warning shows the value made safe: no control bytes, capped.
{
    my ($st) = $n->get('/h?k=h', { 'X-Cost' => "\x1b[31m" . ('x' x 300) });
    is($st, 200, 'an invalid quantity from a header counts 1');
    my ($line) = grep { /invalid quantity/ && /x{20}/ } split /\n/, $n->error_log;
    ok($line && $line =~ /\\x1b\[31m/ && $line !~ /[\x00-\x1f]/ && length($line) < 400,
       'an invalid quantity is logged escaped and capped') or diag($line);
}

# Each algorithm honours quantity.
for my $a (@algos) {
    my @r = map { req("/alg/$a?k=q&cost=$_") } 4, 4, 4, 2, 1, 0;
    is("@r", '200 r=6 200 r=2 429 r=2 200 r=0 429 r=0 200 r=0',
        "$a: costs 4 4 4(rejected) 2 1(rejected) 0");
}

unlike($n->error_log, qr/\[(emerg|alert|crit)\]/, 'no emerg/alert/crit in the error log');

done_testing;
