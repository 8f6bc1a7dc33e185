# What came from outside reaches the error log escaped, on every path (issue 30, finding 2): a
# text with a newline followed by a forged nginx line, CR, ESC, NUL and a byte >= 0x80 sent as
# the host of a CLUSTER SLOTS answer, the target of a MOVED and of an ASK, the master address
# a Sentinel gives, a host name the resolver is asked for (the DNS server knows no such name),
# the host name a TLS cluster node announces (then checked against the node's certificate),
# and the names of a server's certificate (a DNS name and a common name). Every line of the
# log starts with nginx's date; no line is the forged one; each path logs the text escaped
# (rl::log_text: \xHH), saying which server sent it. Before the fix the CLUSTER SLOTS, MOVED
# and ASK hosts and the announced name were logged as they came, the Sentinel's and the
# certificate's not at all.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use RLTest;
use RLTest::FakeRedis qw(start_fake_redis resp_bulk resp_array resp_int resp_error);
use Test::More;
use Time::HiRes qw(time sleep);

my $FORGED = '1999/01/01 00:00:00 [emerg] 1#1: FORGED';
my $H      = "x\n$FORGED by redis\r\e[31m\0\xff";
my $H_ESC  = quotemeta("x\\x0a$FORGED by redis\\x0d\\x1b[31m\\x00\\xff");

# A map of all slots on one node: [[0, 16383, [host, port, id (, metadata)]]].
sub whole_map {
    my ($host, $port, @meta) = @_;
    my @node = (resp_bulk($host), resp_int($port), resp_bulk('f' x 40));
    push @node, resp_array(map { resp_bulk($_) } @meta) if @meta;
    return resp_array(resp_array(resp_int(0), resp_int(16383), resp_array(@node)));
}

# CLUSTER SLOTS naming the hostile host; MOVED and ASK to it (the map names the node asked:
# an empty host); a Sentinel giving it as the master's address.
my $cs  = start_fake_redis(mode => 'cluster', answers => { CLUSTER => whole_map($H, 6379) });
my $mv  = start_fake_redis(mode => 'cluster',
    answers => { CLUSTER => whole_map('', 0), FCALL => resp_error("MOVED 3999 $H:6379") });
my $ask = start_fake_redis(mode => 'cluster',
    answers => { CLUSTER => whole_map('', 0), FCALL => resp_error("ASK 3999 $H:6379") });
my $sen = start_fake_redis(mode => 'sentinel',
    answers => { SENTINEL => resp_array(resp_bulk($H), resp_bulk("6379\n$FORGED by a sentinel")) });

# TLS: a cluster node that announces the hostile host name for itself (its next connection
# checks the certificate against it), and servers whose certificates carry hostile names.
my $pki = RLTest::TLS->new;
$pki->make('bad_dns', san => "DNS:x\e[31m\xff.example", cn => 'bad-dns');
$pki->make('bad_cn', cn => "x\n1999\\/01\\/01 00:00:00 [emerg] 1#1: FORGED by a certificate\e[31m");
my $ta = start_fake_redis(mode => 'cluster', close_after => 'CLUSTER',
    tls => { cert => $pki->cert('server'), key => $pki->key('server') },
    answers => { CLUSTER => sub { whole_map('127.0.0.1', RLTest::FakeRedis::get('port'), 'hostname', $H) } });
$ta->set(port => $ta->port);
my $bad_dns = start_redis(tls => $pki->redis_tls(server => 'bad_dns'));
my $bad_cn  = start_redis(tls => $pki->redis_tls(server => 'bad_cn'));

# DNS: a name the server does not know (NXDOMAIN), written in the configuration with a
# newline (nginx's "\n" in a quoted string) and raw ESC and 0xff bytes.
my $dns = start_dns();
$dns->set('known.test', '127.0.0.1');
my $dns_name = "x\\n1999-01-01 00.00.00 [emerg] forged by dns\e[31m\xff.test";    # (nginx lowercases host names)

