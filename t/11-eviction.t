# A full zone drops the least recently used state: no 5xx, no errors in the log.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use RLTest;
use Test::More;

my $n = start_nginx(<<'EOF2');
    ratelimit_zone e  key=$arg_k requests=1000 period=1d burst=999 size=32k;
    ratelimit_zone e1 key=$arg_k requests=1 period=1h size=32k;
    ratelimit_zone lg key=$arg_k requests=100 period=1h algo=log size=32k;
    server {
        listen 127.0.0.1:%%PORT%%;
        location /e  { ratelimit zone=e; empty_gif; }
        location /e1 { ratelimit zone=e1; empty_gif; }
        location /lg { ratelimit zone=lg; empty_gif; }
    }
EOF2

sub r_of {
    my ($h) = @_;
    my ($item) = parse_sf_list($h->{ratelimit});
    return $item ? $item->{r} : undef;
}

# LRU: a cold key is dropped, a hot key kept.
{
    my $c = $n->keepalive;
    my ($s, $h) = $c->get('/e?k=cold');
    is("$s " . (r_of($h) // '-'), '200 999', 'cold key: one unit used');
    my ($hot_hits, %bad, $hot_r) = (0);
    for my $i (1 .. 3000) {
        ($s, $h) = $c->get("/e?k=fill$i");
        $bad{ $s // 'ERR' }++ if ($s // 0) != 200;
        if ($i % 20 == 0) {
            ($s, $h) = $c->get('/e?k=hot');
            $hot_hits++;
            $hot_r = r_of($h);
            $bad{"hot $s"}++ if ($s // 0) != 200;
        }
    }
    is(join(',', map { "$_=$bad{$_}" } sort keys %bad), '', '3000 distinct keys in a 32k zone: every request 200');
    is($hot_r, 1000 - $hot_hits, "hot key kept its state through the churn (r=" . (1000 - $hot_hits) . ")");
    ($s, $h) = $c->get('/e?k=cold');
    is("$s " . (r_of($h) // '-'), '200 999', 'cold key was evicted: starts afresh');
    $c->close;
}

# Evicted limited keys are admitted again (fresh state), never 5xx.
{
    my ($s) = $n->get('/e1?k=victim');
    is($s, 200, 'e1 victim admitted');
    ($s) = $n->get('/e1?k=victim');
    is($s, 429, 'e1 victim limited');
    my $r = run_clients($n->port, sub { "/e1?k=c$_[0]_$_[1]" }, 4, 750);
    is($r->{200}, 3000, 'e1: 4 concurrent clients x 750 fresh keys: all 200')
      or diag(explain { map { $_ => $r->{$_} } grep { !/^:/ } keys %$r });
    ok(!grep({ /^5/ } keys %$r), 'e1: no 5xx under concurrent eviction');
    ($s) = $n->get('/e1?k=victim');
    is($s, 200, 'e1 victim evicted: admitted again');
}

# The sliding log (800 bytes per key) in a 32k zone.
{
    my %st;
    my $c = $n->keepalive;
    for my $i (1 .. 500) {
        my ($s) = $c->get("/lg?k=l$i");
        $st{ $s // 'ERR' }++;
    }
    $c->close;
    is(join(',', map { "$_=$st{$_}" } sort keys %st), '200=500', 'log algo, 500 keys in 32k: all 200');
}

my @bad = grep { /\[(error|crit|alert|emerg)\]/ && !/limiting request by zone "e1"/ } split /\n/, $n->error_log;
is(scalar @bad, 0, 'no error (or worse) in the log besides the expected rejection') or diag(join "\n", @bad[0 .. ($#bad < 9 ? $#bad : 9)]);

done_testing;
