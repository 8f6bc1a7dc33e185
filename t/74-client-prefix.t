# ratelimit_client_prefix and $ratelimit_client_prefix: the client address after realip, cut
# to a prefix (binary), as a zone's key: the clients of one /64 (or /24, /48) share a limit.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use RLTest;
use RLTest::Http ();
use IO::Socket::UNIX;
use Test::More;

# Every zone admits one request an hour per key: the second request of a key is rejected, so
# a client's first request tells whether it shares its key with one seen before.
my $n = start_nginx(<<'EOF2');
    set_real_ip_from 127.0.0.1;
    real_ip_header X-Forwarded-For;
    ratelimit_client_prefix ipv4=24;
    ratelimit_zone inh  key=$ratelimit_client_prefix requests=1 period=1h;
    ratelimit_zone p48  key=$ratelimit_client_prefix requests=1 period=1h;
    ratelimit_zone full key=$ratelimit_client_prefix requests=1 period=1h;
    ratelimit_zone unix key=$ratelimit_client_prefix requests=1 period=1h;
    server {
        listen 127.0.0.1:%%PORT%%;
        add_header X-Status $ratelimit_status always;
        # http's ipv4=24, and the default ipv6=64
        location /inh  { ratelimit zone=inh; empty_gif; }
        location /show { return 200 $ratelimit_client_prefix; }
        # this location's own: ipv4 is back to its default, 32 (the directive is taken whole)
        location /p48  { ratelimit_client_prefix ipv6=48; ratelimit zone=p48; empty_gif; }
        location /show48 { ratelimit_client_prefix ipv6=48; return 200 $ratelimit_client_prefix; }
        location /show_odd { ratelimit_client_prefix ipv4=1 ipv6=127; return 200 $ratelimit_client_prefix; }
    }
    server {
        listen 127.0.0.1:%%PORT1%%;
        listen unix:%%DIR%%/unix.sock;
        add_header X-Status $ratelimit_status always;
        ratelimit_client_prefix ipv4=32 ipv6=128;
        location /full { ratelimit zone=full; empty_gif; }
        location /show { return 200 $ratelimit_client_prefix; }
        location /unix { ratelimit zone=unix; empty_gif; }
    }
EOF2
my $port1 = ($n->ports)[1];

