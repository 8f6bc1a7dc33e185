# ratelimit_metrics exports every configured zone, whatever came before (issue 23): 200 zones
# renamed four times over reloads (800 names since the start) are all in each scrape, and so
# are zones with the longest names a zone may have (129 to 256 characters). What it could not
# export, nginx -t refuses, saying why: more than 1000 zones and ratelimit_redis, a
# ratelimit_redis name longer than 256 bytes.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use RLTest;
use Test::More;

sub http_of {
    my (@names) = @_;
    my $zones = join '', map { "    ratelimit_zone $_ key=\$arg_k rate=10r/s size=32k;\n" } @names;
    return $zones . <<'EOF2';
    server {
        listen 127.0.0.1:%%PORT%%;
        location = /metrics { ratelimit_metrics; }
        location / { empty_gif; }
    }
EOF2
}

# The zones in a scrape (nginx_ratelimit_zone_keys has one sample per zone).
sub exported {
    my ($n) = @_;
    my (undef, undef, $body) = $n->get('/metrics');
    my %z = map { $_ => 1 } ($body // '') =~ /^nginx_ratelimit_zone_keys\{zone="([^"]+)"\}/mg;
    return \%z;
}

my @long = map { ('l' x ($_ - 3)) . sprintf('%03d', $_) } 129, 200, 256;
my $n;
for my $set (1 .. 4) {
    my @names = ((map { "s${set}_z$_" } 0 .. 199), $set == 1 ? @long : ());
    if ($set == 1) { $n = start_nginx(http_of(@names)) } else { $n->reload(http_of(@names)) }
    my $z = exported($n);
    my @missing = grep { !$z->{$_} } @names;
    is(scalar @missing, 0, "set $set of 200 names (" . 200 * $set . " since the start): every zone exported")
      or diag('missing: ' . join(' ', @missing[0 .. ($#missing < 4 ? $#missing : 4)]));
    is(scalar(keys %$z), scalar @names, "set $set: only the configured zones");
    if ($set == 1) {
        ok($z->{$_}, 'a zone name of ' . length($_) . ' characters exported') for @long;
    }
}
unlike($n->error_log, qr/no metrics for/, 'no zone went without metrics');

# nginx -t: what cannot be exported is refused, with the reason; without ratelimit_metrics,
# the same configuration is fine.
my @many = map { "m$_" } 0 .. 1000;
my ($rc, $out) = nginx_t(http_of(@many));
isnt($rc, 0, 'nginx -t refuses 1001 zones with ratelimit_metrics');
like($out, qr/ratelimit_metrics exports at most 1000 zones and ratelimit_redis, this configuration names 1001/,
    '... saying why') or diag($out);
my $plain = join '', map { "    ratelimit_zone $_ key=\$arg_k rate=10r/s size=32k;\n" } @many;
($rc, $out) = nginx_t($plain);
is($rc, 0, '... and accepts them without ratelimit_metrics') or diag($out);
my $long_redis = 'r' x 257;
($rc, $out) = nginx_t("    ratelimit_redis $long_redis 127.0.0.1:6379;\n" . http_of('a'));
isnt($rc, 0, 'nginx -t refuses a ratelimit_redis name of 257 bytes with ratelimit_metrics');
like($out, qr/cannot export ratelimit_redis "r+": its name is longer than 256 bytes/, '... saying why') or diag($out);
($rc, $out) = nginx_t("    ratelimit_redis ${\ ('r' x 256)} 127.0.0.1:6379;\n" . http_of('a'));
is($rc, 0, '... and accepts 256 bytes') or diag($out);
($rc, $out) = nginx_t(http_of(map { "m$_" } 0 .. 999));
is($rc, 0, 'nginx -t accepts 1000 zones with ratelimit_metrics') or diag($out);

done_testing;
