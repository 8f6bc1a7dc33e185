package RLTest::SentinelChecks;
# Checks shared by t/71 (Sentinel) and t/73 (Sentinel over TLS), on two nginx instances of
# two workers each in front of an RLTest::Sentinel set.
#
#   alternate($n1, $n2, $path, $count)  the statuses of $count requests, alternating instances
#   exact_on_master($s, $n1, $n2, $what) /ex (5 per key, burst 4 or the like: 5 admitted): three
#                                        admitted alternating, the fourth with 1 left, the fifth,
#                                        then 429s; one state key, on the master, laid out as
#                                        without Sentinel; returns that key
#   kill_master_under_load(...)          below
#
# kill_master_under_load: the master is killed while two nginx instances
# serve /load (on_error allow) and /load_deny (on_error deny) of Redis limits; then
#   - the Sentinels name a new master;
#   - meanwhile only 200, 429 and deny's 503 (on_error), none slower than the timeout allows;
#   - the first request is decided on the new master within 1.5 s of every Sentinel naming
#     it, every worker of both instances within 2.5 s;
#   - decisions are exact on the new master (/ex, shared by the two instances), and every
#     request is decided by Redis again.
# The instances need: /a (any Redis limit), /load, /load_deny, /ex (a limit of 5 per key),
# headers X-Status and X-Rec ("$path $status" as recorded by run_clients).
#
#   kill_master_under_load($s, $n1, $n2, timeout_ms => T, margin_ms => M, seconds => 7,
#                          what => 'the Sentinels');
use strict;
use warnings;
use Exporter 'import';
use Test::More;
use Time::HiRes qw(time sleep);
use RLTest::Util qw(fresh_key);
use RLTest::Clients qw(run_clients codes);
use RLTest::Http qw(parse_sf_list);

our @EXPORT_OK = qw(alternate exact_on_master kill_master_under_load);

sub alternate {
    my ($n1, $n2, $path, $count) = @_;
    return join ' ', map { (($_ % 2 ? $n2 : $n1)->timed($path))[0] } 0 .. $count - 1;
}

sub exact_on_master {
    my ($s, $n1, $n2, $what) = @_;
    my $k = fresh_key('ex');
    is(alternate($n1, $n2, "/ex?k=$k", 3), '200 200 200', 'three admitted, alternating instances');
    my ($st, $h) = $n1->get("/ex?k=$k");
    my ($item) = parse_sf_list($h->{ratelimit});
    is("$st " . ($item ? $item->{r} : '-'), '200 1', 'the fourth admitted with 1 left');
    is(alternate($n1, $n2, "/ex?k=$k", 3), '200 429 429', 'the fifth admitted, then rejected');
    my @on_master = $s->master->keys_matching('rl:{ex:*');
    is(scalar @on_master, 1, 'the state key is on the master the Sentinels name') or diag("@on_master");
    like($on_master[0] // '', qr/^rl:\{ex:[0-9a-f]{32}\}:gcra$/, "... laid out as without $what");
    return $on_master[0];
}

sub kill_master_under_load {
    my ($s, $n1, $n2, %o) = @_;
    my ($timeout_ms, $margin_ms) = @o{qw(timeout_ms margin_ms)};
    my $what = $o{what} // 'the Sentinels';
    my ($killed, $old, $new, $t_first, $t_all, $first_ok, $first_x, $all_ok);
    my @paths = ('/load', '/load_deny');
    my $r = run_clients([$n1->port, $n2->port], sub { sleep 0.003; "$paths[$_[0] % 2]?k=kl$_[0]_" . int($_[1] / 50) }, 4, 1000000,
        keepalive => 1, until => time + ($o{seconds} // 7), record => 'X-Rec',
        during => sub {
            sleep 1;
            ($killed, $old) = $s->kill_master;
            ($new, $t_first, $t_all) = $s->wait_switch($old, 15);
            my $from = $t_all // time;
            my $i = 0;
            while (time - $from < 5) {
                my $nn = $i++ % 2 ? $n2 : $n1;
                my (undef, $x) = $nn->timed('/a?k=' . fresh_key('kp'));
                if ($x eq 'PASSED' || $x eq 'REJECTED') { $first_ok = time; $first_x = $x; last }
                sleep 0.01;
            }
            my $d1 = $n1->wait_decided(sub { '/load?k=' . fresh_key('w') }, 4);
            my $d2 = $n2->wait_decided(sub { '/load?k=' . fresh_key('w') }, 4);
            $all_ok = time if defined $d1 && defined $d2;
        });
    ok(defined $new && $new ne $old, sprintf('kill: %s name a new master %s (%.2fs after the kill; every Sentinel %.2fs)',
        $what, $new // '-', ($t_first // $killed) - $killed, ($t_all // $killed) - $killed));
    my $vals = $r->{':values'} || {};
    my @other = grep { !/^(200|429|503)$/ } split /,/, codes($r);
    is("@other", '', 'kill: 200/429 and deny\'s 503, nothing else') or diag(explain $r);
    my @bad503 = grep { / 503$/ && !m{^/load_deny ERROR 503$} } keys %$vals;
    is("@bad503", '', 'kill: every 503 is on_error deny');
    my @allow_err = grep { m{^/load ERROR (\d+)$} && $1 != 200 } keys %$vals;
    is("@allow_err", '', 'kill: on_error allow answers 200');
    ok(($vals->{'/load ERROR 200'} // 0) + ($vals->{'/load_deny ERROR 503'} // 0) > 0, 'kill: on_error applied during the switch');
    ok(($vals->{'/load PASSED 200'} // 0) > 0 && ($vals->{'/load_deny PASSED 200'} // 0) > 0, 'kill: decided by Redis otherwise');
    ok(($r->{':max_ms'} // 0) < $timeout_ms + $margin_ms, "kill: slowest request $r->{':max_ms'}ms (timeout ${timeout_ms}ms)");
    my $from = $t_all // $t_first // $killed;
    ok(defined $first_ok && $first_ok - $from < 1.5,
        sprintf('kill: the first request decided on the new master (%s) %.2fs after every Sentinel named it',
            $first_x // '-', defined $first_ok ? $first_ok - $from : 99));
    ok(defined $all_ok && $all_ok - $from < 2.5,
        sprintf('kill: every worker of both instances decides again %.2fs after', defined $all_ok ? $all_ok - $from : 99));
    is($s->master_addr, $new, 'kill: the Sentinels still name the new master');
    my $newr = $s->master;
    my $before = () = $newr->keys_matching('rl:{ex:*');
    my $k = fresh_key('ex');
    is(alternate($n1, $n2, "/ex?k=$k", 6), '200 200 200 200 200 429', 'kill: exact on the new master, shared by both instances');
    my $after = () = $newr->keys_matching('rl:{ex:*');
    is($after - $before, 1, 'kill: the new key is on the new master');
    my $r2 = run_clients([$n1->port, $n2->port], sub { "$paths[$_[0] % 2]?k=after$_[0]" }, 4, 1000000, keepalive => 1,
        until => time + 0.5, record => 'X-Rec');
    is(codes($r2), '200', 'kill: afterwards, every request admitted');
    is(join(' ', grep { / ERROR / } keys %{ $r2->{':values'} || {} }), '', 'kill: afterwards, no on_error');
    return $new;
}

1;
