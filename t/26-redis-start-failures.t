# A Redis that fails at once when a worker starts (a unix socket not there yet, an unreachable
# network) must not bring the worker down: on_error applies, the worker keeps running.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use RLTest;
use Test::More;
use Time::HiRes qw(sleep);

my $n = start_nginx(<<"EOF2");
    ratelimit_redis solo unix:%%DIR%%/no-such.sock timeout=100ms;
    ratelimit_redis fleet cluster unix:%%DIR%%/no-such-either.sock timeout=100ms;
    ratelimit_zone zs key=\$arg_k requests=5 period=1h redis=solo;
    ratelimit_zone zc key=\$arg_k requests=5 period=1h redis=fleet;
    server {
        listen 127.0.0.1:%%PORT%%;
        ratelimit_on_error deny;
        add_header X-Status \$ratelimit_status always;
        location /solo  { ratelimit zone=zs; empty_gif; }
        location /fleet { ratelimit zone=zc; empty_gif; }
    }
EOF2

my @workers = $n->worker_pids;
sleep 1;  # several reconnect attempts
for my $path ('/solo', '/fleet') {
    my @r = map { my ($st, $h) = $n->get("$path?k=$_"); "$st " . ($h->{'x-status'} // '') } 1 .. 3;
    is("@r", join(' ', ('503 ERROR') x 3), "$path: on_error deny");
}
is(join(' ', $n->worker_pids), join(' ', @workers), 'the same workers run: none crashed');
unlike($n->error_log, qr/exited on signal/, 'no worker exited on a signal');
like($n->error_log, qr/ratelimit redis "fleet" at unix:[^\n]*connect failed/, 'the failure is logged');

done_testing;
