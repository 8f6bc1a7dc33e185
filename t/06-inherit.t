# Inheritance of ratelimit lines (like limit_req) and of the other directives.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use RLTest;
use Test::More;

my $n = start_nginx(<<'EOF2');
    ratelimit_zone h key=$arg_k requests=1 period=1h;
    ratelimit_zone s key=$arg_k requests=2 period=1h burst=1;
    ratelimit_zone l key=$arg_k requests=3 period=1h burst=2;
    ratelimit_zone w key=$arg_k requests=4 period=1h;
    ratelimit_zone d4 key=$arg_k requests=3 period=1h burst=2;

    ratelimit zone=h;
    ratelimit_status 503;

    server {                      # no lines of its own: inherits http's
        listen 127.0.0.1:%%PORT%%;
        location /inh { empty_gif; }
        location /own { ratelimit zone=l; empty_gif; }
        location /outer {
            ratelimit zone=l;
            location /outer/inner { empty_gif; }
            location /outer/own   { ratelimit zone=s; empty_gif; }
        }
        location /st { ratelimit_status 429; empty_gif; }
    }

    server {                      # its own lines replace http's
        listen 127.0.0.1:%%PORT1%%;
        ratelimit zone=s;
        ratelimit_headers off;
        location /inh { empty_gif; }
        location /own { ratelimit zone=l; ratelimit_headers legacy; empty_gif; }
    }

    server {                      # ratelimit_algo inherited
        listen 127.0.0.1:%%PORT2%%;
        ratelimit_algo fixed;
        location /w  { ratelimit zone=w; empty_gif; }
        location /wg { ratelimit_algo gcra; ratelimit zone=w; empty_gif; }
        location /outer {
            ratelimit_algo log;
            location /outer/inner { ratelimit zone=w; empty_gif; }
        }
    }

    server {                      # dry run and log level inherited
        listen 127.0.0.1:%%PORT3%%;
        ratelimit_dry_run on;
        ratelimit_log_level warn;
        add_header X-Status $ratelimit_status always;
        location /dry   { ratelimit zone=d4; empty_gif; }
        location /nodry { ratelimit_dry_run off; ratelimit zone=d4; empty_gif; }
    }
EOF2

my ($p0, $p1, $p2, $p3) = $n->ports;

sub st {
    my ($port, $path, $count) = @_;
    my @s;
    for (1 .. $count) { push @s, (http_request($port, $path))[0] // 'ERR' }
    return "@s";
}
sub zones_of {
    my ($port, $path) = @_;
    my ($s, $h) = http_request($port, $path);
    return join ',', map { $_->{name} } parse_sf_list($h->{'ratelimit-policy'});
}

# Server 1 (zones are shared by all servers: each check uses its own key)
is(zones_of($p0, '/inh?k=z1'), 'h', 'server without lines inherits the http line');
is(st($p0, '/inh?k=a', 2), '200 503', '... and limits by it, status 503 inherited from http');
is(zones_of($p0, '/own?k=z2'), 'l', 'location with its own line does not inherit');
is(st($p0, '/own?k=a', 4), '200 200 200 503', '... limited by l only (3)');
is(zones_of($p0, '/outer/inner?k=z3'), 'l', 'nested location inherits its parent location\'s line');
is(st($p0, '/outer/inner?k=b', 4), '200 200 200 503', '... 3 admitted');
is(zones_of($p0, '/outer/own?k=z4'), 's', 'nested location with its own line');
is(st($p0, '/outer/own?k=a', 3), '200 200 503', '... 2 admitted');
is(st($p0, '/st?k=c', 2), '200 429', 'location ratelimit_status overrides http');

# Server 2
{
    my ($s, $h) = http_request($p1, '/inh?k=z5');
    ok(!defined $h->{'ratelimit-policy'} && !defined $h->{'ratelimit'}, 'ratelimit_headers off inherited from server');
    is(st($p1, '/inh?k=d', 3), '200 200 503', 'server line s replaces the http line h');
    ($s, $h) = http_request($p1, '/inh?k=d');
    like($h->{'retry-after'} // '', qr/^\d+$/, 'Retry-After sent with headers off');
    ($s, $h) = http_request($p1, '/own?k=z6');
    is($h->{'x-ratelimit-limit'} // '', '3', 'location ratelimit_headers legacy overrides server off');
    is(st($p1, '/own?k=e', 4), '200 200 200 503', 'location line l replaces server line s');
}

# Server 3
is(st($p2, '/w?k=a', 5), '200 200 200 200 503', 'ratelimit_algo fixed inherited from server (4 per window)');
is(st($p2, '/wg?k=a', 2), '200 503', 'location ratelimit_algo gcra overrides (1 without burst)');
is(st($p2, '/outer/inner?k=a', 5), '200 200 200 200 503', 'ratelimit_algo log inherited by a nested location');

# Server 4
{
    my @st;
    my @x;
    for (1 .. 5) {
        my ($s, $h) = http_request($p3, '/dry?k=a');
        push @st, $s;
        push @x, $h->{'x-status'} // '';
    }
    is("@st", '200 200 200 200 200', 'ratelimit_dry_run on inherited: nothing rejected');
    is("@x", 'PASSED PASSED PASSED REJECTED_DRY_RUN REJECTED_DRY_RUN', '... would-be rejections marked');
    is(st($p3, '/nodry?k=b', 4), '200 200 200 503', 'location ratelimit_dry_run off overrides');
    like($n->error_log, qr/\[warn\][^\n]*limiting request by zone "d4"/, 'ratelimit_log_level warn inherited from server');
    like($n->error_log, qr/\[warn\][^\n]*limiting request \(dry run\) by zone "d4"/, '... also for dry run');
    unlike($n->error_log, qr/\[error\][^\n]*limiting request[^\n]*zone "d4"/, '... and not at error');
}

done_testing;
