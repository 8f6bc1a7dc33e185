# With error_log at debug (Debian's nginx is built --with-debug), the log shows the module's
# conversation with Redis: connect, handshake, send, reply, close, reconnect.
use strict;
use warnings;
use lib 't/lib';
use RLTest;
use Test::More;
use Time::HiRes qw(sleep);

my $redis = start_redis();
my $addr = $redis->addr;
my $n = start_nginx(<<"EOF2", workers => 1, log_level => 'debug');
    ratelimit_redis r $addr timeout=2s;    # a loaded machine: no on_error by a timeout
    ratelimit_zone z key=\$arg_k requests=5 period=1h redis=r;
    server {
        listen 127.0.0.1:%%PORT%%;
        location / { ratelimit_on_error deny; ratelimit zone=z; empty_gif; }
    }
EOF2

SKIP: {
    skip 'this nginx is not built --with-debug', 8 unless `${\ nginx_bin()} -V 2>&1` =~ /--with-debug/;
    my ($st) = $n->get('/?k=a');
    is($st, 200, 'a check through Redis');
    my $at = qr/ratelimit redis "r" at \Q$addr\E: /;
    for my $step ('connecting', 'connected', 'handshake done', 'sent \d+ bytes', 'reply type \d+') {
        ok($n->wait_log(qr/\[debug\][^\n]*$at$step/, 3), "debug log: $step");
    }
    $redis->kill_now;
    ($st) = $n->get('/?k=a');
    is($st, 503, 'Redis gone: on_error deny');
    ok($n->wait_log(qr/\[debug\][^\n]*${at}connection closed/, 3), 'debug log: connection closed');
    ok($n->wait_log(qr/\[debug\][^\n]*${at}reconnecting/, 3), 'debug log: reconnecting');
}

done_testing;
