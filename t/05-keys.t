# Keys: complex values, empty key exempt, distinct keys never share state.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use RLTest;
use Test::More;

my $n = start_nginx(<<'EOF2');
    ratelimit_zone k     key=$arg_k requests=1 period=1h;
    ratelimit_zone k2    key=$arg_k requests=1 period=1h;
    ratelimit_zone u     key=$arg_u requests=1 period=1h;
    ratelimit_zone hdr   key=$http_x_api_key requests=2 period=1h burst=1;
    ratelimit_zone ip    key=$binary_remote_addr requests=3 period=1h burst=2;
    ratelimit_zone combo key=$arg_a:$arg_b requests=1 period=1h;
    map $arg_vip $limited {
        1       "";
        default $arg_k;
    }
    ratelimit_zone mapped key=$limited requests=1 period=1h;
    server {
        listen 127.0.0.1:%%PORT%%;
        add_header X-Status $ratelimit_status always;
        location /k     { ratelimit zone=k; empty_gif; }
        location /k2    { ratelimit zone=k2; empty_gif; }
        location /u     { ratelimit zone=u; empty_gif; }
        location /ku    { ratelimit zone=k; ratelimit zone=u; empty_gif; }
        location /hdr   { ratelimit zone=hdr; empty_gif; }
        location /ip    { ratelimit zone=ip; empty_gif; }
        location /combo { ratelimit zone=combo; empty_gif; }
        location /mapped { ratelimit zone=mapped; empty_gif; }
    }
EOF2

sub st { my ($path, $count, $h) = @_; return join ' ', statuses($n, $path, $count, $h) }

is(st('/k?k=a', 2), '200 429', 'key a: 1 admitted');
is(st('/k?k=b', 2), '200 429', 'key b: own state');
is(st('/k?k=A', 2), '200 429', 'key A (case differs): own state');
is(st('/k?k=a%20', 2), '200 429', 'key "a%20": own state');

# Empty key: exempt, never limited, $ratelimit_status EXEMPT.
{
    my @st;
    my %status;
    for (1 .. 10) {
        my ($s, $h) = $n->get('/k');
        push @st, $s;
        $status{ $h->{'x-status'} // '(none)' }++;
    }
    is("@st", join(' ', ('200') x 10), 'no key: 10 requests all admitted');
    is(join(',', keys %status), 'EXEMPT', 'no key: $ratelimit_status EXEMPT');
    my ($s, $h) = $n->get('/k?k=');
    is($s, 200, 'empty k=: admitted');
    is($h->{'x-status'} // '', 'EXEMPT', 'empty k=: EXEMPT');
    is(st('/k?k=c', 2), '200 429', 'a real key after exempt requests is still counted');
}

# Long keys differing in the last byte.
{
    my $long = 'x' x 3000;
    is(st("/k?k=${long}1", 2), '200 429', 'long key 1');
    is(st("/k?k=${long}2", 2), '200 429', 'long key 2 (differs in the last byte): own state');
}

# Many distinct keys never share state.
{
    my $bad = 0;
    for my $i (1 .. 200) {
        my ($s) = $n->get("/k?k=many$i");
        $bad++ if $s != 200;
    }
    is($bad, 0, '200 distinct keys each admitted once');
    my ($s) = $n->get('/k?k=many1');
    is($s, 429, 'and the first one is still limited');
}

# Same key value in two zones: independent.
is(st('/k2?k=a', 2), '200 429', 'same key in another zone: own state');
is(st('/u?u=a', 2), '200 429', 'same key value through another variable and zone: own state');

# Two zones, one key empty: PASSED (not EXEMPT), only the non-empty one counts.
{
    my ($s, $h) = $n->get('/ku?u=only');
    is($s, 200, 'only u set: admitted');
    is($h->{'x-status'} // '', 'PASSED', 'only u set: PASSED');
    ($s, $h) = $n->get('/ku?u=only');
    is($s, 429, 'only u set: second rejected by u');
    ($s, $h) = $n->get('/ku');
    is($h->{'x-status'} // '', 'EXEMPT', 'neither set: EXEMPT');
    is(st('/k?k=ku_untouched', 2), '200 429', 'k untouched (sanity)');
}

# Header keys.
{
    is(st('/hdr', 2, { 'X-Api-Key' => 'one' }), '200 200', 'X-Api-Key one: 2 admitted');
    is(st('/hdr', 1, { 'X-Api-Key' => 'one' }), '429', 'X-Api-Key one: then rejected');
    is(st('/hdr', 2, { 'X-Api-Key' => 'two' }), '200 200', 'X-Api-Key two: own state');
    is(st('/hdr', 5), '200 200 200 200 200', 'no X-Api-Key: exempt');
}

# Binary address key: all our requests share it.
is(st('/ip?k=1', 2) . ' ' . st('/ip?k=2', 2), '200 200 200 429', '$binary_remote_addr: shared across args');

# Composite key a:b.
{
    is(st('/combo?a=x&b=y', 2), '200 429', 'combo x:y');
    is(st('/combo?a=xy&b=', 2), '200 429', 'combo xy: is another key');
    is(st('/combo?a=x&b=yy', 2), '200 429', 'combo x:yy is another key');
}

# map to an empty key exempts.
{
    is(st('/mapped?k=m&vip=1', 5), '200 200 200 200 200', 'map to "" exempts');
    is(st('/mapped?k=m', 2), '200 429', 'same k without vip is limited (and the exempt requests consumed nothing)');
}

done_testing;
