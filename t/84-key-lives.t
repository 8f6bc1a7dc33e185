# A key's new life is not its old one (issue 30, item 1), in shared memory: a request that took
# from a key's state gives back (an in-flight slot's release, a settle's give-back) only to the
# life of the key it took from. After `DELETE .../zones/NAME?key=`, after the key was dropped
# from a full zone and made again, after a reload that laid the zone's table out anew, the
# request's end gives nothing to the key's new life:
#  - concurrency=1: A1 runs, DELETE, A3 is admitted, A1 ends: A4 is still rejected (never 2 at
#    once), and the same after an eviction;
#  - quantity=5 settle=0 (a window of 5): Q1 runs across a DELETE, 5 new requests fill the new
#    window, Q1's give-back of 5 does not reach it (never more than 5 in the window); the same
#    across a reload that resets the zone's layout (the old worker's give-back).
# When a request's end has been handled is seen on a witness: a zone of the same request keyed
# by the request alone (its release, its settle), handled in the same pass under the locks.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use RLTest;
use RLTest::Backend qw(start_backend);
use Test::More;
use JSON::PP qw(decode_json);
use Time::HiRes qw(time sleep);

my $b  = start_backend();
my $bp = $b->port;
my $up = "http://127.0.0.1:$bp/hold";

# k: the limited key; key: the backend's (one per request), and the witness zones' key.
my $zones = <<"EOF";
    ratelimit_algo fixed;
    ratelimit_zone c1 key=\$arg_k concurrency=1;
    ratelimit_zone ce key=\$arg_k concurrency=1 size=32k;
    ratelimit_zone cw key=\$arg_key concurrency=10;
    ratelimit_zone q5 key=\$arg_k requests=5 period=1h;
    ratelimit_zone qw key=\$arg_key requests=5 period=1h;
    ratelimit_zone lr key=\$arg_k requests=5 period=1h;
    ratelimit_zone lw key=\$arg_key requests=5 period=1h;
EOF
my $locations = <<"EOF";
        location /c1     { ratelimit zone=c1; ratelimit zone=cw; proxy_pass $up; }
        location /ce     { ratelimit zone=ce; ratelimit zone=cw; proxy_pass $up; }
        location /cefill { ratelimit zone=ce; empty_gif; }
        location /q      { ratelimit zone=q5 quantity=5 settle=0; ratelimit zone=qw quantity=5 settle=0; proxy_pass $up; }
        location /q1     { ratelimit zone=q5; empty_gif; }
        location /lr     { ratelimit zone=lr quantity=5 settle=0; ratelimit zone=lw quantity=5 settle=0; proxy_pass $up; }
        location /lr1    { ratelimit zone=lr; empty_gif; }
        location /api/   { ratelimit_api write=on; }
