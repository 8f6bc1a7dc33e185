# stream{}, at=preread: a limit on what the preread phase learnt ($ssl_preread_server_name from
# a real ClientHello, $ssl_server_name after a `listen ... ssl` handshake), decided where the
# server's content starts. Per SNI name: burst + 1 pass, the next closed with no data and never
# proxied; no SNI is an empty key (exempt); all or nothing with the accept stage (a connection
# rejected at preread gives back what at=accept took); at=accept on a TLS listen refuses before
# the handshake; nginx 1.25.5+: the server selected by SNI applies its own preread limits, and
# at=accept in a server that is no default one never applies (nginx -t warns).
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use RLTest;
use RLTest::Nginx qw(nginx_version);
use RLTest::StreamClient qw(tcp_outcome tcp_open read_some);
use RLTest::ClientHello qw(client_hello);
use RLTest::TcpBackend;
use RLTest::TLS;
use IO::Socket::SSL;
use Test::More;

my $backend = RLTest::TcpBackend->start(greet => "hi\n");
my $be = $backend->addr;
my $pki = RLTest::TLS->new;
my ($cert, $key) = ($pki->cert('server'), $pki->key('server'));
my $by_name = nginx_version() >= 1025005;

# Servers selected by name (1.25.5+): a. is the default server of PORT6, b. is not.
my $named = !$by_name ? '' : <<"EOF";
    server { listen 127.0.0.1:%%PORT6%%; server_name a.example; ssl_preread on;
             ratelimit zone=sa at=preread; return "[a:\$ssl_preread_server_name]\\n"; }
    server { listen 127.0.0.1:%%PORT6%%; server_name b.example; ssl_preread on;
             ratelimit zone=sb at=preread; ratelimit zone=bacc; return "[b:\$ssl_preread_server_name]\\n"; }
EOF

my $stream = <<"EOF";
    log_format rl '\$server_port \$status \$ratelimit_status \$ssl_preread_server_name';
    access_log %%DIR%%/stream.log rl;

    ratelimit_zone sni  key=\$ssl_preread_server_name rate=1r/m burst=1;
    ratelimit_zone acc  key=\$binary_remote_addr rate=1r/m burst=4;
    ratelimit_zone sni2 key=\$ssl_preread_server_name rate=1r/m;
    ratelimit_zone sni3 key=\$ssl_preread_server_name rate=1r/m;
    ratelimit_zone tls  key=\$ssl_server_name rate=1r/m burst=1;
    ratelimit_zone tacc key=\$binary_remote_addr rate=1r/m;
    ratelimit_zone sa   key=\$ssl_preread_server_name rate=1r/m;
    ratelimit_zone sb   key=\$ssl_preread_server_name rate=1r/m burst=2;
    ratelimit_zone bacc key=\$binary_remote_addr rate=1r/m;
    ratelimit_zone dly  key=\$ssl_preread_server_name rate=2r/s burst=3;
    ratelimit_zone cc   key=\$binary_remote_addr concurrency=2;
    ratelimit_zone sni4 key=\$ssl_preread_server_name rate=1r/m;

    server { listen 127.0.0.1:%%PORT%%; ssl_preread on; ratelimit zone=sni at=preread;
             return "[\$ssl_preread_server_name]\\n"; }
    server { listen 127.0.0.1:%%PORT1%%; ssl_preread on; ratelimit zone=acc; ratelimit zone=sni2 at=preread;
             return "[\$ssl_preread_server_name]\\n"; }
    server { listen 127.0.0.1:%%PORT2%%; ssl_preread on; ratelimit zone=sni3 at=preread; proxy_pass $be; }
    server { listen 127.0.0.1:%%PORT3%% ssl; ssl_certificate $cert; ssl_certificate_key $key;
             ratelimit zone=tls at=preread; return "[\$ssl_server_name]\\n"; }
    server { listen 127.0.0.1:%%PORT4%% ssl; ssl_certificate $cert; ssl_certificate_key $key;
             ratelimit zone=tacc; return "[\$ssl_server_name]\\n"; }
    server { listen 127.0.0.1:%%PORT7%%; ssl_preread on; ratelimit zone=dly at=preread delay=1; proxy_pass $be; }
    server { listen 127.0.0.1:%%PORT8%%; ssl_preread on; ratelimit zone=cc; ratelimit zone=sni4 at=preread;
             ratelimit_reject reset; proxy_pass $be; }
