# Concurrent clients across both workers: exactly `limit` requests admitted, per algorithm.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use RLTest;
use Test::More;

my @algos = qw(gcra token leaky fixed sliding log);
avoid_window_edge(3600, 15);

my ($zones, $locs) = ('', '');
for my $a (@algos) {
    my $burst = $a =~ /^(gcra|token|leaky)$/ ? ' burst=49' : '';
    $zones .= "    ratelimit_zone c_$a key=\$arg_k requests=50 period=1h$burst algo=$a;\n";
    $locs  .= "        location /$a { ratelimit zone=c_$a; empty_gif; }\n";
}

my $n = start_nginx(<<"EOF2");
$zones
    ratelimit_zone q key=\$arg_k requests=100 period=1h burst=99;
    server {
        listen 127.0.0.1:%%PORT%% reuseport;
        add_header X-Pid \$pid always;
$locs
        location /q { ratelimit zone=q quantity=3; empty_gif; }
    }
EOF2

is(scalar(my @w = $n->worker_pids), 2, 'two workers');

for my $a (@algos) {
    # Connection: close on every request so that connections spread over both workers.
    my $r = run_clients($n->port, "/$a?k=shared", 8, 40, keepalive => 0, record => 'X-Pid');
    my %codes = map { $_ => $r->{$_} } grep { !/^:/ } keys %$r;
    is($codes{200} // 0, 50, "$a: exactly 50 of 320 concurrent requests admitted");
    is($codes{429} // 0, 270, "$a: the other 270 rejected");
    is(join(',', sort keys %codes), '200,429', "$a: no other status") or diag(explain \%codes);
    is(scalar(grep { length } keys %{ $r->{':values'} }), 2, "$a: both workers served requests");
}

# Same with keep-alive connections and a cost of 3: 33 admitted (99 units), 1 unit left.
{
    my $r = run_clients($n->port, '/q?k=shared', 8, 20, keepalive => 1);
    is($r->{200} // 0, 33, 'quantity=3: exactly 33 admitted out of 160');
    is($r->{429} // 0, 127, 'quantity=3: 127 rejected');
    my ($s, $h) = $n->get('/q?k=shared');
    my ($item) = parse_sf_list($h->{ratelimit});
    is($item ? $item->{r} : undef, 1, 'quantity=3: 1 unit left');
}

unlike($n->error_log, qr/\[(emerg|alert|crit)\]/, 'no emerg/alert/crit in the error log');

done_testing;
