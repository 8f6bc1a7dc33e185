# Log lines that say why (issue 30, finding 4). A TLS Redis that requires a client certificate
# the configuration lacks refuses it with a TLS alert after the handshake (TLS 1.3): the line
# names the alert ("certificate required") and what to configure, not just "read failed".
# Every Sentinel of a ratelimit_redis unreachable: each failed connection's line says it is a
# Sentinel's, and a line says that no Sentinel answered and what that leaves (the master not
# known yet, or still taken to be where it was).
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use RLTest;
use RLTest::FakeRedis qw(start_fake_redis resp_bulk resp_array);
use Test::More;
use Time::HiRes qw(time sleep);

my $pki  = RLTest::TLS->new;
my $mtls = start_redis(tls => $pki->redis_tls(auth_clients => 'yes'));
my $plain = start_redis();
my ($free1, $free2) = (free_port(), free_port());
# A Sentinel that names the plain Redis as the master, until it is stopped.
my $sen = start_fake_redis(mode => 'sentinel',
    answers => { SENTINEL => resp_array(resp_bulk('127.0.0.1'), resp_bulk($plain->port)) });
my $ca = $pki->ca;
my $n = start_nginx(<<"EOF2");
    ratelimit_redis nocert 127.0.0.1:${\ $mtls->port } ssl ssl_trusted_certificate=$ca timeout=200ms;
    ratelimit_redis su sentinel=mymaster 127.0.0.1:$free1 127.0.0.1:$free2 timeout=100ms connect_timeout=100ms;
    ratelimit_redis gone sentinel=mymaster ${\ $sen->addr } timeout=100ms connect_timeout=100ms;
    ratelimit_zone zn key=\$arg_k requests=5 period=1h redis=nocert;
    ratelimit_zone zs key=\$arg_k requests=5 period=1h redis=su;
    ratelimit_zone zg key=\$arg_k requests=5 period=1h redis=gone;
    server {
        listen 127.0.0.1:%%PORT%%;
        add_header X-Status \$ratelimit_status always;
        location /nocert { ratelimit zone=zn; empty_gif; }
        location /su     { ratelimit zone=zs; empty_gif; }
        location /gone   { ratelimit zone=zg; empty_gif; }
    }
EOF2

# Polls $path until the log has $re (10 s: lines are logged once a second, and which of a
# second's failures is logged is the first's): the matching line, or undef.
sub logged {
    my ($path, $re) = @_;
    my $deadline = time + 10;
    while (time < $deadline) {
        $n->get("$path?k=" . fresh_key());
        my $line = $n->wait_log($re, 0.1);
        return $line if defined $line;
    }
    return undef;
}
sub lines_of { my ($name) = @_; return join("\n", grep { /ratelimit redis "\Q$name\E"/ } split /\n/, $n->error_log) || "nothing logged for $name" }

# 1. No client certificate: the alert is named, and what is missing.
{
    my $mp = $mtls->port;
    my $line = logged('/nocert', qr/(ratelimit redis "nocert" at 127\.0\.0\.1:$mp: [^\n]*alert [^\n]*)/);
    like($line // '', qr/alert certificate required/, 'no client certificate: the TLS alert is named') or diag(lines_of('nocert'));
    like($line // '', qr/the server wants a client certificate: ssl_certificate= and ssl_certificate_key=/,
        '... and what to configure');
    my (undef, $h) = $n->get('/nocert?k=' . fresh_key());
    is($h->{'x-status'} // '', 'ERROR', '... on_error applies');
}

# 2. Every Sentinel unreachable: their lines say they are Sentinels, and that none answered.
{
    for my $p ($free1, $free2) {
        ok(defined logged('/su', qr/ratelimit redis "su": sentinel at 127\.0\.0\.1:$p: connect failed/),
           "every Sentinel unreachable: the line of 127.0.0.1:$p says it is a Sentinel's") or diag(lines_of('su'));
    }
    ok(defined logged('/su', qr/ratelimit redis "su": no Sentinel answered \(2 configured\): the master "mymaster" is not known yet, on_error applies/),
       '... and a line says no Sentinel answered, the master not known') or diag(lines_of('su'));
    unlike($n->error_log, qr/ratelimit redis "su" at 127\.0\.0\.1:(?:$free1|$free2)/, '... no Sentinel taken for a Redis');
}

# 3. The master known, then its only Sentinel gone: the master is still used, and the line says so.
{
    my $pp = $plain->port;
    ok(defined logged('/gone', qr/ratelimit redis "gone": master "mymaster" is at 127\.0\.0\.1:$pp/), 'the Sentinel named the master');
    $sen->stop;
    ok(defined logged('/gone', qr/ratelimit redis "gone": no Sentinel answered \(1 configured\): the master "mymaster" is still taken to be at 127\.0\.0\.1:$pp/),
       'its Sentinel gone: a line says no Sentinel answered, the master still used') or diag(lines_of('gone'));
    my (undef, $h) = $n->get('/gone?k=' . fresh_key());
    is($h->{'x-status'} // '', 'PASSED', '... and requests are decided on it');
}

done_testing;