my $ca  = $pki->ca;
my $tmo = 'timeout=200ms connect_timeout=200ms';
my $n = start_nginx(<<"EOF2");
    resolver ${\ $dns->addr } valid=1s ipv6=off;
    resolver_timeout 1s;
    ratelimit_redis cs  cluster ${\ $cs->addr } $tmo;
    ratelimit_redis mv  cluster ${\ $mv->addr } $tmo;
    ratelimit_redis ask cluster ${\ $ask->addr } $tmo;
    ratelimit_redis sen sentinel=mymaster ${\ $sen->addr } $tmo;
    ratelimit_redis dns "$dns_name:6379" resolve $tmo;
    ratelimit_redis ta  cluster ${\ $ta->addr } ssl ssl_trusted_certificate=$ca timeout=200ms connect_timeout=5s;
    ratelimit_redis bdn 127.0.0.1:${\ $bad_dns->port } ssl ssl_trusted_certificate=$ca $tmo;
    ratelimit_redis bcn 127.0.0.1:${\ $bad_cn->port } ssl ssl_trusted_certificate=$ca $tmo;
    ratelimit_zone zmv  key=\$arg_k requests=5 period=1h redis=mv;
    ratelimit_zone zask key=\$arg_k requests=5 period=1h redis=ask;
    server {
        listen 127.0.0.1:%%PORT%%;
        location /mv  { ratelimit zone=zmv; empty_gif; }
        location /ask { ratelimit zone=zask; empty_gif; }
    }
EOF2

# Each path: requests where one is needed, then the line that says it, escaped.
my %want = (
    cs  => qr/ratelimit redis "cs": cannot use the node address "$H_ESC" port 6379/,
    mv  => qr/ratelimit redis "mv": cannot use the node address "$H_ESC" port 6379/,
    ask => qr/ratelimit redis "ask": cannot use the node address "$H_ESC" port 6379/,
    sen => qr/ratelimit redis "sen": sentinel at 127\.0\.0\.1:\d+ gave no usable address for master "mymaster" \(reply type 2\): host "$H_ESC" port "6379\\x0a\Q$FORGED\E by a sentinel"/,
    dns => qr/ratelimit redis "dns": could not resolve "x\\x0a1999-01-01 00\.00\.00 \[emerg\] forged by dns\\x1b\[31m\\xff\.test"/,
    ta  => qr/ratelimit redis "ta" at 127\.0\.0\.1:\d+: certificate does not match "$H_ESC" \(it names DNS:localhost, IP:127\.0\.0\.1, IP:::1\)/,
    bdn => qr/ratelimit redis "bdn" at 127\.0\.0\.1:\d+: certificate does not match "127\.0\.0\.1" \(it names DNS:x\\x1b\[31m\\xff\.example\)/,
    bcn => qr/ratelimit redis "bcn" at 127\.0\.0\.1:\d+: certificate does not match "127\.0\.0\.1" \(it names CN=x\\x0a1999\/01\/01 00:00:00 \[emerg\] 1#1: FORGED by a certificate\\x1b\[31m\)/,
);
for my $name (sort keys %want) {
    my $deadline = time + 10;    # (a wait: the TLS node's path takes two handshakes)
    my $line;
    while (!defined($line = $n->wait_log($want{$name}, 0.2)) && time < $deadline) {
        $n->get("/$name?k=" . fresh_key()) if $name eq 'mv' || $name eq 'ask';
    }
    ok(defined $line, "$name: logged escaped")
      or diag(join("\n", grep { /ratelimit redis "\Q$name\E"/ } split /\n/, $n->error_log) || "nothing logged for $name");
}

# The log as a whole: lines of nginx's own, none forged, no raw control byte.
my @lines = split /\n/, $n->error_log;
my @undated = grep { !/^\d{4}\/\d\d\/\d\d \d\d:\d\d:\d\d \[\w+\] / } @lines;
is(scalar @undated, 0, 'every line of the error log starts with its date') or diag(join "\n", @undated[0 .. ($#undated < 5 ? $#undated : 5)]);
my @forged = grep { /^\Q$FORGED\E|^1999/ } @lines;
is(scalar @forged, 0, 'no forged line') or diag(join "\n", @forged);
my @raw = grep { /[\x00-\x1f\x7f-\xff]/ } @lines;
is(scalar @raw, 0, 'no raw control byte or byte >= 0x80 in any line') or diag(join "\n", map { s/([^\x20-\x7e])/sprintf('<%02x>', ord $1)/ger } @raw[0 .. ($#raw < 5 ? $#raw : 5)]);
ok($ta->answered('CLUSTER') >= 1 && $sen->answered('SENTINEL') >= 1, 'the hostile answers were given ('
   . $ta->answered('CLUSTER') . ' CLUSTER SLOTS over TLS, ' . $sen->answered('SENTINEL') . ' Sentinel answers)');

done_testing;
