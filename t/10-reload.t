# State survives nginx -s reload when the zone keeps its name and size.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use RLTest;
use Test::More;

avoid_window_edge(3600, 10);

my $base = <<'EOF2';
    ratelimit_zone z  key=$arg_k requests=3 period=1h burst=2 size=1m;
    ratelimit_zone lg key=$arg_k requests=2 period=1h algo=log size=1m;
    ratelimit_zone fx key=$arg_k requests=2 period=1h algo=fixed size=1m;
    ratelimit_zone sz key=$arg_k requests=1 period=1h size=%%SIZE%%;
    server {
        listen 127.0.0.1:%%PORT%%;
        location /z  { ratelimit zone=z; empty_gif; }
        location /lg { ratelimit zone=lg; empty_gif; }
        location /fx { ratelimit zone=fx; empty_gif; }
        location /sz { ratelimit zone=sz; empty_gif; }
        %%EXTRA%%
    }
EOF2
sub conf {
    my ($size, $extra) = @_;
    (my $c = $base) =~ s/%%SIZE%%/$size/;
    $c =~ s/%%EXTRA%%/$extra/;
    return $c;
}

my $n = start_nginx(conf('1m', ''));
sub st { my ($path, $count) = @_; return join ' ', statuses($n, $path, $count) }

is(st('/z?k=a', 4), '200 200 200 429', 'before reload: z exhausted for a');
is(st('/lg?k=a', 3), '200 200 429', 'before reload: log exhausted for a');
is(st('/fx?k=a', 3), '200 200 429', 'before reload: fixed exhausted for a');
is(st('/sz?k=a', 2), '200 429', 'before reload: sz exhausted for a');
is(st('/z?k=half', 2), '200 200', 'before reload: z half used for half');

my @before = $n->worker_pids;
$n->reload;
my @after = $n->worker_pids;
ok(!grep({ my $p = $_; grep { $_ == $p } @before } @after), 'reload: all workers replaced');

is(st('/z?k=a', 1), '429', 'after reload (same config): z state kept');
is(st('/lg?k=a', 1), '429', 'after reload: log state kept');
is(st('/fx?k=a', 1), '429', 'after reload: fixed state kept');
is(st('/sz?k=a', 1), '429', 'after reload: sz state kept');
is(st('/z?k=half', 2), '200 429', 'after reload: the partially used key keeps its count');
is(st('/z?k=b', 4), '200 200 200 429', 'after reload: a fresh key starts full');

# A reload with another location but the same zones keeps the state.
$n->reload(conf('1m', 'location /new { ratelimit zone=z; empty_gif; }'));
is(st('/new?k=a', 1), '429', 'reload with a changed config: the new location sees the kept state');
is(st('/new?k=c', 4), '200 200 200 429', '... and limits fresh keys');
is(st('/sz?k=a', 1), '429', '... sz kept');

# README: a change of size starts the zone afresh.
$n->reload(conf('2m', ''));
is(st('/sz?k=a', 2), '200 429', 'reload with a new size: that zone starts afresh');
is(st('/z?k=a', 1), '429', '... other zones keep their state');

unlike($n->error_log, qr/\[(emerg|alert|crit)\]/, 'no emerg/alert/crit in the error log')
  or diag(join "\n", grep { /\[(emerg|alert|crit)\]/ } split /\n/, $n->error_log);

done_testing;
