# Hash flooding: keys chosen offline to share one bucket of the shared-memory table (under the
# bucket index of the public-constant hash, as the module once had) must cost no more than
# random keys, now that each zone places keys with a secret of its own.
# runs alone: it measures throughput (wrk), crafted keys against random ones
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use RLTest;
use Test::More;
use Time::HiRes qw(time);

my $root = repo_root();
my $gen = "$root/build/tests/crafted_keys";
if (!-x $gen) {  # built with the unit tests; build it alone when they were not
    system("cmake -S $root/tests -B $root/build/tests >/dev/null && cmake --build $root/build/tests --target crafted_keys >/dev/null") == 0
        or plan skip_all => 'cannot build tests/tools/crafted_keys (cmake)';
}

plan skip_all => 'needs wrk' unless `sh -c 'command -v wrk'`;

# Small zones (few buckets): the keys of a full chain are quick to find. Eight zones on one key:
# eight table lookups a request, so that the table's cost shows through HTTP.
my $nkeys = 4000;
my $nzones = 8;
my $zones = join '', map { "    ratelimit_zone z$_ key=\$arg_k requests=1000000 period=1h size=256k;\n" } 1 .. $nzones;
my $limits = join ' ', map { "ratelimit zone=z$_;" } 1 .. $nzones;
my $n = start_nginx(<<"EOF2", workers => 1);
$zones
    server {
        listen 127.0.0.1:%%PORT%%;
        location / { $limits empty_gif; }
    }
EOF2

my ($slots, $buckets) = $n->error_log =~ /ratelimit zone "z1": (\d+) keys of \d+ bytes, (\d+) buckets/;
$buckets //= $ENV{RLTEST_BUCKETS} // 4096;  # a module that does not say (the test's "before" run)
$nkeys = $slots if $slots && $slots < $nkeys;  # no eviction: every key stays in its chain
my @crafted = split /\n/, `$gen $buckets $nkeys`;
is(scalar @crafted, $nkeys, "$nkeys keys made for one bucket of $buckets");
my @random = map { sprintf 'r%08x', int(rand(2**32)) } 1 .. $nkeys;

# Requests per second over a key set, round robin, from wrk (1 thread, 4 connections, $secs s).
sub rate {
    my ($name, $keys, $secs) = @_;
    $secs //= 2;
    my $dir = $n->dir;
    spew("$dir/$name.keys", join("\n", @$keys) . "\n");
    spew("$dir/$name.lua", <<"LUA");
local keys, i = {}, 0
for line in io.lines("$dir/$name.keys") do keys[#keys + 1] = line end
request = function()
    i = i % #keys + 1
    return wrk.format(nil, "/?k=" .. keys[i])
end
LUA
    my $port = $n->port;
    my $out = `wrk -t1 -c4 -d${secs}s -s $dir/$name.lua http://127.0.0.1:$port/ 2>&1`;
    my ($rps) = $out =~ /Requests\/sec:\s+([\d.]+)/;
    my ($non2xx) = $out =~ /Non-2xx or 3xx responses:\s+(\d+)/;
    return ($rps // 0, $non2xx // 0);
}

rate('warm', \@random);  # the first run of a fresh nginx is slower
# Rounds of each key set in turn, and the best of each: a moment of other load on the machine
# slows one round, not the best of four. A chain of all the keys (the flood this guards
# against) costs many times more than random keys on every round.
my ($rr, $rc, $bad) = (0, 0, 0);
for my $round (1 .. 4) {
    my ($r, $br) = rate("random$round", \@random, 1);
    my ($c, $bc) = rate("crafted$round", \@crafted, 1);
    $rr = $r if $r > $rr;
    $rc = $c if $c > $rc;
    $bad += $br + $bc;
}
is($bad, 0, 'every request admitted');
my $ratio = $rr ? $rc / $rr : 0;
diag(sprintf 'random keys %.0f req/s, crafted keys %.0f req/s (best of 4 rounds each): %.2fx', $rr, $rc, $ratio);
ok($ratio > 0.6, sprintf 'crafted keys cost no more than random ones (%.2fx)', $ratio);

done_testing;
