# Concurrency zones in shared memory (issue 19): `ratelimit_zone ... concurrency=N` limits the
# requests of a key in progress at once. The upstream is RLTest::Backend, which holds each
# request until the test releases it and counts, per key, the requests in progress: N of a key
# pass, the next is rejected (429, Retry-After: 1), other keys are not; a slot comes back when
# the request ends, when its client goes away, when the upstream times out, when its HTTP/2
# stream is reset, when the worker holding it was killed (-9), and after a reload (the old
# workers' requests keep theirs until they end); counted once across internal redirects, not
# for subrequests (SSI, mirror); all or nothing with a rate zone; exact across two workers;
# $ratelimit_status, the log lines, dry run, a variable limit, the in-flight gauge.
# runs alone: it measures time (the share of time at N in flight, upstream timeouts)
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use RLTest;
use RLTest::Backend qw(start_backend send_request read_response);
use Test::More;
use IO::Select;
use IO::Socket::INET;
use Time::HiRes qw(time sleep);

my $b  = start_backend();
my $bp = $b->port;

# HTTP/2 where this nginx has it: `listen ... http2` before 1.25.1, `http2 on;` after.
my (undef, $v_out) = run_cmd(10, nginx_bin(), '-V');
my ($ver) = $v_out =~ m{nginx/(\d+\.\d+\.\d+)};
my $has_h2 = $v_out =~ /--with-http_v2_module/ ? 1 : 0;
my $h2_new = $ver && sprintf('%03d%03d%03d', split /\./, $ver) ge '001025001';
my $h2_listen = !$has_h2 ? '' : $h2_new ? "listen 127.0.0.1:%%PORT1%%;\n        http2 on;" : 'listen 127.0.0.1:%%PORT1%% http2;';

