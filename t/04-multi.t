# Several ratelimit lines: all apply; a request rejected by any consumes from none.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use RLTest;
use Test::More;

avoid_window_edge(86400, 10);

my $n = start_nginx(<<'EOF2');
    ratelimit_zone a  key=$arg_k requests=5 period=1h burst=4;
    ratelimit_zone b  key=$arg_k requests=2 period=1h burst=1;
    ratelimit_zone lg key=$arg_k requests=4 period=1h algo=log;
    ratelimit_zone fx key=$arg_k requests=10 period=1d algo=fixed;
    ratelimit_zone sl key=$arg_k requests=6 period=1h algo=sliding;
    ratelimit_zone ip key=$arg_u requests=3 period=1h burst=2;
    server {
        listen 127.0.0.1:%%PORT%%;
        add_header X-Zone $ratelimit_zone always;
        add_header X-Status $ratelimit_status always;
        location /ab  { ratelimit zone=a; ratelimit zone=b; empty_gif; }
        location /ba  { ratelimit zone=b; ratelimit zone=a; empty_gif; }
        location /a   { ratelimit zone=a; empty_gif; }
        location /b   { ratelimit zone=b; empty_gif; }
        location /mix { ratelimit zone=lg; ratelimit zone=fx; ratelimit zone=sl; ratelimit zone=b; empty_gif; }
        location /lg  { ratelimit zone=lg; empty_gif; }
        location /fx  { ratelimit zone=fx; empty_gif; }
        location /sl  { ratelimit zone=sl; empty_gif; }
        location /two_keys { ratelimit zone=a; ratelimit zone=ip; empty_gif; }
        location /ip  { ratelimit zone=ip; empty_gif; }
    }
EOF2

sub st { my ($path, $count) = @_; return join ' ', statuses($n, $path, $count) }

for my $path ('/ab', '/ba') {
    my $k = substr($path, 1);
    is(st("$path?k=$k", 2), '200 200', "$path: 2 admitted (b allows 2)");
    my ($s, $h) = $n->get("$path?k=$k");
    is($s, 429, "$path: third rejected by b");
    is($h->{'x-zone'} // '', 'b', "$path: \$ratelimit_zone names the rejecting zone b");
    my %items = map { $_->{name} => $_ } parse_sf_list($h->{ratelimit});
    is($items{a}{r} // '', '3', "$path: RateLimit on the rejection shows a unconsumed (r=3)");
    is(st("$path?k=$k", 5), '429 429 429 429 429', "$path: 5 more rejected");
    is(st("/a?k=$k", 4), '200 200 200 429', "$path: a lost only 2 units to the admitted requests (3 left)");
}

# The first line rejects while the second has room: the second is not consumed.
{
    is(st('/a?k=z', 6), '200 200 200 200 200 429', 'a exhausted');
    my ($s, $h) = $n->get('/ab?k=z');
    is($s, 429, '/ab rejected by a');
    is($h->{'x-zone'} // '', 'a', '... $ratelimit_zone a');
    $n->get('/ab?k=z') for 1 .. 3;
    is(st('/b?k=z', 3), '200 200 429', 'b untouched by the 4 rejections (2 left)');
}

# Both exhausted: Retry-After is the longer wait (b: 1800s per unit vs a: 720s).
{
    is(st('/ab?k=w', 2), '200 200', 'both: 2 admitted');
    is(st('/a?k=w', 3), '200 200 200', 'both: a exhausted too');
    for my $path ('/ab', '/ba') {
        my ($s, $h) = $n->get("$path?k=w");
        is($s, 429, "$path both exhausted: rejected");
        like($h->{'retry-after'} // '', qr/^(1799|1800)$/, "$path: Retry-After is the longest wait (b, 1800s)")
          or diag($h->{':raw'});
    }
}

# Mixed algorithms: log + fixed + sliding + gcra.
{
    is(st('/mix?k=m', 2), '200 200', 'mix: 2 admitted');
    is(st('/mix?k=m', 4), '429 429 429 429', 'mix: b rejects');
    is(st('/lg?k=m', 3), '200 200 429', 'mix: log consumed exactly 2 (2 of 4 left)');
    is(st('/fx?k=m', 9), '200 200 200 200 200 200 200 200 429', 'mix: fixed consumed exactly 2 (8 of 10 left)');
    is(st('/sl?k=m', 5), '200 200 200 200 429', 'mix: sliding consumed exactly 2 (4 of 6 left)');
}

# A window limit rejecting in the middle of the list.
{
    is(st('/lg?k=n', 4), '200 200 200 200', 'log exhausted for n');
    is(st('/mix?k=n', 3), '429 429 429', 'mix: rejected by log');
    is(st('/b?k=n', 3), '200 200 429', 'mix: b (after log) not consumed');
    is(st('/fx?k=n', 11), join(' ', ('200') x 10, '429'), 'mix: fixed (after log) not consumed');
}

# Limits with different keys on one request.
{
    is(st('/two_keys?k=k1&u=u1', 2), '200 200', 'two keys: 2 admitted');
    is(st('/two_keys?k=k2&u=u1', 2), '200 429', 'two keys: u1 shared across k, third u1 request rejected');
    is(st('/a?k=k2', 5), '200 200 200 200 429', 'two keys: k2 consumed only by its admitted request');
    is(st('/ip?u=u1', 1), '429', 'two keys: u1 exhausted');
}

done_testing;