$named
EOF
my $n = start_nginx(undef, nports => 9, stream => $stream);
my @p = $n->ports;

# What a connection that sends a ClientHello got: the server's line, or 'closed' (no data).
# (A close with the ClientHello still unread is a reset: nginx 1.25.5+ peeks at it in preread,
# and a connection rejected at accept never reads it. Either way: no data.)
sub hello {
    my ($port, $sni, %o) = @_;
    return tcp_outcome($port, send => client_hello(sni => $sni), %o) =~ s/^reset$/closed/r;
}
sub hellos { my ($port, $count, $sni, %o) = @_; return join ' ', map { hello($port, $sni, %o) } 1 .. $count }
sub logged {
    my ($port, $count) = @_;
    return join ', ', map { s/^\d+ //r } $n->log_lines('stream.log', qr/^$port /, $count);
}

# Per SNI name: burst=1, two pass, the third is closed; another name has its own.
is(hellos($p[0], 3, 'a.example'), '[a.example] [a.example] closed', 'SNI a.example: burst + 1 pass, then closed');
is(hellos($p[0], 3, 'b.example'), '[b.example] [b.example] closed', 'SNI b.example: a key of its own');
is(hellos($p[0], 3, undef), '[] [] []', 'no SNI: an empty key, exempt');
is(hellos($p[0], 3, ['c.example', 'd.example']), '[c.example] [c.example] closed',
   'two names in the extension: the first is the key (as ssl_preread reads it)');
is(hellos($p[0], 1, 'd.example'), '[d.example]', '... the second has its own');
is(logged($p[0], 13), join(', ', map { ("200 PASSED $_", "200 PASSED $_", "503 REJECTED $_") } qw(a.example b.example))
   . ', 200 EXEMPT , 200 EXEMPT , 200 EXEMPT , 200 PASSED c.example, 200 PASSED c.example, 503 REJECTED c.example'
   . ', 200 PASSED d.example', 'access log: $status and $ratelimit_status of the preread stage (EXEMPT: no SNI)');
like($n->error_log, qr/\[error\] \d+#\d+: \*\d+ limiting connections, excess: 1\.99\d by zone "sni", client: 127\.0\.0\.1, server: 127\.0\.0\.1:$p[0]$/m,
     'the line: limit_req\'s shape (no "while": the content phase)');

# All or nothing: acc (at=accept) admits 5 in a minute; x.example 1 at preread. The three
# rejected at preread give back what they took at accept: four more names pass, then accept
# rejects. Had they kept it, accept would reject from the second new name.
is(hellos($p[1], 4, 'x.example'), '[x.example] closed closed closed', 'preread rejects x.example after one');
is(join(' ', map { hello($p[1], "n$_.example") } 1 .. 5), '[n1.example] [n2.example] [n3.example] [n4.example] closed',
   'what the rejected took at accept was given back: 4 more pass, the 6th is rejected at accept');
like($n->error_log, qr/limiting connections, excess: 4\.99\d by zone "acc" while initializing session/, 'the last by acc, at accept');
is(scalar(() = $n->error_log =~ /by zone "acc"/g), 1, 'acc rejected once');

# A connection rejected at preread is never proxied: the backend sees only the one admitted.
is(hellos($p[2], 3, 'e.example', want => 3), 'hi closed closed', 'proxied once (the backend greets), then closed');
my $s = $backend->wait_for(sub { $_[0]{accepted} >= 1 }, 3);
is($s && $s->{accepted}, 1, 'the backend got one connection');
cmp_ok($s ? $s->{bytes} : 0, '>', 100, '... with the ClientHello nginx read in preread');
$backend->close_all;

# listen ... ssl: $ssl_server_name after the handshake; a rejection closes after it.
sub tls_talk {
    my ($port, $name) = @_;
    my $c = IO::Socket::SSL->new(PeerAddr => '127.0.0.1', PeerPort => $port, SSL_hostname => $name,
        SSL_verify_mode => SSL_VERIFY_NONE, Timeout => 5) or return "no handshake";
    my ($data, $end) = read_some($c, timeout => 3);
    close $c;
    return $data ne '' ? ($data =~ s/\n\z//r) : $end eq 'eof' ? 'closed' : $end;
}
is(join(' ', map { tls_talk($p[3], 't.example') } 1 .. 3), '[t.example] [t.example] closed',
   'listen ssl: $ssl_server_name keyed at preread, after the handshake');
is(tls_talk($p[3], 'u.example'), '[u.example]', 'listen ssl: another name');

# at=accept on a TLS listen: refused before the handshake: a ClientHello gets no byte back.
is(tls_talk($p[4], 'v.example'), '[v.example]', 'listen ssl, at=accept: the first handshakes');
is(hello($p[4], 'v.example'), 'closed', 'the second gets no byte: closed before the handshake (no ServerHello)');

# delay= at preread (rate 2r/s, burst 3, delay=1): the third of a name is held before the
# server's content starts: the backend sees it once its delay is over.
{
    my $t0 = Time::HiRes::time();
    is(hellos($p[7], 2, 'w.example', want => 3), 'hi hi', 'preread delay: the first two at once');
    my $s = tcp_open($p[7], client_hello(sni => 'w.example'));
    my ($data) = read_some($s, want => 3, timeout => 3);
    my $ms = int((Time::HiRes::time() - $t0) * 1000);
    close $s;
    is($data, "hi\n", 'preread delay: the third proxied');
    cmp_ok($ms, '>=', 300, "... after its delay ($ms ms from the first, 500 due)");
    like(logged($p[7], 3), qr/^200 PASSED w\.example, 200 PASSED w\.example, 200 DELAYED w\.example$/, 'preread delay: DELAYED');
}

# All or nothing with an in-flight zone at accept (2 slots): a connection rejected at preread
# gives its slot back once, not again when it ends: with one held, after such a rejection,
# one more fits and the next does not.
{
    my $hold = sub {
        my $c = tcp_open($p[8], client_hello(sni => $_[0]));
        my ($data) = read_some($c, want => 3, timeout => 3);
        return $data eq "hi\n" ? $c : undef;
    };
    my $a = $hold->('a.example');
    ok($a, 'in flight + preread: one held (slot 1 of 2)');
    is(tcp_outcome($p[8], send => client_hello(sni => 'a.example')), 'reset',
       'the next of its name rejected at preread: reset (ratelimit_reject reset)');
    is(scalar($n->log_lines('stream.log', qr/^$p[8] 503 REJECTED a\.example$/, 1)), 1, '... and ended');
    my $c = $hold->('c.example');
    ok($c, 'another name: held (slot 2 of 2)');
    is(hello($p[8], 'd.example'), 'closed', 'a third at once: rejected at accept, the slots are full');
    like($n->error_log, qr/limiting connections by zone "cc" while initializing session/, '... by the in-flight zone');
    close $_ for grep { $_ } $a, $c;
}

SKIP: {
    skip 'stream servers selected by name: nginx 1.25.5+', 6 unless $by_name;
    is(hellos($p[6], 2, 'a.example'), '[a:a.example] closed', 'SNI a.example: its server (default) and its limit');
    is(hellos($p[6], 4, 'b.example'), '[b:b.example] [b:b.example] [b:b.example] closed',
       'SNI b.example: its server, its own preread limit (burst 2); its at=accept line never applies');
    is(hellos($p[6], 2, undef), '[a:] [a:]', 'no SNI: the default server, exempt');
    unlike($n->error_log, qr/by zone "bacc"/, 'bacc never decided');
    my ($rc, $out) = nginx_t(undef, nports => 9, stream => $stream);
    is($rc, 0, 'nginx -t passes');
    like($out, qr/\[warn\] at=accept of zone "bacc" in \S+nginx\.conf:\d+ never applies: its server is no address's default server/,
         'nginx -t warns: at=accept outside a default server');
}

done_testing;
