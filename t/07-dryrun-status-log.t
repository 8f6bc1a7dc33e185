# Dry run, ratelimit_status, rejection logging and its level.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use RLTest;
use Test::More;

my $conf = <<'EOF2';
    ratelimit_zone d  key=$arg_k requests=3 period=1h burst=2;
    ratelimit_zone dw key=$arg_k requests=3 period=1h algo=fixed;
    ratelimit_zone e  key=$arg_k requests=1 period=1h;
    ratelimit_zone w  key=$arg_k requests=1 period=1h;
    ratelimit_zone nz key=$arg_k requests=1 period=1h;
    ratelimit_zone i  key=$arg_k requests=1 period=1h;
    ratelimit_zone st key=$arg_k requests=1 period=1h;
    server {
        listen 127.0.0.1:%%PORT%%;
        add_header X-Status $ratelimit_status always;
        location /dry    { ratelimit_dry_run on; ratelimit zone=d quantity=$arg_q; empty_gif; }
        location /dry1   { ratelimit_dry_run on; ratelimit zone=d; empty_gif; }
        location /dryw   { ratelimit_dry_run on; ratelimit zone=dw; empty_gif; }
        location /real   { ratelimit zone=d quantity=$arg_q; empty_gif; }
        location /err    { ratelimit zone=e; empty_gif; }
        location /warn   { ratelimit_log_level warn; ratelimit zone=w; empty_gif; }
        location /notice { ratelimit_log_level notice; ratelimit zone=nz; empty_gif; }
        location /info   { ratelimit_log_level info; ratelimit zone=i; empty_gif; }
        location /s503   { ratelimit_status 503; ratelimit zone=st; empty_gif; }
        location /s400   { ratelimit_status 400; ratelimit zone=st; empty_gif; }
        location /s599   { ratelimit_status 599; ratelimit zone=st; empty_gif; }
        location /s418   { ratelimit_status 418; ratelimit zone=st; empty_gif; }
    }
EOF2

avoid_window_edge(3600, 5);
my $n = start_nginx($conf, log_level => 'info');

sub get_all {
    my ($path, $count) = @_;
    my (@s, @x, @gif);
    for (1 .. $count) {
        my ($s, $h, $b) = $n->get($path);
        push @s, $s // 'ERR';
        push @x, $h->{'x-status'} // '';
        push @gif, gif_body_ok($b) ? 1 : 0;
    }
    return ("@s", "@x", "@gif");
}

# Dry run
{
    my ($s, $x, $g) = get_all('/dry1?k=a', 5);
    is($s, '200 200 200 200 200', 'dry run: all 5 admitted');
    is($x, 'PASSED PASSED PASSED REJECTED_DRY_RUN REJECTED_DRY_RUN', 'dry run: $ratelimit_status');
    is($g, '1 1 1 1 1', 'dry run: content served');
    like($n->error_log, qr/\[error\][^\n]*limiting request \(dry run\) by zone "d"/, 'dry run: logged at error (default level)');
    my $count = () = $n->error_log =~ /limiting request \(dry run\) by zone "d"/g;
    is($count, 2, 'dry run: one log line per would-be rejection');
    unlike($n->error_log, qr/limiting request by zone "d"/, 'dry run: no non-dry-run line');

    # A would-be rejection consumes nothing.
    ($s, $x) = get_all('/dry?k=b&q=2', 1);
    is($x, 'PASSED', 'dry run: q=2 of 3 passes');
    ($s, $x) = get_all('/dry?k=b&q=2', 1);
    is("$s $x", '200 REJECTED_DRY_RUN', 'dry run: q=2 more would be rejected');
    ($s, $x) = get_all('/real?k=b&q=1', 1);
    is("$s $x", '200 PASSED', 'dry run consumed nothing: the last unit is still there');
    ($s, $x) = get_all('/real?k=b&q=1', 1);
    is("$s $x", '429 REJECTED', 'real: then rejected');
    like($n->error_log, qr/\[error\][^\n]*limiting request by zone "d"/, 'real rejection logged without (dry run)');

    ($s, $x) = get_all('/dryw?k=c', 5);
    is("$s | $x", '200 200 200 200 200 | PASSED PASSED PASSED REJECTED_DRY_RUN REJECTED_DRY_RUN', 'dry run with a window algorithm');
}

# Log levels
{
    get_all('/err?k=a', 2);
    like($n->error_log, qr/\[error\][^\n]*limiting request by zone "e"/, 'default ratelimit_log_level is error');
    get_all('/warn?k=a', 2);
    like($n->error_log, qr/\[warn\][^\n]*limiting request by zone "w"/, 'ratelimit_log_level warn -> [warn]');
    unlike($n->error_log, qr/\[error\][^\n]*zone "w"/, '... not [error]');
    get_all('/notice?k=a', 2);
    like($n->error_log, qr/\[notice\][^\n]*limiting request by zone "nz"/, 'ratelimit_log_level notice -> [notice]');
    get_all('/info?k=a', 2);
    like($n->error_log, qr/\[info\][^\n]*limiting request by zone "i"/, 'ratelimit_log_level info -> [info] (error_log at info)');
    like($n->error_log, qr/limiting request by zone "e"[^\n]*client: 127\.0\.0\.1/, 'log line names the client');
    my $count = () = $n->error_log =~ /limiting request by zone "e"/g;
    is($count, 1, 'one line per rejection');
}

# ratelimit_status
{
    my ($s, $x) = get_all('/s503?k=a', 2);
    is("$s $x", '200 503 PASSED REJECTED', 'ratelimit_status 503');
    for my $code (400, 418, 599) {
        my ($st, $h) = $n->get("/s$code?k=a");
        is($st, $code, "ratelimit_status $code");
        like($h->{'retry-after'} // '', qr/^\d+$/, "... with Retry-After");
        like($h->{ratelimit} // '', qr/^"st";r=0;t=\d+$/, "... with RateLimit");
    }
}

$n->stop;

# error_log at notice: a rejection logged at info does not appear, one at warn does.
{
    my $n2 = start_nginx($conf, log_level => 'notice');
    my @s = statuses($n2, '/info?k=q', 2);
    is("@s", '200 429', 'notice log: request rejected');
    statuses($n2, '/warn?k=q', 2);
    my $log = $n2->error_log;
    like($log, qr/\[warn\][^\n]*limiting request by zone "w"/, 'notice log: the warn rejection is logged (control)');
    unlike($log, qr/zone "i"/, 'notice log: the info rejection is not logged');
    $n2->stop;
}

done_testing;
