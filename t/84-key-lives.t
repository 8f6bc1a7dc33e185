# A key's new life is not its old one (issue 30, item 1): a request that took from a key's state
# gives back (an in-flight slot's release, a refund, a settle's give-back or charge) only to the
# life of the key it took from. After `DELETE .../zones/NAME?key=`, after the key was dropped
# from a full zone and made again, after a reload that laid the zone's table out anew, the
# request's end gives nothing to the key's new life, and takes nothing from it.
# Shared memory:
#  - concurrency=1: A1 runs, DELETE, A3 is admitted, A1 ends: A4 is still rejected (never 2 at
#    once), and the same after an eviction;
#  - quantity=5 settle=0 (a window of 5): Q1 runs across a DELETE, 5 new requests fill the new
#    window, Q1's give-back of 5 does not reach it (never more than 5 in the window); the same
#    across a reload that resets the zone's layout (the old worker's give-back), and in sync
#    zones (optimistic: the view and its unsent delta; lease: the units it holds); a sync round
#    in flight across the DELETE (Redis holding its call) does not fill the new life's view.
# Redis per request (the DELETE keeps the time of the reset beside the key,
# "<prefix>{<zone>:<hash>}:reset"; a refund or charge of an admission before it changes nothing):
#  - quantity=5 settle=0 across a DELETE, as above;
#  - quantity=0 settle=3: C1 runs across a DELETE, its charge does not reach the key's new state,
#    whether the key was made again meanwhile or not;
#  - concurrency=1: as above (the slots are members of the request's own: checked, not assumed);
#  - after the key expired and was made again (a window of 3 s): Q1's give-back does not reach
#    the next window's state either (the window's own rule, as in shared memory).
# When a request's end has been handled is seen on a witness: a zone of the same request keyed
# by the request alone. In shared memory it is handled in the same pass, under the locks; in
# Redis its settle call follows the key's on the worker's connection, and a release is seen in
# the ZREMs Redis ran.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use RLTest;
use RLTest::Backend qw(start_backend);
use Test::More;
use JSON::PP qw(decode_json);
use Time::HiRes qw(time sleep);

avoid_window_edge(3600, 60);  # the windows of 1h must not turn during the test

my $redis = start_redis();
my $rp    = $redis->port;
my $held  = start_redis();  # one sync zone's alone: its rounds are held there (CLIENT PAUSE)
my $hp    = $held->port;
my $b     = start_backend();
my $up    = 'http://127.0.0.1:' . $b->port . '/hold';

# k: the limited key; key: the backend's (one per request), and the witness zones' key.
my $zones = <<"EOF";
    ratelimit_redis main 127.0.0.1:$rp prefix=t84: timeout=2s;
    ratelimit_redis held 127.0.0.1:$hp prefix=t84: timeout=2s;
    ratelimit_algo fixed;
    ratelimit_zone c1 key=\$arg_k concurrency=1;
    ratelimit_zone ce key=\$arg_k concurrency=1 size=32k;
    ratelimit_zone cw key=\$arg_key concurrency=10;
    ratelimit_zone q5 key=\$arg_k requests=5 period=1h;
    ratelimit_zone qw key=\$arg_key requests=5 period=1h;
    ratelimit_zone lr key=\$arg_k requests=5 period=1h;
    ratelimit_zone lw key=\$arg_key requests=5 period=1h;
    ratelimit_zone rq key=\$arg_k requests=5 period=1h redis=main;
    ratelimit_zone rc key=\$arg_k requests=5 period=1h redis=main;
    ratelimit_zone re key=\$arg_k requests=5 period=3s redis=main;
    ratelimit_zone rw key=\$arg_key requests=5 period=1h redis=main;
    ratelimit_zone cr key=\$arg_k concurrency=1 redis=main;
    ratelimit_zone crw key=\$arg_key concurrency=10 redis=main;
    ratelimit_zone so key=\$arg_k requests=5 period=1h redis=main sync=100ms;
    ratelimit_zone sl key=\$arg_k requests=5 period=1h redis=main sync=100ms sync_mode=lease;
    ratelimit_zone sr key=\$arg_k requests=5 period=1h redis=held sync=100ms;
    ratelimit_zone sw key=\$arg_key requests=5 period=1h;
