# The six algorithms: burst+1 for the buckets, window counts, refill timings,
# state kept per (zone, algorithm, key), ratelimit_algo vs the zone's algo=.
# runs alone: it measures time (windows and refills of fractions of a second)
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use RLTest;
use Test::More;
use POSIX ();
use Time::HiRes qw(time sleep);

my @bucket = qw(gcra token leaky);
my @window = qw(fixed sliding log);

avoid_window_edge(3600, 5);

my $locs = '';
for my $a (@bucket) {
    $locs .= "        location /bk/$a   { ratelimit_algo $a; ratelimit zone=bk; empty_gif; }\n";
    $locs .= "        location /fast/$a { ratelimit_algo $a; ratelimit zone=fast; empty_gif; }\n";
    $locs .= "        location /bo/$a   { ratelimit_algo $a; ratelimit zone=w burst=2; empty_gif; }\n";
    $locs .= "        location /za/$a   { ratelimit zone=za_$a; empty_gif; }\n";
}
for my $a (@bucket, @window) {
    $locs .= "        location /w/$a    { ratelimit_algo $a; ratelimit zone=w; empty_gif; }\n";
}
my $zones = join '', map { "    ratelimit_zone za_$_ key=\$arg_k requests=1 period=1h burst=1 algo=$_;\n" } @bucket;

my $n = start_nginx(<<"EOF2");
    ratelimit_zone bk   key=\$arg_k requests=1 period=1h burst=3;
    ratelimit_zone fast key=\$arg_k requests=2 period=1s burst=1;
    ratelimit_zone w    key=\$arg_k requests=3 period=1h;
    ratelimit_zone zg   key=\$arg_k requests=1 period=1h burst=3 algo=gcra;
    ratelimit_zone zf   key=\$arg_k requests=3 period=1h algo=fixed;
    ratelimit_zone fx   key=\$arg_k requests=3 period=2s algo=fixed;
    ratelimit_zone sl   key=\$arg_k requests=4 period=2s algo=sliding;
    ratelimit_zone lg   key=\$arg_k requests=3 period=2s algo=log;
$zones
    server {
        listen 127.0.0.1:%%PORT%%;
$locs
        location /default   { ratelimit zone=w; empty_gif; }
        location /zg        { ratelimit_algo fixed; ratelimit zone=zg; empty_gif; }
        location /zf        { ratelimit_algo gcra; ratelimit zone=zf; empty_gif; }
        location /fx        { ratelimit zone=fx; empty_gif; }
        location /sl        { ratelimit zone=sl; empty_gif; }
        location /lg        { ratelimit zone=lg; empty_gif; }
    }
EOF2

