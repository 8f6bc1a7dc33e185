# The stream module's load orders: alone (no http module), after the http module (Debian's order:
# its link sorts after the http module's), before it. Each way both front ends limit on their
# own, in shared memory and in Redis (each .so with its own Redis connections), and keep their
# zones' state across a reload. And what each .so exports: with nginx's RTLD_GLOBAL, a name one
# exports besides ngx_modules, ngx_module_names and ngx_module_order binds the other's calls.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use RLTest;
use RLTest::Util qw(stream_module_so spew);
use RLTest::StreamClient qw(tcp_outcome);
use Test::More;

my $redis = start_redis();
my $rp = $redis->port;

my $stream = <<"EOF";
    ratelimit_redis sr 127.0.0.1:$rp timeout=2s;
    ratelimit_zone ss key=\$binary_remote_addr rate=1r/m burst=1;
    ratelimit_zone sz key=\$binary_remote_addr rate=1r/m burst=1 redis=sr;
    server { listen 127.0.0.1:%%PORT%%;  ratelimit zone=ss; return "ok\\n"; }
    server { listen 127.0.0.1:%%PORT1%%; ratelimit zone=sz; return "ok\\n"; }
EOF
my $http = <<"EOF";
    ratelimit_redis hr 127.0.0.1:$rp timeout=2s;
    ratelimit_zone hs key=\$arg_k rate=1r/m burst=1;
    ratelimit_zone hz key=\$arg_k rate=1r/m burst=1 redis=hr;
    server {
        listen 127.0.0.1:%%PORT2%%;
        location /shm   { ratelimit zone=hs; empty_gif; }
        location /redis { ratelimit zone=hz; empty_gif; }
    }
EOF

sub connections { my ($port) = @_; return join ' ', map { tcp_outcome($port) } 1 .. 3 }
sub requests {
    my ($n, $path) = @_;
    return join ' ', map { (http_request(($n->ports)[2], $path))[0] // 'ERR' } 1 .. 3;
}

for my $case (['stream module alone', so => ''], ['http module first', load_order => 'http_first'],
              ['stream module first', load_order => 'stream_first']) {
    my ($name, %o) = @$case;
    my $both = !defined $o{so};
    my $n = start_nginx($both ? $http : undef, stream => $stream, %o);
    like($n->conf, $both ? ($o{load_order} eq 'stream_first' ? qr/stream_ratelimit.*\n.*http_ratelimit/
                                                             : qr/http_ratelimit.*\n(.*\n)?.*stream_ratelimit/)
                         : qr/^(?!.*http_ratelimit)(?s:.*)stream_ratelimit/, "$name: loaded as asked");
    my @p = $n->ports;
    is(connections($p[0]), 'ok ok closed', "$name: stream, shared memory");
    is(connections($p[1]), 'ok ok closed', "$name: stream, Redis");
    if ($both) {
        my $k = fresh_key();
        is(requests($n, "/shm?k=$k"), '200 200 429', "$name: http, shared memory");
        is(requests($n, "/redis?k=$k"), '200 200 429', "$name: http, Redis");
    }
    $n->reload;
    is(tcp_outcome($p[0]), 'closed', "$name: after a reload the stream zone keeps its state");
    is(tcp_outcome($p[1]), 'closed', "$name: and Redis still decides");
    $redis->cli('FLUSHALL');
    my @bad = grep { /\[(emerg|error)\]/ && !/ limiting (connections|requests?)\b/ } split /\n/, $n->error_log;
    is("@bad", '', "$name: no error logged but the rejections");
    $n->stop;
}

# nginx loads modules with RTLD_GLOBAL: a name one .so exports binds the other's references to
# it (the engine's globals then are one for both). Each should export only nginx's three names,
# and bind nothing of the other.
my $crossed;
{
    my $conf = "load_module " . module_so() . ";\n"
      . (RLTest::Nginx::stream_built_in() ? '' : "load_module $RLTest::Nginx::STREAM_CORE_SO;\n")
      . "load_module " . stream_module_so() . ";\nevents {}\n";
    my $dir = RLTest::Util::temp_dir('rlbind');
    spew("$dir/nginx.conf", $conf);
    local $ENV{LD_DEBUG} = 'bindings';
    my (undef, $out) = run_cmd(30, nginx_bin(), '-t', '-p', "$dir/", '-c', "$dir/nginx.conf", '-e', "$dir/error.log");
    my %ours = map { $_ => 1 } stream_module_so(), module_so();
    # (AddressSanitizer's ODR indicators, __odr_asan.NAME, bind across by design: not ours)
    $crossed = grep { /binding file (\S+) \S+ to (\S+) / && $ours{$1} && $ours{$2} && $1 ne $2 && !/`__odr_asan\./ }
      split /\n/, $out;
}
{
    is($crossed, 0, 'neither .so binds the other\'s names');
    for my $so (stream_module_so(), module_so()) {
        my ($rc, $out) = run_cmd(30, 'nm', '-D', '--defined-only', $so);
        # (__odr_asan.NAME: AddressSanitizer's, beside each global of a sanitizer build)
        my @other = grep { !/ (ngx_modules|ngx_module_names|ngx_module_order|__odr_asan\.\S+)$/ } grep { /\S/ } split /\n/, $out;
        is(scalar @other, 0, "$so exports nothing but ngx_modules, ngx_module_names, ngx_module_order")
          or diag(scalar(@other) . " more, e.g. " . join(', ', map { (split / /)[-1] } @other[0 .. 2]));
    }
}

# What crossed names break: the sync zones' list of a worker is one global, filled by each
# front end's start: a lease zone in http{} and a sync zone in stream{} crash every worker at
# the first request that waits for a lease (a null entry, and a write past the array).
SKIP: {
    skip "the .so files bind each other's names: sync zones in both front ends crash the workers (a build without hidden visibility)", 4
      if $crossed;
    for my $order (qw(http_first stream_first)) {
        my $n = start_nginx(<<"H", load_order => $order, stream => <<"S");
    ratelimit_redis hr 127.0.0.1:$rp timeout=2s;
    ratelimit_zone hl key=\$arg_k requests=100 period=1m algo=sliding redis=hr sync=50ms sync_mode=lease;
    server { listen 127.0.0.1:%%PORT2%%; location / { ratelimit zone=hl; empty_gif; } }
H
    ratelimit_redis sr 127.0.0.1:$rp timeout=2s;
    ratelimit_zone sy key=\$binary_remote_addr requests=2 period=1h algo=fixed redis=sr sync=50ms;
    server { listen 127.0.0.1:%%PORT%%; ratelimit zone=sy; return "ok\\n"; }
S
        my @p = $n->ports;
        is(join(' ', map { (http_request($p[2], "/?k=l$_"))[0] // 'ERR' } 1 .. 4), '200 200 200 200',
           "$order: sync zones in both, a lease zone in http{}: requests decided");
        is(join(' ', map { tcp_outcome($p[0]) } 1 .. 3), 'ok ok closed', "$order: and stream's sync zone");
        $n->stop;
        $redis->cli('FLUSHALL');
    }
}

done_testing;
