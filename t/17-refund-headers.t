# All or nothing across stores: when a Redis limit rejects, what a shared-memory limit of the
# same request consumed is given back, and its RateLimit item shows the state after that
# refund, as when shared memory alone rejects.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use RLTest;
use Test::More;

avoid_window_edge(3600, 10);
my $redis = start_redis();
my $addr = $redis->addr;
my $n = start_nginx(<<"EOF2");
    ratelimit_redis r $addr timeout=2s;    # a loaded machine: no on_error by a timeout
    ratelimit_zone shm  key=\$arg_k requests=10 period=1h algo=fixed;
    ratelimit_zone one  key=\$arg_k requests=1 period=1h algo=fixed;
    ratelimit_zone rone key=\$arg_k requests=1 period=1h algo=fixed redis=r;
    server {
        listen 127.0.0.1:%%PORT%%;
        location /redis { ratelimit zone=shm; ratelimit zone=rone; empty_gif; }
        location /local { ratelimit zone=shm; ratelimit zone=one; empty_gif; }
    }
EOF2

# The shm zone's remaining count (r) in the RateLimit header, and the status.
sub shm_r {
    my ($path) = @_;
    my ($st, $h) = $n->get($path);
    my ($item) = grep { $_->{name} eq 'shm' } parse_sf_list($h->{ratelimit});
    return "$st r=" . ($item ? $item->{r} // '?' : '-');
}

for my $store ('redis', 'local') {
    is(shm_r("/$store?k=$store"), '200 r=9', "$store: the first request consumes one unit of each");
    is(shm_r("/$store?k=$store"), '429 r=9', "$store: the second is rejected by the one-request limit; shm reports its unit given back");
    is(shm_r("/$store?k=$store"), '429 r=9', "$store: and again");
}

done_testing;
