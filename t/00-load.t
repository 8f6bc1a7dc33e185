# The module loads, its directives are known in their contexts, a plain request works.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use RLTest;
use Test::More;

my $so = module_so();
ok(-f $so, "module file exists: $so") or diag("build it with ./build.sh build");

# Control: without load_module the directives are unknown (proves the harness loads it).
{
    my ($rc, $out) = nginx_t(<<'EOF2', so => '');
    ratelimit_zone z key=$arg_k rate=1r/s;
    server { listen 127.0.0.1:%%PORT%%; location / { empty_gif; } }
EOF2
    isnt($rc, 0, 'without the module ratelimit_zone is rejected');
    like($out, qr/unknown directive "ratelimit_zone"/, '... as an unknown directive');
}

{
    my ($rc, $out) = nginx_t(<<'EOF2');
    server { listen 127.0.0.1:%%PORT%%; location / { empty_gif; } }
EOF2
    is($rc, 0, 'module loads with no ratelimit directive') or diag($out);
}

# Every directive in every context it is documented for.
{
    my ($rc, $out) = nginx_t(<<'EOF2');
    ratelimit_zone z1 key=$binary_remote_addr rate=10r/s burst=5 size=1m algo=gcra;
    ratelimit_zone z2 key=$arg_k$uri requests=100 period=15m size=64k algo=sliding;
    ratelimit_zone z3 key=$http_x_api_key rate=30r/m;
    ratelimit_zone z4 key=$arg_k rate=5r/h;
    ratelimit_zone z5 key=$arg_k rate=7r/d algo=fixed;
    ratelimit_zone z6 key=$arg_k requests=10 period=1m algo=log;
    ratelimit_zone z7 key=$arg_k requests=10 period=30s algo=token burst=3;
    ratelimit_zone z8 key=$arg_k requests=10 period=2h algo=leaky;
    ratelimit zone=z1;
    ratelimit_algo gcra;
    ratelimit_status 429;
    ratelimit_headers on;
    ratelimit_dry_run off;
    ratelimit_log_level error;
    server {
        listen 127.0.0.1:%%PORT%%;
        ratelimit zone=z1 burst=2;
        ratelimit zone=z2 quantity=2;
        ratelimit_algo token;
        ratelimit_status 503;
        ratelimit_headers legacy;
        ratelimit_dry_run on;
        ratelimit_log_level warn;
        location / {
            ratelimit zone=z3 quantity=$arg_cost;
            ratelimit zone=z4 quantity=0;
            ratelimit zone=z5;
            ratelimit zone=z6;
            ratelimit zone=z7;
            ratelimit zone=z8 burst=1;
            ratelimit_algo leaky;
            ratelimit_status 599;
            ratelimit_headers all;
            ratelimit_dry_run off;
            ratelimit_log_level info;
            empty_gif;
        }
        location /b { ratelimit_algo sliding; ratelimit_headers off; ratelimit_log_level notice; empty_gif; }
        location /c { ratelimit_algo fixed; empty_gif; }
        location /d { ratelimit_algo log; empty_gif; }
    }
EOF2
    is($rc, 0, 'all directives accepted in http, server and location') or diag($out);
    like($out, qr/test is successful/, '... nginx -t says successful');
}

{
    my ($rc, $out) = nginx_t(<<'EOF2');
    server {
        listen 127.0.0.1:%%PORT%%;
        ratelimit_zone z key=$arg_k rate=1r/s;
        location / { empty_gif; }
    }
EOF2
    isnt($rc, 0, 'ratelimit_zone is not allowed in server');
    like($out, qr/"ratelimit_zone" directive is not allowed here/, '... with nginx\'s message');
}

my $n = start_nginx(<<'EOF2');
    ratelimit_zone z key=$arg_k rate=100r/s burst=10;
    server {
        listen 127.0.0.1:%%PORT%%;
        location /plain { empty_gif; }
        location /limited { ratelimit zone=z; empty_gif; }
    }
EOF2

for my $path ('/plain', '/limited?k=a', '/limited') {
    my ($st, $h, $body) = $n->get($path);
    is($st, 200, "GET $path -> 200");
    ok(gif_body_ok($body), "GET $path serves the gif");
}
my @w = $n->worker_pids;
is(scalar @w, 2, 'two workers running');
unlike($n->error_log, qr/\[(emerg|alert|crit)\]/, 'no emerg/alert/crit in the error log')
  or diag($n->error_log);

done_testing;