my $locations = <<"EOF";
        location /hold   { ratelimit zone=c2; proxy_pass http://127.0.0.1:$bp; }
        location /other  { ratelimit zone=c2; proxy_pass http://127.0.0.1:$bp; }
        location /legacy { ratelimit_headers legacy; ratelimit zone=c2; proxy_pass http://127.0.0.1:$bp; }
        location /to     { ratelimit zone=c2; proxy_read_timeout 1500ms; proxy_pass http://127.0.0.1:$bp/hold; }
        location /tf     { ratelimit zone=c2; try_files /nonexistent \@up; }
        location /ep     { ratelimit zone=c2; root %%DIR%%/nothing; error_page 404 = \@up; }
        location \@up     { ratelimit zone=c2; proxy_pass http://127.0.0.1:$bp; }
        location = /page.shtml { ratelimit zone=c1; ssi on; root %%DIR%%/html; default_type text/html; }
        location /sub1   { ratelimit zone=c1; proxy_pass http://127.0.0.1:$bp/hold; }
        location /mir    { ratelimit zone=c1; mirror /mirror_sub; proxy_pass http://127.0.0.1:$bp/hold; }
        location = /mirror_sub { internal; ratelimit zone=c1; proxy_pass http://127.0.0.1:$bp/hold; }
        location /c1     { ratelimit zone=c1; proxy_pass http://127.0.0.1:$bp/hold; }
        location /rc     { ratelimit zone=r1; ratelimit zone=c1; proxy_pass http://127.0.0.1:$bp/hold; }
        location /cr     { ratelimit zone=c1; ratelimit zone=r1; proxy_pass http://127.0.0.1:$bp/hold; }
        location /both   { ratelimit zone=r2; ratelimit zone=c1; proxy_pass http://127.0.0.1:$bp/hold; }
        location /peek2  { ratelimit zone=r2 quantity=0; empty_gif; }
        location /four   { ratelimit zone=c4; proxy_pass http://127.0.0.1:$bp/hold; }
        location /dry    { ratelimit_dry_run on; ratelimit zone=cd; proxy_pass http://127.0.0.1:$bp/hold; }
        location /tier   { ratelimit zone=cv; proxy_pass http://127.0.0.1:$bp/hold; }
        location /cm     { ratelimit zone=cm; proxy_pass http://127.0.0.1:$bp/hold; }
        location = /metrics { ratelimit_metrics; }
        location /api/   { ratelimit_api; }
EOF
my $http = <<"EOF";
    log_format cst '\$arg_key \$status \$ratelimit_status';
    map \$arg_tier \$ctier { gold 3; silver 1; bad x0; default ""; }
    ratelimit_zone c2 key=\$arg_key concurrency=2;
    ratelimit_zone c1 key=\$arg_key concurrency=1;
    ratelimit_zone c4 key=\$arg_key concurrency=4;
    ratelimit_zone cd key=\$arg_key concurrency=1;
    ratelimit_zone cm key=\$arg_key concurrency=2;
    ratelimit_zone cv key=\$arg_key concurrency=\$ctier default_concurrency=2;
    ratelimit_zone r1 key=\$arg_key requests=1 period=1h;
    ratelimit_zone r2 key=\$arg_key requests=2 period=1h burst=1;
    proxy_set_header X-Worker \$pid;
    server {
        listen 127.0.0.1:%%PORT%% reuseport;
        access_log %%DIR%%/access.log cst;
        add_header X-Status \$ratelimit_status always;
        add_header X-Who "\$status:\$pid" always;
$locations
    }
EOF
$http .= <<"EOF" if $has_h2;
    server {
        $h2_listen
        add_header X-Status \$ratelimit_status always;
$locations
    }
EOF

my $page = 'A<!--# include virtual="/sub1?ms=300&key=ssi" -->B<!--# include virtual="/sub1?ms=0&key=ssi" -->C';
my $n = start_nginx($http, workers => 2, files => { 'html/page.shtml' => $page });
my $port = $n->port;

sub enter { my ($path, $key, %o) = @_; return $b->enter($port, $path, $key, %o) }
sub probe {    # a quick request (the backend answers at once): (status, headers)
    my ($path, $key) = @_;
    my ($st, $h) = $n->get($path . ($path =~ /\?/ ? '&' : '?') . "key=$key&ms=0");
    return ($st // 'ERR', $h);
}
sub held { return join ' ', map { $_->{held} ? 'held' : $_->{status} } @_ }
# Waits until zone c2 counts $count requests of $key in flight (ratelimit_api). nginx closes the
# upstream connection of a request it gives up (its client or stream gone) before it ends the
# request and gives its slot back: the backend's count alone may come first.
sub wait_in_flight {
    my ($key, $count) = @_;
    return wait_until(sub { ($n->key_state('c2', $key)->{in_flight} // -1) == $count });
}

# 1. N pass, the next is rejected with 429 and Retry-After: 1; another key is not affected.
{
    my ($st, $h) = probe('/hold', 'hdr');
    is($st, 200, 'a request alone passes');
    like($h->{ratelimit} // '', qr/^"c2";r=1;t=0$/, '... RateLimit: one slot left (N - 1), reset 0') or diag($h->{':raw'});
    like($h->{'ratelimit-policy'} // '', qr/^"c2";q=2\b/, '... RateLimit-Policy: q=N') or diag($h->{':raw'});

    my @e = (enter('/hold', 'a'), enter('/hold', 'a'));
    is(held(@e), 'held held', 'N=2: two slow requests of a key pass');
    is($b->stats('a')->{cur}, 2, '... the backend has both');
    ($st, $h) = probe('/hold', 'a');
    is($st, 429, 'the third is rejected with 429');
    is($h->{'retry-after'}, '1', '... Retry-After: 1');
    is($h->{'x-status'}, 'REJECTED', '... $ratelimit_status REJECTED');
    like($h->{ratelimit} // '', qr/^"c2";r=0;t=0$/, '... RateLimit: none left, reset 0') or diag($h->{':raw'});
    is($b->stats('a')->{started}, 2, '... and never reached the backend');
    my ($lst, $lh) = probe('/legacy', 'a');
    is(join(' ', $lst, map { $lh->{"x-ratelimit-$_"} // '-' } qw(limit remaining reset)), '429 2 0 0',
        'legacy headers on rejection: X-RateLimit-Limit N, Remaining 0, Reset 0');
    ($st) = probe('/hold', 'b');
    is($st, 200, 'another key is not affected');
    ($st) = probe('/other', 'a');
    is($st, 429, 'another location of the zone: the same slots');

    # 2. A slot comes back when a request ends.
    $b->release('a');    # both are answered
    is(join(' ', map { (read_response($_->{sock}))[0] } @e), '200 200', 'the held requests complete');
    @e = (enter('/hold', 'a'), enter('/hold', 'a'));
    is(held(@e), 'held held', 'once they ended, two pass again');
    ($st) = probe('/hold', 'a');
    is($st, 429, '... and the third is rejected again');
    is($b->finish('a', @e), '200 200', '... (done)');
}

# 3. ... when its client closes the connection early.
{
    my @e = (enter('/hold', 'ce'), enter('/hold', 'ce'));
    is(held(@e), 'held held', 'client gone: two held');
    close $e[0]{sock};
    ok($b->wait_cur('ce', 1), 'client gone: nginx closed the upstream connection');
    is($b->stats('ce')->{aborted}, 1, '... the backend saw it aborted');
    wait_in_flight('ce', 1);
    my $x = enter('/hold', 'ce');
    ok($x->{held}, 'client gone: its slot is free (a new request passes)') or diag("status $x->{status}");
    my ($st) = probe('/hold', 'ce');
    is($st, 429, '... and the next is rejected');
    is($b->finish('ce', $e[1], $x), '200 200', '... (done)');
}

# 4. ... when the upstream times out (proxy_read_timeout 1.5 s).
{
    my @e = (enter('/to', 'to'), enter('/to', 'to'));
    is(held(@e), 'held held', 'upstream timeout: two held');
    my ($st) = probe('/hold', 'to');
    is($st, 429, 'upstream timeout: a third rejected while they wait');
    is(join(' ', map { (read_response($_->{sock}, 10))[0] } @e), '504 504', 'the upstream timed out: 504');
    is($b->stats('to')->{aborted}, 2, '... nginx closed both upstream connections');
    @e = (enter('/hold', 'to'), enter('/hold', 'to'));
    is(held(@e), 'held held', 'upstream timeout: both slots free again');
    is($b->finish('to', @e), '200 200', '... (done)');
}

# 5. Counted once across internal redirects (try_files and error_page to a named location).
for my $loc ('/tf', '/ep') {
    my $k = "redir$loc" =~ s{/}{}r;
    my @e = (enter($loc, $k), enter($loc, $k));
    is(held(@e), 'held held', "$loc: two requests redirected to \@up pass (one slot each)");
    my ($st) = probe($loc, $k);
    is($st, 429, "$loc: the third rejected");
    is($b->finish($k, @e), '200 200', "$loc: the redirected requests complete");
    @e = (enter('/hold', $k), enter('/hold', $k));
    is(held(@e), 'held held', "$loc: both slots given back after the redirect");
    is($b->finish($k, @e), '200 200', '... (done)');
}

# 6. Subrequests are not counted: SSI includes and mirror, into locations of a zone of 1.
{
    $b->reset('ssi');
    my ($st, $h, $body) = $n->get('/page.shtml?key=ssi');
    is($st, 200, 'SSI page (N=1, holding the slot of its key) answered');
    is($body, "A[ssi]\nB[ssi]\nC", 'SSI: both includes of the same key reached the backend (not rejected)');
    is($b->stats('ssi')->{served}, 2, 'SSI: the backend served both subrequests');
    ($st) = probe('/c1', 'ssi');
    is($st, 200, 'SSI: the slot is free after the page');

    my $e = enter('/mir', 'mir', ms => 600000);
    ok($e->{held}, 'mirror: the main request passes');
    ok($b->wait_cur('mir', 2), 'mirror: the mirror subrequest of the same key reached the backend too');
    ($st) = probe('/c1', 'mir');
    is($st, 429, 'mirror: the main request holds the one slot');
    is($b->finish('mir', $e), '200', 'mirror: done');
    ok($b->wait_cur('mir', 0), 'mirror: both ended');
    ($st) = probe('/c1', 'mir');
    is($st, 200, 'mirror: the slot is free again');
}

# 7. All or nothing with a rate zone in the same location.
{
    # A request the rate zone rejects holds no slot (rate zone listed first, then last).
    my ($st, $h) = probe('/rc', 'an');
    is($st, 200, 'rate+concurrency: the first passes (the one unit of the rate zone)');
    my @s = map { (probe($_, 'an'))[0] } qw(/rc /rc /cr /cr /rc /cr);
    is("@s", '429 429 429 429 429 429', 'rate+concurrency: then the rate zone rejects (either order)');
    my $e = enter('/c1', 'an');
    ok($e->{held}, 'the requests the rate zone rejected left no slot taken (N=1: a slow one passes)')
      or diag("status $e->{status}");
    ($st) = probe('/c1', 'an');
    is($st, 429, '... and the key is full with it');
    is($b->finish('an', $e), '200', '... (done)');

    # A request rejected for want of a slot consumes no rate.
    $e = enter('/both', 'bn');
    ok($e->{held}, 'rate (2 an hour) + concurrency 1: one slow request passes');
    @s = map { (probe('/both', 'bn'))[0] } 1 .. 3;
    is("@s", '429 429 429', '... three more rejected for want of a slot');
    ($st, $h) = $n->get('/peek2?key=bn');
    my ($item) = parse_sf_list($h->{ratelimit});
    is($item ? $item->{r} : 'none', 1, '... they consumed no rate: 1 of 2 left') or diag($h->{':raw'});
    is($b->finish('bn', $e), '200', '... (done)');
    ($st) = probe('/both', 'bn');
    is($st, 200, 'the second unit is used by the next request');
    ($st, $h) = probe('/both', 'bn');
    is($st, 429, '... and then the rate zone rejects');
}

# 8. Two workers, many clients on one key: the backend never has more than N of it at once,
# and has N most of the time.
{
    $b->reset('many');
    my $r = run_clients($port, '/four?key=many&ms=100', 16, 1000000, keepalive => 0, until => time + 3.5,
        record => 'X-Who');
    my $s = $b->stats('many');
    is(codes($r), '200,429', 'many clients: only 200 and 429') or diag(explain $r);
    is($s->{max}, 4, 'many clients: the backend never had more than N=4 of the key at once');
    is($s->{served}, $r->{200} // 0, 'many clients: every admitted request reached the backend');
    ok(($r->{200} // 0) >= 40, "many clients: $r->{200} admitted in 3.5 s (100 ms each, 4 at a time)");
    my $share = $b->share_at('many', 4);
    ok($share > 0.6, sprintf('many clients: N in progress %.0f%% of the busy time', 100 * $share))
      or diag(explain $s->{levels});
    my %pids = map { /^200:(\d+)$/ ? ($1 => 1) : () } keys %{ $r->{':values'} || {} };
    is(scalar(keys %pids), 2, 'many clients: both workers admitted requests of the key');
}

# 9. HTTP/2: a stream reset gives its slot back.
SKIP: {
    skip "this nginx has no http_v2_module", 9 unless $has_h2;
    my $h2 = H2->new(($n->ports)[1]);
    $h2->request(1, '/hold?key=h2&ms=600000');
    $h2->request(3, '/hold?key=h2&ms=600000');
    ok($b->wait_cur('h2', 2), 'HTTP/2: two streams of a key pass');
    $h2->request(5, '/hold?key=h2&ms=0');
    is($h2->status_of(5), 429, 'HTTP/2: a third stream on the same connection is rejected');
    $h2->rst(1);
    ok($b->wait_cur('h2', 1), 'HTTP/2: RST_STREAM of stream 1: nginx closed its upstream connection');
    wait_in_flight('h2', 1);
    $h2->request(7, '/hold?key=h2&ms=600000');
    ok($b->wait_cur('h2', 2), 'HTTP/2: its slot is free: a new stream passes');
    $h2->request(9, '/hold?key=h2&ms=0');
    is($h2->status_of(9), 429, 'HTTP/2: and the next one is rejected');
    $b->release('h2');
    is(join(' ', map { $h2->status_of($_) } 3, 7), '200 200', 'HTTP/2: the held streams complete');
    wait_in_flight('h2', 0);    # (a stream ends after its last frame was sent)
    $h2->request(11, '/hold?key=h2&ms=600000');
    ok($b->wait_cur('h2', 1), 'HTTP/2: one more held');
    $h2->close;
    ok($b->wait_cur('h2', 0), 'HTTP/2: the connection closed: the upstream request ended');
    wait_in_flight('h2', 0);
    my @e = (enter('/hold', 'h2'), enter('/hold', 'h2'));
    is($b->finish('h2', @e), '200 200', 'HTTP/2: no slot left taken by the closed connection');
}

# 10. A reload with requests in flight: their slots stay taken, and come back when they end.
{
    my @e = (enter('/hold', 'rl'), enter('/hold', 'rl'));
    is(held(@e), 'held held', 'reload: two held before');
    my %old = map { $_ => 1 } $n->worker_pids;
    kill 'HUP', $n->master_pid;
    my $deadline = time + 10;
    my @new;
    while (time < $deadline) {
        @new = grep { !$old{$_} } $n->worker_pids;
        last if @new >= 2;
        sleep 0.05;
    }
    is(scalar @new, 2, 'reload: two new workers run');
    ok(scalar(grep { pid_alive($_) } keys %old), 'reload: the old workers are still finishing their requests');
    my @s = map { (probe('/hold', 'rl'))[0] } 1 .. 4;
    is("@s", '429 429 429 429', 'reload: the key is still full for the new workers');
    is($b->finish('rl', @e), '200 200', 'reload: the old requests complete');
    $deadline = time + 10;
    sleep 0.05 while time < $deadline && grep { pid_alive($_) } keys %old;
    ok(!grep({ pid_alive($_) } keys %old), 'reload: the old workers exited');
    @e = (enter('/hold', 'rl'), enter('/hold', 'rl'));
    is(held(@e), 'held held', 'reload: their slots came back');
    my ($st) = probe('/hold', 'rl');
    is($st, 429, 'reload: N is still exact');
    is($b->finish('rl', @e), '200 200', '... (done)');
}

# 11. Dry run admits, and logs what it would have rejected; a rejection is logged.
{
    my @e = (enter('/dry', 'dry'), enter('/dry', 'dry'));
    is(held(@e), 'held held', 'dry run: two pass a zone of 1');
    is($b->stats('dry')->{max}, 2, '... both reached the backend');
    my @st = map { my ($s, $h) = read_response($_->{sock}); "$s " . ($h->{'x-status'} // '') } do { $b->release('dry'); @e };
    is("@st", '200 PASSED 200 REJECTED_DRY_RUN', 'dry run: $ratelimit_status PASSED, then REJECTED_DRY_RUN');
    ok($n->wait_log(qr/\[error\][^\n]*limiting connections, dry run, by zone "cd"/), 'dry run: logged (at error, the default level)')
      or diag($n->error_log);
    like($n->error_log, qr/\[error\][^\n]*limiting connections by zone "c2", client: 127\.0\.0\.1/,
        'a rejection is logged: limiting connections by zone "c2", client: 127.0.0.1');
    unlike($n->error_log, qr/limiting connections by zone "cd"/, 'dry run: no rejection line for its zone');
}

# 12. $ratelimit_status in the access log.
{
    my $log = '';
    my $deadline = time + 3;
    until ($log =~ /^dry 200 REJECTED_DRY_RUN$/m || time > $deadline) { sleep 0.05; $log = slurp($n->dir . '/access.log') }
    like($log, qr/^a 200 PASSED$/m, 'access log: PASSED');
    like($log, qr/^a 429 REJECTED$/m, 'access log: REJECTED');
    like($log, qr/^dry 200 REJECTED_DRY_RUN$/m, 'access log: REJECTED_DRY_RUN');
}

# 13. concurrency=$variable (a map), default_concurrency for an empty or invalid value.
for my $case (['gold', 3], ['silver', 1], ['', 2], ['bad', 2]) {
    my ($tier, $want) = @$case;
    my $k = 'tier' . ($tier || 'none');
    my @e = map { enter("/tier?tier=$tier", $k) } 1 .. $want;
    is(held(@e), join(' ', ('held') x $want), "concurrency=\$var, tier '$tier': $want pass");
    my ($st, $h) = probe("/tier?tier=$tier", $k);
    is($st, 429, "... the next is rejected");
    is($b->finish($k, @e), join(' ', ('200') x $want), '... (done)');
}
like($n->error_log, qr/\[warn\][^\n]*(?:concurrency|"x0")/, 'an invalid concurrency value is logged at warn');

# 14. The in-flight gauge and the rejection counter.
{
    my @e = (enter('/cm', 'm1'), enter('/cm', 'm1'), enter('/cm', 'm2'));
    is(held(@e), 'held held held', 'metrics: three held (two keys)');
    is(metric(3, 'nginx_ratelimit_in_flight', 'zone="cm"'), 3, 'metrics: nginx_ratelimit_in_flight{zone="cm"} 3');
    my ($st) = probe('/cm', 'm1');
    is($st, 429, 'metrics: one rejected');
    is(metric(1, 'nginx_ratelimit_requests_total', 'zone="cm"', 'result="rejected"'), 1, 'metrics: requests_total rejected 1');
    is($b->finish('m1', @e[0, 1]), '200 200', 'metrics: two ended');
    is(metric(1, 'nginx_ratelimit_in_flight', 'zone="cm"'), 1, 'metrics: in flight 1');
    is($b->finish('m2', $e[2]), '200', 'metrics: the last ended');
    is(metric(0, 'nginx_ratelimit_in_flight', 'zone="cm"'), 0, 'metrics: in flight 0');
    is(metric(3, 'nginx_ratelimit_requests_total', 'zone="cm"', 'result="passed"'), 3, 'metrics: requests_total passed 3');
}

# The value of a sample whose labels include all of @labels (summed), from /metrics, awaited
# until it is $want (settle_value): a gauge follows a request's end, when its worker runs the
# cleanup.
sub metric {
    my ($want, $name, @labels) = @_;
    my $read = sub {
        my (undef, undef, $body) = $n->get('/metrics');
        my ($sum, $seen) = (0, 0);
        for (split /\n/, $body // '') {
            next unless /^\Q$name\E\{(.*)\} (\S+)$/;
            my ($ls, $v) = ($1, $2);
            next if grep { index($ls, $_) < 0 } @labels;
            $sum += $v;
            $seen = 1;
        }
        return $seen ? $sum : 'absent';
    };
    return settle_value($read, $want);
}

# 15. SIGKILL of the worker(s) holding slots: the next request finding the key full reclaims
# them. An instance of its own, whose error log (kill.log) is checked here: the kill makes the
# master log "exited on signal 9" on purpose.
{
    my $kconf = <<"EOF";
    ratelimit_zone k2 key=\$arg_key concurrency=2;
    proxy_set_header X-Worker \$pid;
    server {
        listen 127.0.0.1:%%PORT%% reuseport;
        location /hold { ratelimit zone=k2; proxy_pass http://127.0.0.1:$bp; }
    }
EOF
    my $full = RLTest::Nginx::_full_conf('%%DIR%%', $kconf, workers => 2);
    $full =~ s{%%DIR%%/error\.log}{%%DIR%%/kill.log} or die 'no error_log line';
    my $k = start_nginx(undef, full => $full, workers => 2);
    my @e = map { $b->enter($k->port, '/hold', 'kill') } 1 .. 2;
    is(held(@e), 'held held', 'kill: two held');
    my @victims = sort keys %{ $b->stats('kill')->{holders} };
    ok(@victims >= 1 && !grep({ !/^\d+$/ } @victims), "kill: held by worker(s) @victims");
    my ($st) = $k->get('/hold?key=kill&ms=0');
    is($st, 429, 'kill: the key is full');
    kill 'KILL', @victims;
    ok($b->wait_cur('kill', 0), 'kill: their upstream connections closed');
    my $deadline = time + 10;
    my %dead = map { $_ => 1 } @victims;
    my @w;
    while (time < $deadline) {
        @w = $k->worker_pids;
        last if @w == 2 && !grep { $dead{$_} } @w;
        sleep 0.05;
    }
    is(scalar(grep { !$dead{$_} } @w), 2, 'kill: the master runs two workers again');
    close $_->{sock} for @e;
    my @again = map { $b->enter($k->port, '/hold', 'kill') } 1 .. 2;
    is(held(@again), 'held held', 'kill: the dead workers\' slots are reclaimed at once');
    ($st) = $k->get('/hold?key=kill&ms=0');
    is($st, 429, 'kill: and N is exact again');
    is($b->finish('kill', @again), '200 200', '... (done)');
    $k->stop;
    my $klog = slurp($k->dir . '/kill.log');
    my $re = join '|', @victims;
    like($klog, qr/worker process (?:$re) exited on signal 9/, 'kill: the master saw the kill');
    my @bad = grep { /$RLTest::Nginx::BAD_LOG/ && !/worker process (?:$re) exited on signal 9/ } split /\n/, $klog;
    is(scalar @bad, 0, 'kill: no other alert, crit or signal in its log') or diag(join "\n", @bad);
}

# What this file provokes: rejections, the upstream timeouts of /to, the 404 that /ep redirects.
my @bad = grep { /\[(?:error|crit|alert|emerg)\]/
      && !/limiting (?:connections|request)\b|upstream timed out[^\n]*"GET \/to\?|open\(\) "[^"]*\/nothing\/ep" failed/ }
  split /\n/, $n->error_log;
is(scalar @bad, 0, 'no other error in the log') or diag(join "\n", @bad[0 .. ($#bad < 9 ? $#bad : 9)]);

done_testing;

# ------------------------------------------------------------------------------------------
# A minimal HTTP/2 client (prior knowledge, h2c): requests as HEADERS frames (HPACK literals,
# no Huffman), RST_STREAM, and the status of each stream's response (nginx sends :status first,
# as a static-table index or a literal with index 8, raw).
package H2;
use IO::Select;
use IO::Socket::INET;
use Time::HiRes qw(time);

sub new {
    my ($class, $port) = @_;
    my $s = IO::Socket::INET->new(PeerAddr => '127.0.0.1', PeerPort => $port, Proto => 'tcp', Timeout => 5)
      or die "h2 connect: $!";
    $s->autoflush(1);
    my $self = bless { s => $s, buf => '', status => {} }, $class;
    $self->_send("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" . _frame(4, 0, 0, ''));
    return $self;
}

sub _frame {
    my ($type, $flags, $sid, $payload) = @_;
    my $len = length $payload;
    return pack('CnCCN', $len >> 16, $len & 0xffff, $type, $flags, $sid) . $payload;
}

sub _int {    # HPACK integer, $bits-bit prefix, first byte's high bits $first
    my ($v, $bits, $first) = @_;
    my $max = (1 << $bits) - 1;
    return chr($first | $v) if $v < $max;
    my $o = chr($first | $max);
    $v -= $max;
    while ($v >= 128) { $o .= chr(($v % 128) + 128); $v = int($v / 128) }
    return $o . chr($v);
}

sub _str { my ($s) = @_; return _int(length $s, 7, 0) . $s }

sub _send { my ($self, $data) = @_; local $SIG{PIPE} = 'IGNORE'; print { $self->{s} } $data }

sub request {
    my ($self, $sid, $path) = @_;
    # :method GET (2), :scheme http (6), :path (literal, name 4), :authority (literal, name 1)
    my $block = "\x82\x86" . _int(4, 4, 0) . _str($path) . _int(1, 4, 0) . _str('localhost');
    $self->_send(_frame(1, 0x5, $sid, $block));    # END_STREAM | END_HEADERS
}

sub rst { my ($self, $sid) = @_; $self->_send(_frame(3, 0, $sid, pack('N', 8))) }    # CANCEL

sub close { my ($self) = @_; close $self->{s} if $self->{s}; delete $self->{s} }

our %STATIC;    # set at compile time: this code sits after the tests, which run first
BEGIN { %STATIC = (0x88 => 200, 0x89 => 204, 0x8a => 206, 0x8b => 304, 0x8c => 400, 0x8d => 404, 0x8e => 500) }

sub _status {
    my ($block) = @_;
    my $b0 = ord substr($block, 0, 1);
    return $STATIC{$b0} if $STATIC{$b0};
    if (($b0 == 0x48 || $b0 == 0x08 || $b0 == 0x18) && length $block > 2) {
        my $l = ord substr($block, 1, 1);
        return substr($block, 2, $l) unless $l & 0x80;
    }
    return sprintf 'unparsed(%02x)', $b0;
}

# The status of stream $sid, reading frames for up to $timeout seconds (5); 'NONE' if none came.
sub status_of {
    my ($self, $sid, $timeout) = @_;
    my $deadline = time + ($timeout // 5);
    my $sel = IO::Select->new($self->{s});
    while (!defined $self->{status}{$sid}) {
        while (length $self->{buf} >= 9) {
            my ($l1, $l2, $type, $flags, $id) = unpack('CnCCN', $self->{buf});
            my $len = ($l1 << 16) | $l2;
            last if length $self->{buf} < 9 + $len;
            my $payload = substr($self->{buf}, 9, $len);
            substr($self->{buf}, 0, 9 + $len) = '';
            $id &= 0x7fffffff;
            if ($type == 1) {    # HEADERS
                my $p = $payload;
                my $pad = 0;
                if ($flags & 0x8) { $pad = ord substr($p, 0, 1); $p = substr($p, 1) }
                $p = substr($p, 5) if $flags & 0x20;
                $p = substr($p, 0, length($p) - $pad);
                $self->{status}{$id} //= _status($p);
            } elsif ($type == 4 && !($flags & 1)) {    # SETTINGS: ACK
                $self->_send(_frame(4, 1, 0, ''));
            } elsif ($type == 6 && !($flags & 1)) {    # PING: ACK
                $self->_send(_frame(6, 1, 0, $payload));
            } elsif ($type == 3) {    # RST_STREAM
                $self->{status}{$id} //= 'RST';
            } elsif ($type == 7) {    # GOAWAY
                $self->{goaway} = 1;
            }
        }
        last if defined $self->{status}{$sid};
        my $left = $deadline - time;
        last if $left <= 0 || !$sel->can_read($left);
        my $got = sysread($self->{s}, $self->{buf}, 65536, length $self->{buf});
        last unless $got;
    }
    return $self->{status}{$sid} // 'NONE';
}
