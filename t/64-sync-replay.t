# Sync zones whose connection to Redis is closed right after Redis applied each call (issue 30,
# finding 5): RLTest::Proxy in front of a real redis-server throws each sync call's reply away
# and closes the connection, for 2 s. Each call is sent again with its id once the connection
# is back (the script replays the reply of a call that ran: applied once). Before the fix, a
# resend that found the connection still backing off (its interval, sync=, shorter than the
# reconnect's backoff, or the connection lost again meanwhile) gave up at once: its keys went
# again in the next round under a new id and Redis counted their units again, round after
# round (3 admitted per key, ~180 counted; the issue saw ~5 with sync=100ms).
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use RLTest;
use RLTest::Sync;
use Test::More;
use Time::HiRes qw(time sleep);

my $redis = start_redis();
my $p     = start_proxy(upstream => $redis);
my $pp    = $p->port;

# 1r/m burst=2: 3 units at most; a full bucket takes 180 s to drain.
my $max_wait = 180;
my %z = (name => 'ro', algo => 'gcra', requests => 1, period => 60, burst => 2, sync => 0.02);
my $n = start_nginx(<<"EOF2");
    ratelimit_redis r 127.0.0.1:$pp timeout=500ms;
    ratelimit_zone ro key=\$arg_k rate=1r/m burst=2 sync=20ms redis=r;
    ratelimit_zone rd key=\$arg_k rate=100r/s sync=100ms redis=r;
    server {
        listen 127.0.0.1:%%PORT%% reuseport;
        add_header X-Status \$ratelimit_status always;
        add_header X-Who \$pid always;
        location = /ro { ratelimit zone=ro; empty_gif; }
        location = /rd { ratelimit zone=rd; empty_gif; }
    }
EOF2
ok(defined $n->wait_decided(sub { '/rd?k=' . fresh_key('ready') }), 'nginx decides through the proxy');

# For 2 s every sync reply is lost with its connection, while four keys get requests all along
# (3 admitted each: burst=2; the rejected ones ask for the global state: a call every round).
my @keys = map { "k$_" } 1 .. 4;
my %admitted;
$p->mode('sync_close');
my $t0 = time;
while (time - $t0 < 2) {
    for my $k (@keys) {
        my ($s) = $n->get("/ro?k=$k");
        $admitted{$k}++ if ($s // 0) == 200;
    }
    sleep 0.02;
}
my $closed = $p->rewritten;
$p->mode('pass');
my $total = 0;
$total += $admitted{$_} // 0 for @keys;
ok($closed >= 5, "$closed sync replies lost with their connection in 2 s");
is($total, 3 * @keys, "3 admitted per key while the replies were lost ($total for " . scalar(@keys) . " keys)");

# Once Redis answers again, each call's resend gets its reply: Redis holds what was admitted.
my ($ok, $count) = settle($redis, \%z, $total, timeout => 5);
ok($ok, "Redis counts each admitted request once ($count units for $total admitted)");
my $most = 0;
for my $k (@keys) {
    my ($s, $h) = $n->get("/ro?k=$k");
    my $ra = $h->{'retry-after'} // 0;
    $most = $ra if $ra > $most;
}
cmp_ok($most, '<=', $max_wait, "Retry-After within what 3 units require ($most s, at most $max_wait)");

done_testing;
