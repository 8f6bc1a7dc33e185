# A request is counted once: not again after internal redirects, not for subrequests.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use RLTest;
use Test::More;

my $n = start_nginx(<<'EOF2', files => { 'html/page.shtml' => 'A<!--# include virtual="/sub.txt" -->B<!--# include virtual="/sub.txt" -->C', 'html/sub.txt' => 'S', 'html/add.txt' => 'X' });
    ratelimit_zone z   key=$http_x_k requests=10 period=1h burst=9;
    ratelimit_zone one key=$http_x_k requests=1 period=1h;
    ratelimit_zone sub key=$http_x_k requests=1 period=1h;
    server {
        listen 127.0.0.1:%%PORT%%;
        root %%DIR%%/html;
        add_header X-Status $ratelimit_status always;

        location /a { ratelimit zone=z; try_files /nonexistent @b; }
        location @b { ratelimit zone=z; empty_gif; }

        location /e { ratelimit zone=z; root %%DIR%%/nothing; error_page 404 = /h; }
        location /h { ratelimit zone=z; empty_gif; }

        location /r   { ratelimit zone=one; error_page 429 /lim; empty_gif; }
        location /lim { ratelimit zone=one; empty_gif; }

        location = /page.shtml { ratelimit zone=z; ssi on; default_type text/html; }
        location = /sub.txt    { ratelimit zone=sub; }

        location /p     { ratelimit zone=z; auth_request /auth; empty_gif; }
        location = /auth { internal; ratelimit zone=sub; empty_gif; }

        location /add { ratelimit zone=z; add_before_body /add.txt; addition_types *; empty_gif; }
        location = /add.txt { ratelimit zone=sub; }

        location /z { ratelimit zone=z; empty_gif; }
    }
EOF2

sub r_after {
    my ($path, $key) = @_;
    my ($s, $h, $b) = $n->get($path, { 'X-K' => $key });
    my ($item) = parse_sf_list($h->{ratelimit});
    return (($s // 'ERR') . ' r=' . ($item ? $item->{r} // '?' : '-'), $b, $h);
}
sub seq {
    my ($path, $key, $count) = @_;
    return join ', ', map { (r_after($path, $key))[0] } 1 .. $count;
}
sub left_in_z {    # units left in z for $key, read through a plain location with quantity 1
    my ($key) = @_;
    my ($x) = r_after('/z', $key);
    my ($r) = $x =~ /r=(\d+)/;
    return defined $r ? $r + 1 : undef;
}

is(seq('/a', 'tf', 3), '200 r=9, 200 r=8, 200 r=7', 'try_files to a named location with the same zone: one unit per request');
is(left_in_z('tf'), 7, '... 7 left');

is(seq('/e', 'ep', 3), '200 r=9, 200 r=8, 200 r=7', 'error_page internal redirect to a limited location: one unit per request');
is(left_in_z('ep'), 7, '... 7 left');

# Rejection redirected by error_page to a location limited by the same zone: not checked again.
{
    my ($s, $h, $b) = $n->get('/r', { 'X-K' => 'rj' });
    is($s, 200, 'error_page 429: first admitted');
    ($s, $h, $b) = $n->get('/r', { 'X-K' => 'rj' });
    is($s, 429, 'error_page 429: second rejected');
    ok(gif_body_ok($b), 'error_page 429: served by the error_page location (not rejected again there)')
      or diag("body: " . substr($b // '', 0, 200));
    is($h->{'x-status'} // '', 'REJECTED', 'error_page 429: $ratelimit_status still REJECTED after the redirect');
    like($h->{'retry-after'} // '', qr/^\d+$/, 'error_page 429: Retry-After kept');
}

# SSI subrequests to a location with a 1-request limit are not counted.
{
    my ($x, $b) = r_after('/page.shtml', 'ssi');
    is($x, '200 r=9', 'SSI page: one unit for the main request');
    is($b, 'ASBSC', 'SSI page: both subrequests served (not limited)');
    ($x, $b) = r_after('/page.shtml', 'ssi');
    is($x, '200 r=8', 'SSI page again: one more unit');
    is($b, 'ASBSC', 'SSI page again: subrequests served');
    my ($s) = $n->get('/sub.txt', { 'X-K' => 'ssi' });
    is($s, 200, 'the subrequests consumed nothing from their zone');
}

# auth_request subrequest.
{
    is(seq('/p', 'auth', 3), '200 r=9, 200 r=8, 200 r=7', 'auth_request: one unit per request, the auth subrequest not counted');
    my ($s) = $n->get('/auth', { 'X-K' => 'auth' });
    is($s, 404, '(/auth is internal)');
}

# addition subrequest.
{
    my ($x, $b) = r_after('/add', 'add');
    is($x, '200 r=9', 'add_before_body: one unit');
    like($b, qr/^XGIF89a/, 'add_before_body: subrequest served');
    ($x, $b) = r_after('/add', 'add');
    like($b, qr/^XGIF89a/, 'add_before_body again: subrequest served (not counted)');
}

done_testing;