EOF
my $locations = <<"EOF";
        add_header X-Status \$ratelimit_status always;
        location /c1     { ratelimit zone=c1; ratelimit zone=cw; proxy_pass $up; }
        location /ce     { ratelimit zone=ce; ratelimit zone=cw; proxy_pass $up; }
        location /cefill { ratelimit zone=ce; empty_gif; }
        location /q      { ratelimit zone=q5 quantity=5 settle=0; ratelimit zone=qw quantity=5 settle=0; proxy_pass $up; }
        location /q1     { ratelimit zone=q5; empty_gif; }
        location /lr     { ratelimit zone=lr quantity=5 settle=0; ratelimit zone=lw quantity=5 settle=0; proxy_pass $up; }
        location /lr1    { ratelimit zone=lr; empty_gif; }
        location /rq     { ratelimit zone=rq quantity=5 settle=0; ratelimit zone=rw quantity=5 settle=0; proxy_pass $up; }
        location /rq1    { ratelimit zone=rq; empty_gif; }
        location /rc     { ratelimit zone=rc quantity=0 settle=3; ratelimit zone=rw quantity=0 settle=3; proxy_pass $up; }
        location /rc1    { ratelimit zone=rc; empty_gif; }
        location /re     { ratelimit zone=re quantity=5 settle=0; ratelimit zone=rw quantity=5 settle=0; proxy_pass $up; }
        location /re1    { ratelimit zone=re; empty_gif; }
        location /cr     { ratelimit zone=cr; ratelimit zone=crw; proxy_pass $up; }
        location /so     { ratelimit zone=so quantity=5 settle=0; ratelimit zone=sw quantity=5 settle=0; proxy_pass $up; }
        location /so1    { ratelimit zone=so; empty_gif; }
        location /sl     { ratelimit zone=sl quantity=5 settle=0; ratelimit zone=sw quantity=5 settle=0; proxy_pass $up; }
        location /sl1    { ratelimit zone=sl; empty_gif; }
        location /sr1    { ratelimit zone=sr; empty_gif; }
        location /api/   { ratelimit_api write=on; }
