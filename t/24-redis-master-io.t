# The master does no blocking network I/O: a Redis that answers one byte per 50 ms and seeds,
# Sentinels, a TLS server that never answer (a listener that never accepts), and a name
# (`resolve`) whose DNS server never answers, stall neither `nginx -t`, nor the start,
# nor a reload beyond connect_timeout (+1 s of slack). A mode mismatch (cluster configured
# against a standalone server, or the reverse) is found by the workers: nginx starts, the
# mismatch is logged with the directive's file:line, and ratelimit_on_error applies.
# runs alone: it measures time (starts and reloads bounded by connect_timeout)
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use RLTest;
use Test::More;
use IO::Socket::INET;
use Time::HiRes qw(time sleep);

my $connect_ms = 500;
my $limit_s    = $connect_ms / 1000 + 1;

my $redis = start_redis();
my $drip  = start_proxy(upstream => $redis);
$drip->mode('drip', 50);
# Accepts nothing: connections wait in its backlog (or time out once it is full).
my $hole = IO::Socket::INET->new(LocalAddr => '127.0.0.1', LocalPort => 0, Proto => 'tcp', Listen => 1)
  or die "listen: $!";
my $hp = $hole->sockport;
# A DNS server that never answers.
my $mute = IO::Socket::INET->new(LocalAddr => '127.0.0.1', LocalPort => 0, Proto => 'udp') or die "udp: $!";
my $dp = $mute->sockport;

my $http = <<"EOF2";
    ratelimit_redis drip1 ${\ $drip->addr} connect_timeout=${connect_ms}ms timeout=100ms;
    ratelimit_redis drip2 ${\ $drip->addr} connect_timeout=${connect_ms}ms timeout=100ms;
    ratelimit_redis hole  127.0.0.1:$hp connect_timeout=${connect_ms}ms timeout=100ms;
    ratelimit_redis holec cluster 127.0.0.1:$hp connect_timeout=${connect_ms}ms timeout=100ms;
    # Sentinels, TLS and names resolved by the workers: none of it in the master either.
    ratelimit_redis holes sentinel=m 127.0.0.1:$hp connect_timeout=${connect_ms}ms timeout=100ms;
    ratelimit_redis holet 127.0.0.1:$hp ssl ssl_verify=off connect_timeout=${connect_ms}ms timeout=100ms;
    resolver 127.0.0.1:$dp ipv6=off;
    ratelimit_redis holer never-answered.test:$hp resolve connect_timeout=${connect_ms}ms timeout=100ms;
    ratelimit_zone z1 key=\$arg_k requests=5 period=1h redis=drip1;
    ratelimit_zone z2 key=\$arg_k requests=5 period=1h redis=drip2;
    ratelimit_zone z3 key=\$arg_k requests=5 period=1h redis=hole;
    ratelimit_zone z4 key=\$arg_k requests=5 period=1h redis=holec;
    server {
        listen 127.0.0.1:%%PORT%%;
        ratelimit_on_error deny;
        add_header X-Status \$ratelimit_status always;
        location /z1 { ratelimit zone=z1; empty_gif; }
        location /z2 { ratelimit zone=z2; empty_gif; }
        location /z3 { ratelimit zone=z3; empty_gif; }
        location /z4 { ratelimit zone=z4; empty_gif; }
    }
EOF2

# 1. nginx -t, the start and a reload, with a dripping Redis and black-holed seeds.
{
    my $t0 = time;
    my ($rc, $out) = nginx_t($http);
    my $took = time - $t0;
    is($rc, 0, 'nginx -t passes') or diag($out);
    ok($took < $limit_s, sprintf('nginx -t took %.2fs (under connect_timeout + 1s = %.1fs)', $took, $limit_s));

    $t0 = time;
    my $n = start_nginx($http);
    $took = time - $t0;
    ok($took < $limit_s, sprintf('the start took %.2fs until the workers ran (under %.1fs)', $took, $limit_s));
    my $up = $n->reload;
    ok($up < $limit_s, sprintf('a reload: the new workers ran %.2fs after the signal (under %.1fs)', $up, $limit_s));
    my @r = map { join ' ', ($n->timed("/z$_?k=a"))[0, 1] } 3, 4;
    is("@r", '503 ERROR 503 ERROR', 'black-holed seeds: on_error deny applies');
    $n->stop;
}

# 2. A mode mismatch is not fatal: the workers log it and on_error applies.
{
    my $c = start_redis_cluster(primaries => 3);
    my $node = ($c->primaries)[0];
    my $n = eval { start_nginx(<<"EOF2") };
    ratelimit_redis mm_cluster cluster ${\ $redis->addr} timeout=100ms;
    ratelimit_redis mm_solo    ${\ $node->addr} timeout=100ms;
    ratelimit_zone zc key=\$arg_k requests=5 period=1h redis=mm_cluster;
    ratelimit_zone zs key=\$arg_k requests=5 period=1h redis=mm_solo;
    server {
        listen 127.0.0.1:%%PORT%%;
        ratelimit_on_error deny;
        add_header X-Status \$ratelimit_status always;
        location /zc { ratelimit zone=zc; empty_gif; }
        location /zs { ratelimit zone=zs; empty_gif; }
    }
EOF2
    my $err = $@;
    ok($n, 'a mode mismatch does not stop nginx from starting') or diag($err);
    SKIP: {
        skip 'nginx did not start', 6 unless $n;
        for my $case (['zc', 'mm_cluster'], ['zs', 'mm_solo']) {
            my ($loc, $name) = @$case;
            my @r = map { join ' ', ($n->timed("/$loc?k=" . fresh_key()))[0, 1] } 1 .. 3;
            is("@r", join(' ', ('503 ERROR') x 3), "$name: ratelimit_on_error deny applies");
            my $line = conf_line_of($n->conf_file, "ratelimit_redis $name ");
            my $got = $n->wait_log(qr/ratelimit_redis "$name"[^\n]*(?:cluster|standalone)[^\n]*in (\S+:\d+)/, 3);
            ok(defined $got, "$name: the mismatch is logged with the directive's file:line");
            is($got, $n->conf_file . ":$line", "$name: ... which is where the directive is");
        }
    }
    $n->stop if $n;
    $c->stop;
}

done_testing;