# The status of a request from client $ip (X-Forwarded-For, trusted from 127.0.0.1).
sub from {
    my ($path, $ip, $port) = @_;
    my ($s) = $n->get_port($port // $n->port, $path, { 'X-Forwarded-For' => $ip });
    return $s // 'ERR';
}

# $ratelimit_client_prefix of client $ip, in hex.
sub shown {
    my ($path, $ip, $port) = @_;
    my ($s, undef, $body) = $n->get_port($port // $n->port, $path, { 'X-Forwarded-For' => $ip });
    return 'ERR' unless defined $s && $s == 200;
    return unpack('H*', $body);
}

# The bytes of the variable.
is(shown('/show', '10.1.2.3'), '0a010200', 'IPv4 /24: 4 bytes, the host byte zeroed');
is(shown('/show', '10.1.2.200'), '0a010200', 'IPv4 /24: another host of the /24, the same bytes');
is(shown('/show', '2001:db8:1:2::ffff'), '20010db8000100020000000000000000', 'IPv6 /64: 16 bytes, the interface ID zeroed');
is(shown('/show', '2001:db8:1:2:aaaa:bbbb:cccc:dddd'), '20010db8000100020000000000000000', 'IPv6 /64: every bit past 64 zeroed');
is(shown('/show', '::ffff:10.1.2.77'), '0a010200', 'IPv4-mapped IPv6: the IPv4 client, 4 bytes, cut to ipv4=');
is(shown('/show48', '2001:db8:1:2::1'), '20010db8000100000000000000000000', 'ipv6=48 in a location');
is(shown('/show48', '10.1.2.3'), '0a010203', 'a location with ipv6= only: ipv4 is the default 32');
is(shown('/show_odd', '2001:db8::3'), '20010db8000000000000000000000002', 'ipv6=127: the last bit cut');
is(shown('/show_odd', '200.1.2.3'), '80000000', 'ipv4=1: the first bit');
is(shown('/show', '10.1.2.3', $port1), '0a010203', 'server ipv4=32: the address itself');
is(shown('/show', '2001:db8:1:2::1', $port1), '20010db8000100020000000000000001', 'server ipv6=128: the address itself');

# IPv6 /64 (http level: ipv6 default 64): one /64 shares a limit, the next /64 has its own.
is(from('/inh', '2001:db8:1:2::1'), 200, '/64: 2001:db8:1:2::1 admitted');
is(from('/inh', '2001:db8:1:2::ffff'), 429, '/64: 2001:db8:1:2::ffff shares its limit');
is(from('/inh', '2001:db8:1:3::1'), 200, '/64: 2001:db8:1:3::1 (another /64) has its own');
is(from('/inh', '2001:db8:1:3::1'), 429, '/64: and is limited');

# IPv4 /24 (ratelimit_client_prefix ipv4=24 at http level, inherited).
is(from('/inh', '10.1.2.3'), 200, '/24: 10.1.2.3 admitted');
is(from('/inh', '10.1.2.200'), 429, '/24: 10.1.2.200 shares its limit');
is(from('/inh', '::ffff:10.1.2.9'), 429, '/24: ::ffff:10.1.2.9 (IPv4-mapped) shares it too');
is(from('/inh', '10.1.3.1'), 200, '/24: 10.1.3.1 (another /24) has its own');

# ipv6=48 in a location: all three share; ipv4 is 32 there.
is(from('/p48', '2001:db8:1:2::1'), 200, '/48: 2001:db8:1:2::1 admitted');
is(from('/p48', '2001:db8:1:2::ffff'), 429, '/48: 2001:db8:1:2::ffff shares its limit');
is(from('/p48', '2001:db8:1:3::1'), 429, '/48: 2001:db8:1:3::1 shares it too');
is(from('/p48', '2001:db8:2::1'), 200, '/48: 2001:db8:2::1 (another /48) has its own');
is(from('/p48', '10.1.2.3'), 200, 'location ipv4=32: 10.1.2.3 admitted');
is(from('/p48', '10.1.2.200'), 200, 'location ipv4=32: 10.1.2.200 has its own');

# Server level ipv4=32 ipv6=128: every address its own.
is(from('/full', '2001:db8:1:2::1', $port1), 200, '/128: 2001:db8:1:2::1 admitted');
is(from('/full', '2001:db8:1:2::ffff', $port1), 200, '/128: 2001:db8:1:2::ffff has its own');
is(from('/full', '2001:db8:1:2::1', $port1), 429, '/128: 2001:db8:1:2::1 limited');
is(from('/full', '10.1.2.3', $port1), 200, '/32: 10.1.2.3 admitted');
is(from('/full', '10.1.2.200', $port1), 200, '/32: 10.1.2.200 has its own');

# A Unix-socket client (realip trusts only 127.0.0.1): the variable is empty, so a zone keyed
# on it does not limit.
sub unix_get {
    my ($path) = @_;
    my $s = IO::Socket::UNIX->new(Peer => $n->dir . '/unix.sock', Type => SOCK_STREAM) or return ('ERR', {}, '');
    print $s RLTest::Http::request_text('GET', $path, { 'X-Forwarded-For' => '10.9.9.9' }, 0);
    local $/;
    my $buf = <$s> // '';
    close $s;
    my $i = index($buf, "\r\n\r\n");
    return ('ERR', {}, $buf) if $i < 0;
    my ($st, $h) = RLTest::Http::parse_head(substr($buf, 0, $i));
    return ($st, $h, substr($buf, $i + 4));
}
{
    my ($st, $h, $body) = unix_get('/show');
    is($st, 200, 'unix socket: /show answers');
    is(length $body, 0, 'unix socket: $ratelimit_client_prefix is empty') or diag(unpack 'H*', $body);
    my @st;
    my %x;
    for (1 .. 3) {
        my ($s, $hh) = unix_get('/unix');
        push @st, $s;
        $x{ $hh->{'x-status'} // '' }++;
    }
    is("@st", '200 200 200', 'unix socket: never limited');
    is(join(',', sort keys %x), 'EXEMPT', 'unix socket: EXEMPT');
    is(from('/unix', '10.9.9.9', $port1) . ' ' . from('/unix', '10.9.9.9', $port1), '200 429',
        'the same zone limits a TCP client');
}

# Configuration errors: named with the directive, file and line.
my $srv = "server { listen 127.0.0.1:%%PORT%%; location / { empty_gif; } }";
for my $c (
    ['ipv4=33', 'ratelimit_client_prefix ipv4=33;', qr/invalid "ipv4=33", it must be 1 to 32/],
    ['ipv4=0', 'ratelimit_client_prefix ipv4=0;', qr/invalid "ipv4=0", it must be 1 to 32/],
    ['ipv6=0', 'ratelimit_client_prefix ipv6=0;', qr/invalid "ipv6=0", it must be 1 to 128/],
    ['ipv6=129', 'ratelimit_client_prefix ipv4=24 ipv6=129;', qr/invalid "ipv6=129", it must be 1 to 128/],
    ['ipv4 not a number', 'ratelimit_client_prefix ipv4=24x;', qr/invalid "ipv4=24x"/],
    ['ipv6 empty', 'ratelimit_client_prefix ipv6=;', qr/invalid "ipv6="/],
    ['unknown parameter', 'ratelimit_client_prefix ipv4=24 ipv5=3;', qr/invalid parameter "ipv5=3"/],
    ['bare value', 'ratelimit_client_prefix 24;', qr/invalid parameter "24"/],
    ['duplicate parameter', 'ratelimit_client_prefix ipv4=24 ipv4=16;', qr/duplicate parameter "ipv4="/],
    ['duplicate directive', "ratelimit_client_prefix ipv4=24;\n    ratelimit_client_prefix ipv6=48;",
        qr/"ratelimit_client_prefix" directive is duplicate/],
    ['no parameter', 'ratelimit_client_prefix;', qr/invalid number of arguments in "ratelimit_client_prefix" directive/],
    ['in a location', "server { listen 127.0.0.1:%%PORT%%; location / {\n    ratelimit_client_prefix ipv6=200;\n} }",
        qr/invalid "ipv6=200", it must be 1 to 128/],
) {
    my ($name, $body, $re) = @$c;
    $body =~ s/;(?=[^;]*$)/;   # BAD/;    # the last line is the wrong one
    my ($rc, $out, $file) = nginx_t("$body\n    $srv");
    my $line = conf_line_of($file, '# BAD');
    isnt($rc, 0, "$name: nginx -t fails");
    like($out, $re, "$name: message") or diag($out);
    like($out, qr/\Q in $file:$line\E\b/, "$name: names $file:$line") or diag($out);
    like($out, qr/"ratelimit_client_prefix" directive/, "$name: names the directive") or diag($out);
}

# The bounds are accepted, at every level.
{
    my ($rc, $out) = nginx_t('ratelimit_client_prefix ipv4=1 ipv6=1; server { listen 127.0.0.1:%%PORT%%; '
          . 'ratelimit_client_prefix ipv6=128 ipv4=32; location / { ratelimit_client_prefix ipv4=32; empty_gif; } }');
    is($rc, 0, 'ipv4=1..32, ipv6=1..128, in http, server and location: accepted') or diag($out);
}

done_testing;