sub run_seq {
    my ($path, $count) = @_;
    my (@st, @r);
    for (1 .. $count) {
        my ($st, $h) = $n->get($path);
        push @st, $st // 'ERR';
        my ($item) = parse_sf_list($h->{ratelimit});
        push @r, $item ? ($item->{r} // '?') : '-';
    }
    return (join(' ', @st), join(' ', @r));
}

# Bucket algorithms: a fresh key admits burst+1 at once; state per algorithm.
for my $a (@bucket) {
    my ($st, $r) = run_seq("/bk/$a?k=same", 5);
    is($st, '200 200 200 200 429', "$a: burst=3 admits 4 at once, then 429 (same key under each algo)");
    is($r, '3 2 1 0 0', "$a: remaining 3 2 1 0 0");
    my (undef, $h) = $n->get("/bk/$a?k=same");
    like($h->{'retry-after'} // '', qr/^(3599|3600)$/, "$a: Retry-After is one interval (1h)");
}

# Zone algo= for each bucket algorithm.
for my $a (@bucket) {
    my ($st) = run_seq("/za/$a?k=z", 3);
    is($st, '200 200 429', "zone algo=$a burst=1: 2 admitted");
}

# Bucket refill: 2 per second, burst 1 (capacity 2, one unit every 500ms). Each algorithm is
# checked 0.6 s after its own first request was answered (it was admitted before that): not
# after the first algorithm's, which a slow machine puts too early for the later ones.
{
    my %t0;
    for my $a (@bucket) {
        my ($first) = run_seq("/fast/$a?k=f", 1);
        $t0{$a} = time;
        my ($st) = run_seq("/fast/$a?k=f", 2);
        is("$first $st", '200 200 429', "$a: 2r/s burst=1 admits 2 at once");
    }
    for my $a (@bucket) {
        my $wait = $t0{$a} + 0.6 - time;
        sleep $wait if $wait > 0;
        my ($st) = run_seq("/fast/$a?k=f", 2);
        is($st, '200 429', "$a: one unit refilled after 0.6s");
    }
}

# Window algorithms under ratelimit_algo: `requests` per period; buckets (burst 0) admit 1.
for my $a (@window) {
    my ($st, $r) = run_seq("/w/$a?k=same", 4);
    is($st, '200 200 200 429', "$a: 3 per hour admits 3");
    is($r, '2 1 0 0', "$a: remaining 2 1 0 0");
}
for my $a (@bucket) {
    my ($st) = run_seq("/w/$a?k=same", 2);
    is($st, '200 429', "$a on a requests=3 zone without burst admits 1");
}
{
    my (undef, $h) = $n->get('/w/log?k=same');
    like($h->{'retry-after'} // '', qr/^(3599|3600)$/, 'log: Retry-After until the oldest entry leaves the period');
    (undef, $h) = $n->get('/w/fixed?k=same');
    my $now = time;
    my $left = 3600 - ($now - 3600 * int($now / 3600));
    ok(abs(($h->{'retry-after'} // -99) - $left) <= 2, 'fixed: Retry-After is the end of the aligned window')
      or diag("Retry-After " . ($h->{'retry-after'} // 'missing') . " expected ~$left");
    (undef, $h) = $n->get('/w/sliding?k=same');
    like($h->{'retry-after'} // '', qr/^[1-9]\d*$/, 'sliding: Retry-After >= 1');
}

# Default algorithm is gcra; ratelimit burst= overrides for buckets; zone algo= wins.
{
    my ($st) = run_seq('/default?k=d', 2);
    is($st, '200 429', 'default algo is gcra (requests=3 without burst admits 1)');
    for my $a (@bucket) {
        ($st) = run_seq("/bo/$a?k=bo", 4);
        is($st, '200 200 200 429', "$a: ratelimit burst=2 overrides the zone (3 admitted)");
    }
    ($st) = run_seq('/zg?k=z', 5);
    is($st, '200 200 200 200 429', 'zone algo=gcra wins over ratelimit_algo fixed');
    ($st) = run_seq('/zf?k=z', 4);
    is($st, '200 200 200 429', 'zone algo=fixed wins over ratelimit_algo gcra');
}

# Window timings on one timeline of 2s windows aligned to the epoch (W = window start). Each
# step is due at W + x and its verdicts hold only if it ends soon after (the tightest: 0.25 s
# before an entry expires or a window turns): a run with a step that ended more than 0.2 s late
# (a loaded machine) shows nothing and is made again on new keys, three times at most. The
# checks of the last run are then made, in order.
sub window_timeline {
    my ($sfx) = @_;
    my (@checks, $late);
    my $is = sub { push @checks, [@_] };
    wait_window_offset(2, 0.1);
    my $W = 2 * int(time / 2);
    my $due;
    my $at = sub {
        $late //= $due if defined $due && time - ($W + $due) > 0.2;    # the step before ended late
        $due = $_[0];
        my $d = $W + $due - time;
        sleep $d if $d > 0;
    };
    $at->(0.1);

    # The log goes first: its Retry-After below counts from this very request, which the
    # server saw at some time within [$first0, $first1].
    my $first0 = time;
    my ($st) = run_seq("/lg?k=l$sfx", 1);
    my $first1 = time;
    $is->($st, '200', 'log @W+0.1: 1 admitted');
    ($st) = run_seq("/fx?k=k1$sfx", 4);
    $is->($st, '200 200 200 429', 'fixed @W+0.1: 3 admitted');
    my (undef, $h) = $n->get("/fx?k=k1$sfx");
    $is->(like => $h->{'retry-after'} // '', qr/^[12]$/, 'fixed @W+0.1: Retry-After to the window end (2)');
    ($st) = run_seq("/sl?k=s$sfx", 5);
    $is->($st, '200 200 200 200 429', 'sliding @W+0.1: 4 admitted');

    $at->(0.6);
    ($st) = run_seq("/lg?k=l$sfx", 1);
    $is->($st, '200', 'log @W+0.6: 1 admitted');

    $at->(1.1);
    ($st) = run_seq("/lg?k=l$sfx", 2);
    $is->($st, '200 429', 'log @W+1.1: third admitted, fourth rejected');
    my $check0 = time;
    (undef, $h) = $n->get("/lg?k=l$sfx");
    my $check1 = time;
    # The oldest entry leaves 2s after it came: Retry-After is that wait rounded up, ~1s.
    my ($lo, $hi) = (POSIX::ceil($first0 + 2 - $check1), POSIX::ceil($first1 + 2 - $check0));
    my $ra = $h->{'retry-after'} // -1;
    $is->(ok => $ra >= $lo && $ra <= $hi && $ra >= 1, "log \@W+1.1: Retry-After $ra in [$lo, $hi] (oldest leaves at W+2.1)");

    $at->(1.7);
    ($st) = run_seq("/fx?k=k1$sfx", 1);
    $is->($st, '429', 'fixed @W+1.7: k1 still rejected in the same window');
    ($st) = run_seq("/fx?k=k2$sfx", 4);
    $is->($st, '200 200 200 429', 'fixed @W+1.7: k2 gets 3');

    $at->(2.3);
    ($st) = run_seq("/fx?k=k1$sfx", 4);
    $is->($st, '200 200 200 429', 'fixed @W+2.3: new aligned window, k1 gets 3 again');
    ($st) = run_seq("/fx?k=k2$sfx", 4);
    $is->($st, '200 200 200 429', 'fixed @W+2.3: k2 gets 3 again 0.6s after its first 3 (windows aligned to the epoch)');
    ($st) = run_seq("/lg?k=l$sfx", 2);
    $is->($st, '200 429', 'log @W+2.3: only the entry of W+0.1 expired: 1 admitted');

    $at->(2.75);
    ($st) = run_seq("/sl?k=s$sfx", 2);
    $is->($st, '200 429', 'sliding @W+2.75: previous window weighs ~0.6: 1 of 4 admitted');

    $at->(2.85);
    ($st) = run_seq("/lg?k=l$sfx", 2);
    $is->($st, '200 429', 'log @W+2.85: the entry of W+0.6 expired: 1 admitted');

    $at->(4.75);
    ($st) = run_seq("/sl?k=s$sfx", 4);
    $is->($st, '200 200 200 429', 'sliding @W+4.75: previous window had 1: 3 admitted');    # robust to lateness
    return (\@checks, $late);
}
{
    my ($checks, $late);
    for my $try (1 .. 3) {
        ($checks, $late) = window_timeline("t$try");
        last unless defined $late;
        note("window timings, run $try: the step of W+$late ended late; made again");
    }
    for my $c (@$checks) {
        if ($c->[0] eq 'like') { like($c->[1], $c->[2], $c->[3]) }
        elsif ($c->[0] eq 'ok') { ok($c->[1], $c->[2]) }
        else { is($c->[0], $c->[1], $c->[2]) }
    }
}

unlike($n->error_log, qr/\[(emerg|alert|crit)\]/, 'no emerg/alert/crit in the error log');

done_testing;
