# Two nginx instances (2 workers each) share one Redis: hammered together, they admit
# exactly `limit` requests in total, for every algorithm.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use RLTest;
use Test::More;

my @algos = qw(gcra token leaky fixed sliding log);
avoid_window_edge(3600, 20);
my $redis = start_redis();
my $rp = $redis->port;

my ($zones, $locs) = ('', '');
for my $a (@algos) {
    my $burst = $a =~ /^(gcra|token|leaky)$/ ? ' burst=59' : '';
    $zones .= "    ratelimit_zone c_$a key=\$arg_k requests=60 period=1h$burst algo=$a redis=shared;\n";
    $locs  .= "        location /$a { ratelimit zone=c_$a; empty_gif; }\n";
}
my $http = <<"EOF2";
    ratelimit_redis shared 127.0.0.1:$rp timeout=2s;    # a loaded machine: no on_error by a timeout
$zones
    ratelimit_zone q key=\$arg_k requests=100 period=1h burst=99 redis=shared;
    server {
        listen 127.0.0.1:%%PORT%% reuseport;
        add_header X-Who \$pid always;
$locs
        location /q { ratelimit zone=q quantity=3; empty_gif; }
    }
EOF2
my $n1 = start_nginx($http);
my $n2 = start_nginx($http);

for my $a (@algos) {
    my $r = run_clients([$n1->port, $n2->port], "/$a?k=shared", 12, 40, keepalive => 0, record => 'X-Who');
    my %codes = map { $_ => $r->{$_} } grep { !/^:/ } keys %$r;
    is($codes{200} // 0, 60, "$a: exactly 60 of 480 concurrent requests admitted across two hosts");
    is($codes{429} // 0, 420, "$a: the other 420 rejected");
    is(join(',', sort keys %codes), '200,429', "$a: no other status") or diag(explain \%codes);
    is(scalar(grep { length } keys %{ $r->{':values'} }), 4, "$a: all four workers served requests");
}

# Keep-alive clients and a cost of 3: 33 admitted (99 units), 1 unit left.
{
    my $r = run_clients([$n1->port, $n2->port], '/q?k=shared', 8, 20, keepalive => 1);
    is($r->{200} // 0, 33, 'quantity=3: exactly 33 admitted out of 160');
    is($r->{429} // 0, 127, 'quantity=3: 127 rejected');
    my ($s, $h) = $n2->get('/q?k=shared');
    my ($item) = parse_sf_list($h->{ratelimit});
    is($item ? $item->{r} : undef, 1, 'quantity=3: 1 unit left, seen from either host');
}

for my $n ($n1, $n2) {
    my @bad = grep { /\[(error|crit|alert|emerg)\]/ && !/limiting request/ } split /\n/, $n->error_log;
    is(scalar @bad, 0, 'no errors in the log') or diag(join "\n", @bad[0 .. ($#bad < 9 ? $#bad : 9)]);
}

done_testing;