EOF
sub http_conf {
    my ($extra) = @_;
    return "$zones    server {\n        listen 127.0.0.1:%%PORT%% reuseport;\n$locations" . ($extra // '') . "    }\n";
}
my $n = start_nginx(http_conf(), workers => 2);
my $port = $n->port;

sub enter { my ($path, $key) = @_; return $b->enter($port, $path, $key) }
sub state { my ($zone, $key) = @_; return $n->key_state($zone, $key) }

# Statuses of $count requests, each decided (X-Status PASSED or REJECTED, else 'ERR').
sub hit {
    my ($path, $count) = @_;
    return join ' ', map {
        my ($st, $h) = $n->get($path);
        my $x = $h->{'x-status'} // '';
        $x eq 'PASSED' || $x eq 'REJECTED' ? $st : "ERR($x)";
    } 1 .. $count;
}

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

sub delete_key {
    my ($zone, $key) = @_;
    my ($st, undef, $body) = http_request($port, "/api/zones/$zone?key=$key", undef, 'DELETE');
    my $j = eval { decode_json($body // '') } // {};
    return ($st // 'ERR') . ' ' . ($j->{reset} ? 'reset' : 'not reset');
}

# ZREMs Redis ran so far (the releases of in-flight slots: one per key and loop turn).
sub zrems {
    my ($ok, $info) = $redis->cmd('INFO', 'commandstats');
    return $ok && $info =~ /^cmdstat_zrem:calls=(\d+)/m ? $1 : -1;
}

# The request $tag ends; what it gave back or settled was handled once its witness zone (keyed
# by $tag) shows $want in $field. A Redis settle: the witness's call follows the key's on the
# worker's connection. A Redis release: once Redis ran the two ZREMs (the key's and the
# witness's, in either order).
sub ended {
    my ($tag, $entry, $witness, $field, $want, $what) = @_;
    my $z0 = zrems();
    is($b->finish($tag, $entry), '200', "$what: $tag ends");
    if ($witness eq 'crw') {
        my $deadline = time + 5;
        sleep 0.02 while zrems() < $z0 + 2 && time < $deadline;
        cmp_ok(zrems(), '>=', $z0 + 2, "$what: ${tag}'s releases reached Redis");
    }
    my $w = wait_state($witness, $tag, sub { ($_[0]{$field} // -1) == $want });
    is($w->{$field}, $want, "$what: ${tag}'s end was handled (its witness zone shows it)");
}

# concurrency=1: the request of the key's old life ends while one of its new life runs: the key
# still counts the new one, another is rejected; once the new one ends, its slot is free.
sub old_end_spares_new {
    my ($loc, $zone, $witness, $k, $old, $new, $next, $what) = @_;
    my ($ot, $oe, $nt, $ne) = (@$old, @$new);
    ended($ot, $oe, $witness, 'in_flight', 0, $what);
    is(state($zone, $k)->{in_flight}, 1, "$what: the key counts $nt: ${ot}'s end took nothing from its new life");
    my $x = enter("$loc?k=$k", $next);
    is($x->{held} ? 'admitted' : $x->{status}, 429, "$what: $next is rejected: never 2 at once against concurrency=1");
    $b->finish($next, $x) if $x->{held};
    ended($nt, $ne, $witness, 'in_flight', 0, "$what (the new life's)");
    my $w = wait_state($zone, $k, sub { ($_[0]{in_flight} // -1) == 0 });
    is($w->{in_flight}, 0, "$what: ${nt}'s end gives its slot back");
}

# concurrency=1 across a DELETE: A1 runs, DELETE, A3 is admitted, A1 ends, A4 is rejected.
sub conc_across_delete {
    my ($loc, $zone, $witness, $what) = @_;
    my $a1 = enter("$loc?k=A", 'a1');
    ok($a1->{held}, "$what: A1 runs (concurrency=1)");
    is(hit("$loc?k=A&key=a2&ms=0", 1), '429', "$what: A2 is rejected while A1 runs");
    is(delete_key($zone, 'A'), '200 reset', "$what: DELETE of key A");
    my $a3 = enter("$loc?k=A", 'a3');
    ok($a3->{held}, "$what: A3 is admitted after the DELETE (requests running then are no longer counted)");
    old_end_spares_new($loc, $zone, $witness, 'A', [a1 => $a1], [a3 => $a3], 'a4', $what);
}

# quantity=5 settle=0 (a window of 5): the request of the key's old life ends after the key's
# new window took its 5 (the caller made sure): its give-back of 5 reaches nothing of it. (One
# request after: in Redis a rejection is remembered, and answers the next ones without Redis.)
sub old_settle_spares_new {
    my ($loc, $zone, $witness, $k, $old, $what) = @_;
    my ($ot, $oe) = @$old;
    ended($ot, $oe, $witness, 'remaining', 5, "$what (it settles 0: gives back 5)");
    is(state($zone, $k)->{remaining}, 0, "$what: the key's new window got nothing of ${ot}'s give-back");
    is(hit("$loc?k=$k", 1), '429', "$what: the next is rejected: never more than 5 in the window");
}

# quantity=5 settle=0 across a DELETE: Q1 runs, DELETE, 5 new requests fill the new window.
sub settle_across_delete {
    my ($loc, $zone, $witness, $what) = @_;
    my $q1 = enter("$loc?k=Q", 'q1');
    ok($q1->{held}, "$what: Q1 (quantity=5 settle=0) runs: the window of 5 is full");
    is(hit("${loc}1?k=Q", 1), '429', "$what: one more is rejected");
    is(delete_key($zone, 'Q'), '200 reset', "$what: DELETE of key Q");
    is(hit("${loc}1?k=Q", 5), '200 200 200 200 200', "$what: the new window admits 5");
    old_settle_spares_new("${loc}1", $zone, $witness, 'Q', [q1 => $q1], $what);
}

# ---------------------------------------------------------- shared memory

conc_across_delete('/c1', 'c1', 'cw', 'concurrency=1 across a DELETE');

{
    my $what = 'concurrency=1 across an eviction';
    my $b1 = enter('/ce?k=B', 'b1');
    ok($b1->{held}, "$what: B1 runs (a zone of 32k)");
    my ($st, undef, $body) = $n->get('/api/zones');
    my ($ce) = grep { $_->{name} eq 'ce' } @{ (eval { decode_json($body) } // {})->{zones} || [] };
    my $cap = $ce->{capacity} // 0;
    cmp_ok($cap, '>', 10, "$what: the zone holds $cap keys");
    cmp_ok($cap, '<', 1000, "$what: few enough to fill");
    my %fill;
    $fill{ ($n->get("/cefill?k=f$_"))[0] // 'ERR' }++ for 1 .. $cap;
    is(join(',', map { "$_=$fill{$_}" } sort keys %fill), "200=$cap", "$what: $cap other keys pass");
    ($st, undef, $body) = $n->get('/api/zones');
    ($ce) = grep { $_->{name} eq 'ce' } @{ (eval { decode_json($body) } // {})->{zones} || [] };
    cmp_ok($ce->{evictions} // 0, '>', 0, "$what: the zone dropped keys to make room");
    is(state('ce', 'B')->{found} ? 'found' : 'dropped', 'dropped', "$what: key B was dropped while B1 runs");
    my $b2 = enter('/ce?k=B', 'b2');
    ok($b2->{held}, "$what: B2 is admitted (key B made again)");
    old_end_spares_new('/ce', 'ce', 'cw', 'B', [b1 => $b1], [b2 => $b2], 'b3', $what);
}

settle_across_delete('/q', 'q5', 'qw', 'a settle across a DELETE');

# A sync zone's view (and unsent delta), or its lease, is the key's state in shared memory: the
# same rule (the witness's settle is handled in the same pass).
settle_across_delete('/so', 'so', 'sw', 'a sync (optimistic) settle across a DELETE');
settle_across_delete('/sl', 'sl', 'sw', 'a sync (lease) settle across a DELETE');

# A round in flight across the DELETE: its reply (the old life's global state) lands after the
# key's view was reset, and gives the new life nothing. The zone's Redis holds the round's call
# (a pause of writes) until after the DELETE; then it runs the call, then the reset.
{
    my $what = 'a sync round in flight across a DELETE';
    is(hit('/sr1?k=R', 5), '200 200 200 200 200', "$what: 5 admitted on key R");
    my ($ok, $v) = $held->cmd('CLIENT', 'PAUSE', '1000', 'WRITE');
    is($ok ? $v : "ERR $v", 'OK', "$what: Redis holds writes for 1 s");
    is(hit('/sr1?k=R', 1), '429', "$what: the 6th is rejected (its view asks for the global state)");
    my $deadline = time + 1;
    my $waits = 0;
    while (!$waits && time < $deadline) {
        my ($cok, $list) = $held->cmd('CLIENT', 'LIST');
        $waits = $cok && $list =~ /flags=\w*b\w* .* cmd=(?:fcall|evalsha)\b/;
        sleep 0.01 unless $waits;
    }
    ok($waits, "$what: a round's call waits in Redis");
    is(delete_key('sr', 'R'), '200 reset', "$what: DELETE of key R (answered once Redis runs again)");
    is(hit('/sr1?k=R', 5), '200 200 200 200 200', "$what: the new window admits 5");
    is(hit('/sr1?k=R', 1), '429', "$what: the next is rejected");
}

# ---------------------------------------------------------- Redis per request

settle_across_delete('/rq', 'rq', 'rw', 'Redis: a refund across a DELETE');

{
    my $what = 'Redis: a charge across a DELETE';
    my $c1 = enter('/rc?k=C', 'c1');
    my $c2 = enter('/rc?k=D', 'c2');
    ok($c1->{held} && $c2->{held}, "$what: C1 and C2 (quantity=0 settle=3) run, on keys C and D");
    is(hit('/rc1?k=C', 1) . ' ' . hit('/rc1?k=D', 1), '200 200', "$what: a unit of each key taken");
    is(delete_key('rc', 'C'), '200 reset', "$what: DELETE of key C");
    is(delete_key('rc', 'D'), '200 reset', "$what: DELETE of key D");
    is(hit('/rc1?k=D', 1), '200', "$what: key D is made again (a unit of its new life)");
    ended('c1', $c1, 'rw', 'remaining', 2, $what);
    is(state('rc', 'C')->{remaining}, 5, "$what: key C (not made again) was not charged C1's 3");
    ended('c2', $c2, 'rw', 'remaining', 2, $what);
    is(state('rc', 'D')->{remaining}, 4, "$what: key D's new life was not charged C2's 3");
    my $c3 = enter('/rc?k=C', 'c3');
    ok($c3->{held}, "$what: C3 runs after the DELETE");
    ended('c3', $c3, 'rw', 'remaining', 2, $what);
    is(state('rc', 'C')->{remaining}, 2, "$what: the new life's own requests are charged");
}

conc_across_delete('/cr', 'cr', 'crw', 'Redis: concurrency=1 across a DELETE');

{
    my $what = 'Redis: a refund after the key expired';
    wait_window_offset(3, 0.1);
    my $e1 = enter('/re?k=E', 'e1');
    ok($e1->{held}, "$what: E1 (quantity=5 settle=0) runs: the window of 5 (3 s) is full");
    my $s = wait_state('re', 'E', sub { ($_[0]{remaining} // -1) == 5 });
    is($s->{remaining}, 5, "$what: the window ended: the key expired (a fresh state)");
    is(hit('/re1?k=E', 5), '200 200 200 200 200', "$what: the key made again: the next window admits 5");
    old_settle_spares_new('/re1', 're', 'rw', 'E', [e1 => $e1], $what);
}

# ---------------------------------------------------------- across a reload that resets the layout

{
    my $what = 'a settle across a reload that resets the layout';
    my $l1 = enter('/lr?k=L', 'l1');
    ok($l1->{held}, "$what: L1 (quantity=5 settle=0) runs in a worker of the first configuration");
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
    is(hit('/lr1?k=L', 5), '200 200 200 200 200', "$what: the new workers admit 5 in the fresh window");
    old_settle_spares_new('/lr1', 'lr', 'lw', 'L', [l1 => $l1], "$what (L1 ends in an old worker)");
    $deadline = time + 10;
    sleep 0.05 while time < $deadline && grep { pid_alive($_) } keys %old;
    ok(!grep({ pid_alive($_) } keys %old), 'reload: the old workers exited');
}

my @bad = grep { /\[(?:error|crit|alert|emerg)\]/ && !/limiting (?:connections|requests?)\b/ } split /\n/, $n->error_log;
is(scalar @bad, 0, 'no other error in the log') or diag(join "\n", @bad[0 .. ($#bad < 9 ? $#bad : 9)]);

done_testing;