EOF
sub http_conf {
    my ($extra) = @_;
    return "$zones    server {\n        listen 127.0.0.1:%%PORT%% reuseport;\n$locations" . ($extra // '') . "    }\n";
}
my $n = start_nginx(http_conf(), workers => 2);
my $port = $n->port;

sub enter { my ($path, $key) = @_; return $b->enter($port, $path, $key) }
sub hit   { my ($path, $count) = @_; return join ' ', map { ($n->get($path))[0] // 'ERR' } 1 .. $count }
sub state { my ($zone, $key) = @_; return $n->key_state($zone, $key) }

# Waits until $check->(state of $zone's $key) holds (5 s at most); the last state read.
sub wait_state {
    my ($zone, $key, $check) = @_;
    my $deadline = time + 5;
    my $s;
    while (1) {
        $s = state($zone, $key);
        return $s if $check->($s) || time > $deadline;
        sleep 0.02;
    }
}

# The request of the key's old life ends while one of its new life runs (concurrency=1): the
# key still counts the new one, another is rejected; once the new one ends, its slot is free.
sub old_end_spares_new {
    my ($loc, $zone, $k, $old, $new, $next, $what) = @_;
    my ($ot, $oe, $nt, $ne) = (@$old, @$new);
    is($b->finish($ot, $oe), '200', "$what: $ot ends");
    my $w = wait_state('cw', $ot, sub { ($_[0]{in_flight} // -1) == 0 });
    is($w->{in_flight}, 0, "$what: ${ot}'s end was handled (its witness zone's slot is back)");
    is(state($zone, $k)->{in_flight}, 1, "$what: the key counts $nt: ${ot}'s end took nothing from its new life");
    my $x = enter("$loc?k=$k", $next);
    is($x->{held} ? 'admitted' : $x->{status}, 429, "$what: $next is rejected: never 2 at once against concurrency=1");
    $b->finish($next, $x) if $x->{held};
    is($b->finish($nt, $ne), '200', "$what: $nt ends");
    $w = wait_state($zone, $k, sub { ($_[0]{in_flight} // -1) == 0 });
    is($w->{in_flight}, 0, "$what: ${nt}'s end gives its slot back");
}

# The request of the key's old life (quantity=5 settle=0) ends after its key's new window took
# its 5: its give-back of 5 (seen on its witness zone) reaches nothing of the new window.
sub old_settle_spares_new {
    my ($loc, $zone, $k, $witness, $old, $what) = @_;
    my ($ot, $oe) = @$old;
    is($b->finish($ot, $oe), '200', "$what: $ot ends: it settles 0 (gives back 5)");
    my $w = wait_state($witness, $ot, sub { ($_[0]{remaining} // -1) == 5 });
    is($w->{remaining}, 5, "$what: ${ot}'s settle was handled (its witness zone got its 5 back)");
    is(state($zone, $k)->{remaining}, 0, "$what: the key's new window got nothing of it");
    is(hit("$loc?k=$k", 5), '429 429 429 429 429', "$what: never more than 5 in the window");
}

sub delete_key {
    my ($zone, $key) = @_;
    my ($st, undef, $body) = http_request($port, "/api/zones/$zone?key=$key", undef, 'DELETE');
    my $j = eval { decode_json($body // '') } // {};
    return ($st // 'ERR') . ' ' . ($j->{reset} ? 'reset' : 'not reset');
}

# ---------------------------------------------------------- concurrency=1 across a DELETE

{
    my $a1 = enter('/c1?k=A', 'a1');
    ok($a1->{held}, 'A1 runs (concurrency=1)');
    is(hit('/c1?k=A&key=a2&ms=0', 1), '429', 'A2 is rejected while A1 runs');
    is(delete_key('c1', 'A'), '200 reset', 'DELETE of key A');
    my $a3 = enter('/c1?k=A', 'a3');
    ok($a3->{held}, 'A3 is admitted after the DELETE (requests running then are no longer counted)');
    old_end_spares_new('/c1', 'c1', 'A', [a1 => $a1], [a3 => $a3], 'a4', 'after a DELETE');
    my $a5 = enter('/c1?k=A', 'a5');
    ok($a5->{held}, 'A5 is admitted');
    is($b->finish('a5', $a5), '200', '... (done)');
}

# ---------------------------------------------------------- concurrency=1 across an eviction

{
    my $b1 = enter('/ce?k=B', 'b1');
    ok($b1->{held}, 'B1 runs (concurrency=1, a zone of 32k)');
    my ($st, undef, $body) = $n->get('/api/zones');
    my ($ce) = grep { $_->{name} eq 'ce' } @{ (eval { decode_json($body) } // {})->{zones} || [] };
    my $cap = $ce->{capacity} // 0;
    cmp_ok($cap, '>', 10, "the zone holds $cap keys");
    cmp_ok($cap, '<', 1000, '... few enough to fill');
    my %fill;
    $fill{ ($n->get("/cefill?k=f$_"))[0] // 'ERR' }++ for 1 .. $cap;
    is(join(',', map { "$_=$fill{$_}" } sort keys %fill), "200=$cap", "$cap other keys pass");
    ($st, undef, $body) = $n->get('/api/zones');
    ($ce) = grep { $_->{name} eq 'ce' } @{ (eval { decode_json($body) } // {})->{zones} || [] };
    cmp_ok($ce->{evictions} // 0, '>', 0, 'the zone dropped keys to make room');
    is(state('ce', 'B')->{found} ? 'found' : 'dropped', 'dropped', 'key B was dropped while B1 runs');
    my $b2 = enter('/ce?k=B', 'b2');
    ok($b2->{held}, 'B2 is admitted (key B made again)');
    old_end_spares_new('/ce', 'ce', 'B', [b1 => $b1], [b2 => $b2], 'b3', 'after an eviction');
}

# ---------------------------------------------------------- a settle's give-back across a DELETE

{
    my $q1 = enter('/q?k=Q', 'q1');
    ok($q1->{held}, 'Q1 (quantity=5 settle=0) runs: the window of 5 is full');
    is(hit('/q1?k=Q', 1), '429', 'one more is rejected');
    is(delete_key('q5', 'Q'), '200 reset', 'DELETE of key Q');
    is(hit('/q1?k=Q', 6), '200 200 200 200 200 429', 'the new window admits 5');
    old_settle_spares_new('/q1', 'q5', 'Q', qw => [q1 => $q1], 'after a DELETE');
}

# ---------------------------------------------------------- across a reload that resets the layout

{
    my $l1 = enter('/lr?k=L', 'l1');
    ok($l1->{held}, 'L1 (quantity=5 settle=0) runs in a worker of the first configuration');
    my %old = map { $_ => 1 } $n->worker_pids;
    # The sliding log applied to zone lr: its slots grow, its table is laid out anew.
    $n->_write_conf(http_conf("        location /lrlog { ratelimit_algo log; ratelimit zone=lr; empty_gif; }\n"));
    kill 'HUP', $n->master_pid;
    my @new;
    my $deadline = time + 10;
    while (time < $deadline) {
        @new = grep { !$old{$_} } $n->worker_pids;
        last if @new >= 2;
        sleep 0.05;
    }
    is(scalar @new, 2, 'reload: two new workers run');
    ok($n->wait_log(qr/ratelimit zone "lr": its table's layout changed/), "reload: zone lr's state is reset");
    ok(scalar(grep { pid_alive($_) } keys %old), 'reload: an old worker still runs L1');
    is(hit('/lr1?k=L', 6), '200 200 200 200 200 429', 'the new workers admit 5 in the fresh window');
    old_settle_spares_new('/lr1', 'lr', 'L', lw => [l1 => $l1], 'after a reload (L1 ends in an old worker)');
    $deadline = time + 10;
    sleep 0.05 while time < $deadline && grep { pid_alive($_) } keys %old;
    ok(!grep({ pid_alive($_) } keys %old), 'reload: the old workers exited');
}

my @bad = grep { /\[(?:error|crit|alert|emerg)\]/ && !/limiting (?:connections|requests?)\b/ } split /\n/, $n->error_log;
is(scalar @bad, 0, 'no other error in the log') or diag(join "\n", @bad[0 .. ($#bad < 9 ? $#bad : 9)]);

done_testing;
