# Every file in examples/ passes nginx -t; the quickstart behaves as the README says.
# runs alone: it measures time (the quickstart's 5r/s burst=3: 7 requests within 200 ms)
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use RLTest;
use Test::More;
use File::Temp qw(tempdir);
use File::Basename qw(basename);

my $root = repo_root();
my $so   = module_so();
my @examples = sort glob("$root/examples/*.conf");
ok(scalar @examples, 'examples/ has configuration files') or diag("none in $root/examples");

# Rewrites load_module of this module to the built .so (prepends it when absent).
sub with_module {
    my ($text) = @_;
    my $n = ($text =~ s{^(\s*)load_module\s+\S*ngx_http_ratelimit_module\.so\s*;}{$1load_module $so;}mg);
    $text = "load_module $so;\n$text" unless $n;
    return $text;
}

for my $ex (@examples) {
    my $name = basename($ex);
    my $dir = tempdir('rltest-ex-XXXXXX', TMPDIR => 1, CLEANUP => 1);
    mkdir "$dir/$_" for qw(conf logs);
    # Copy the whole directory so that relative includes resolve.
    for my $f (glob("$root/examples/*")) {
        next unless -f $f;
        my $t = RLTest::slurp($f);
        $t = with_module($t) if $f eq $ex;
        RLTest::spew("$dir/conf/" . basename($f), $t);
    }
    my $text = RLTest::slurp($ex);
    if ($text !~ /^\s*http\s*\{/m) {
        # A snippet: wrap it into a main configuration as the http block's body.
        RLTest::spew("$dir/conf/$name", "load_module $so;\nevents {}\nhttp {\n$text\n}\n");
    }
    my ($rc, $out) = run_cmd(30, nginx_bin(), '-t', '-p', "$dir/", '-c', "$dir/conf/$name",
        '-e', "$dir/logs/error.log");
    is($rc, 0, "examples/$name: nginx -t passes") or diag($out);
    like($out, qr/test is successful/, "examples/$name: test is successful");
}

# quickstart.conf for real: 4 at once (burst 3 + 1), then 429 with Retry-After: 1.
SKIP: {
    my $qs = "$root/examples/quickstart.conf";
    skip 'no examples/quickstart.conf', 6 unless -f $qs;
    my $text = with_module(RLTest::slurp($qs));
    $text =~ s/listen\s+[\d.]+:\d+/listen 127.0.0.1:%%PORT%%/g;
    $text =~ s/^\s*pid\s+[^;]+;/pid %%DIR%%\/nginx.pid;/m or $text = "pid %%DIR%%/nginx.pid;\n$text";
    $text =~ s/^\s*error_log\s+[^;]+;//mg;
    $text = "error_log %%DIR%%/error.log info;\n$text";
    $text =~ s/^(\s*worker_processes)\s+[^;]+;/$1 2;/m;
    my $n = start_nginx(undef, full => $text);
    my @s = map { ($n->get('/'))[0] } 1 .. 7;
    is("@s[0..3]", '200 200 200 200', 'quickstart: 4 admitted at once');
    is("@s[4..6]", '429 429 429', 'quickstart: then 429');
    my ($st, $h) = $n->get('/');
    is($h->{'retry-after'} // '', '1', 'quickstart: Retry-After: 1');
    like($h->{'ratelimit-policy'} // '', qr/^"per_ip";q=5;w=1$/, 'quickstart: RateLimit-Policy of per_ip only without X-Api-Key');
    my @h = map { ($n->get('/health'))[0] } 1 .. 10;
    is("@h", join(' ', ('200') x 10), 'quickstart: /health not limited');
    ($st, $h) = $n->get('/', { 'X-Api-Key' => 'k1' });
    is($st, 429, 'quickstart: per_ip still applies with an API key');
    $n->stop;
}

done_testing;
