# settle= (issue 20) in shared memory: a request's cost decided by its response, charged or
# given back when the main request ends. The upstream is RLTest::Backend, answering with the
# status, response header, chunked body and trailer a request asks for.
#  - nginx -t: settle= refused on a concurrency zone, empty, given twice, or a number that is
#    not one or is beyond 10^12.
#  - Failed logins (quantity=0 settle=$login_failed): 5 failures then 429 whatever the worker,
#    successes never counted (many, concurrent), a full key rejected even with quantity=0;
#    the sliding log too. $ratelimit_status and $ratelimit_settled in the access log.
#  - Tokens from a response header: debt, the exact Retry-After, the debt capped at one bucket,
#    the headers showing the state at decision time; from a trailer where this nginx passes
#    trailers to $upstream_trailer_NAME (proxy_pass_trailers, nginx >= 1.27.2; Debian's 1.22
#    drops them: checked); from a gRPC upstream's trailing metadata through grpc_pass (every
#    version; RLTest::Grpc, skipped without python3-grpcio): unary and streamed calls, none,
#    debt and the rejection a gRPC client sees.
#  - Refund on 502 (upstream down) and 504 (upstream too slow): failures eat no quota.
#  - Bytes ($bytes_sent), also for a client that closes mid-body: settled once, what was sent.
#  - Internal redirects settled once; subrequests (SSI, mirror) not settled; dry run.
#  - An invalid settle value: logged once a second at most, escaped, settles nothing.
#  - The overshoot bound: 32 clients of one key, each response settling 10 (quantity 1):
#    admitted cost <= limit + 32 x 9 (README "Charging by the response"), the figure printed.
#  - examples/settle-*.conf run for real (listen, pid, logs and upstream moved).
# Keys' states are read with ratelimit_api (reading consumes nothing).
# runs alone: it loads the machine (32 clients, gRPC) and checks Retry-After against time
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use RLTest;
use RLTest::Backend qw(start_backend send_request);
use RLTest::Grpc qw(grpc_missing start_grpc grpc_call);
use Test::More;
use POSIX qw(ceil);
use Socket qw(SOL_SOCKET SO_RCVBUF);
use IO::Select;
use Time::HiRes qw(time sleep);

my $day = 86400;
avoid_window_edge($day, 120);    # the window zones count in one window of a day
alarm($ENV{RLTEST_TIMEOUT} || 150);

my $b  = start_backend();
my $bp = $b->port;
my $dead = free_port();           # nothing listens there: 502

# Which routes pass an upstream's trailers to $upstream_trailer_NAME: proxy_pass with
# proxy_pass_trailers (nginx 1.27.2 and later); grpc_pass (every version: tested below with a
# gRPC upstream, over `listen ... http2` before 1.25.1, `http2 on;` after).
my (undef, $v_out) = run_cmd(10, nginx_bin(), '-V');
my ($version) = $v_out =~ m{nginx/(\d+\.\d+\.\d+)};
my $h2_new = $version && sprintf('%03d%03d%03d', split /\./, $version) ge '001025001';
my ($pt_rc) = nginx_t(<<"EOF");
    server { listen 127.0.0.1:%%PORT%%; location / { proxy_pass_trailers on; proxy_pass http://127.0.0.1:$bp; } }
EOF
my $pass_trailers = $pt_rc == 0;
note("nginx $version: proxy_pass_trailers " . ($pass_trailers ? 'available' : 'unknown'));

# ------------------------------------------------------------------ nginx -t
{
    my $zones = "    ratelimit_zone c key=\$arg_k concurrency=2;\n    ratelimit_zone r key=\$arg_k requests=5 period=1h;\n";
    for my $case (['concurrency zone', 'ratelimit zone=c settle=1;', qr/settle/],
                  ['empty settle=', 'ratelimit zone=r settle=;', qr/settle/],
                  ['settle= twice', 'ratelimit zone=r settle=1 settle=$status;', qr/duplicate parameter "settle="/],
                  ['a number beyond 10^12', 'ratelimit zone=r settle=1000000000001;', qr/settle/],
                  ['not a number', 'ratelimit zone=r settle=12ab;', qr/settle/]) {
        my ($what, $line, $re) = @$case;
        my ($rc, $out, $file) = nginx_t("$zones    server { listen 127.0.0.1:%%PORT%%; location / { $line empty_gif; } }\n");
        isnt($rc, 0, "nginx -t: $what refused");
        like($out, $re, "nginx -t: $what: the message names settle");
        my $ln = conf_line_of($file, $line);
        like($out, qr/"ratelimit".* in \Q$file\E:$ln\b/, "nginx -t: $what: the directive, file and line");
    }
    my ($rc, $out) = nginx_t("$zones    server { listen 127.0.0.1:%%PORT%%;\n"
        . "        location /a { ratelimit zone=r settle=3; empty_gif; }\n"
        . "        location /b { ratelimit zone=r quantity=0 settle=\$status; empty_gif; }\n"
        . "        location /c { ratelimit zone=r settle=1000000000000; empty_gif; }\n    }\n");
    is($rc, 0, 'nginx -t: settle=NUMBER (up to 10^12) and settle=$variable accepted') or diag($out);
}

# ------------------------------------------------------------------ the instance
my $up = "http://127.0.0.1:$bp";
my $trailer_loc = $pass_trailers ? <<"EOF" : '';
        location /ttr    { ratelimit zone=tok quantity=0 settle=\$upstream_trailer_x_tokens; proxy_http_version 1.1; proxy_pass_trailers on; proxy_pass $up; }
        location /trpass { proxy_http_version 1.1; proxy_pass_trailers on; proxy_pass $up; }
EOF
my $http = <<"EOF";
    log_format st '\$arg_tag|\$status|\$ratelimit_status|\$ratelimit_settled|\$bytes_sent|\$upstream_trailer_x_tokens';
    map \$status \$login_failed { 401 1; 403 1; default 0; }
    map \$status \$charged { ~^50[234] 0; default 1; }
    ratelimit_zone logins key=\$binary_remote_addr\$arg_user requests=5 period=24h algo=fixed;
    ratelimit_zone loglog key=\$arg_user requests=5 period=1h algo=log;
    ratelimit_zone tok    key=\$arg_k requests=100 period=100s burst=99;
    ratelimit_zone fast   key=\$arg_k requests=10 period=1s burst=9;
    ratelimit_zone ref    key=\$arg_k requests=3 period=24h algo=fixed;
    ratelimit_zone bytes  key=\$arg_k requests=100000000 period=24h algo=fixed;
    ratelimit_zone rd     key=\$arg_k requests=100 period=24h algo=fixed;
    ratelimit_zone dry    key=\$arg_k requests=2 period=1h burst=1;
    ratelimit_zone inv    key=\$arg_k requests=10 period=24h algo=fixed;
    ratelimit_zone inv2   key=\$arg_k requests=10 period=24h algo=fixed;
    ratelimit_zone over   key=\$arg_k requests=100 period=24h algo=fixed;
    proxy_set_header X-Worker \$pid;
    server {
        listen 127.0.0.1:%%PORT%% reuseport sndbuf=32k;
        access_log %%DIR%%/access.log st;
        add_header X-Status \$ratelimit_status always;
        add_header X-Who \$pid always;
        location /login  { ratelimit zone=logins quantity=0 settle=\$login_failed; proxy_pass $up; }
        location /loglog { ratelimit zone=loglog quantity=0 settle=\$login_failed; proxy_pass $up; }
        location /tok    { ratelimit zone=tok quantity=0 settle=\$upstream_http_x_tokens; proxy_pass $up; }
        location /fast   { ratelimit zone=fast quantity=0 settle=\$upstream_http_x_tokens; proxy_pass $up; }
$trailer_loc        location /trcheck { proxy_http_version 1.1; proxy_pass $up; }
        location /ref    { ratelimit zone=ref settle=\$charged; proxy_pass http://127.0.0.1:$dead; }
        location /ref504 { ratelimit zone=ref settle=\$charged; proxy_read_timeout 300ms; proxy_pass $up; }
        location /refok  { ratelimit zone=ref settle=\$charged; proxy_pass $up; }
        location /bytes  { ratelimit zone=bytes quantity=0 settle=\$bytes_sent; proxy_buffering off; proxy_pass $up; }
        location /tf     { ratelimit zone=rd quantity=0 settle=7; try_files /nonexistent \@rdup; }
        location /ep     { ratelimit zone=rd quantity=0 settle=7; root %%DIR%%/nothing; error_page 404 = \@rdup; }
        location \@rdup   { ratelimit zone=rd quantity=0 settle=7; proxy_pass $up; }
        location = /page.shtml { ratelimit zone=rd quantity=0 settle=3; ssi on; root %%DIR%%/html; default_type text/html; }
        location /sub    { ratelimit zone=rd quantity=0 settle=7; proxy_pass $up; }
        location /mir    { ratelimit zone=rd quantity=0 settle=3; mirror /mirror_sub; proxy_pass $up; }
        location = /mirror_sub { internal; ratelimit zone=rd quantity=0 settle=7; proxy_pass $up\$request_uri; }
        location /dry    { ratelimit_dry_run on; ratelimit zone=dry quantity=0 settle=\$login_failed; proxy_pass $up; }
        location /inv    { ratelimit zone=inv settle=\$http_x_cost; empty_gif; }
        location /inv2   { ratelimit zone=inv2 settle=\$http_x_cost; empty_gif; }
        location /over   { ratelimit zone=over settle=10; proxy_pass $up; }
        location /api/   { ratelimit_api; }
    }
EOF
my $n = start_nginx($http, workers => 2, files => {
    'html/page.shtml' => "<p><!--# include virtual=\"/sub?k=ssi1&key=ssi\" --><!--# include virtual=\"/sub?k=ssi1&key=ssi\" --></p>\n" });

# One key's state in its zone (ratelimit_api): the decoded JSON. (on => $c: asked over the
# keep-alive connection $c, after the requests sent before on it have ended.)
sub api { return $n->key_state(@_) }
sub remaining { my $s = api(@_); return $s->{remaining} // "status $s->{status}" }

# The access-log line of the request tagged $tag: [status, ratelimit_status, settled, bytes_sent,
# trailer], awaited (the line is written when the request ends).
sub logline {
    my ($tag) = @_;
    my $deadline = time + 5;
    while (1) {
        for my $l (split /\n/, slurp($n->dir . '/access.log')) {
            my @f = split /\|/, $l, -1;
            return [@f[1 .. 5]] if $f[0] eq $tag;
        }
        return [] if time > $deadline;
        sleep 0.02;
    }
}
my $TAG = 0;
sub tag { return 't' . ++$TAG }
# A settled value as logged: '' or '-' when nothing was settled.
sub empty_settle { my ($v) = @_; return defined $v && ($v eq '' || $v eq '-') }

# Two keep-alive connections served by different workers (undef if none found in 40 tries).
sub two_workers {
    my %by;
    for (1 .. 40) {
        my $c = $n->keepalive;
        my (undef, $h) = $c->get('/api/zones');
        my $w = $h->{'x-who'} // '';
        $by{$w} //= $c;
        return @by{ (sort keys %by)[0, 1] } if keys %by >= 2;
    }
    return;
}

# ------------------------------------------------------------------ failed logins
{
    my ($c1, $c2) = two_workers();
    ok($c1 && $c2, 'two keep-alive connections on different workers');
    SKIP: {
        skip 'connections on two workers not found', 11 unless $c1 && $c2;
        my @conns = ($c1, $c2);
        # (status, X-Status, worker, tag) of a login on connection $i % 2, once it has ended: a
        # client sends the next login after this one's response, but its settle runs after that
        # response (the log phase), so the next request, on the other worker, could come first.
        # The API read on the same connection is answered after the login's log phase.
        my $req = sub {
            my ($i, $user, $status) = @_;
            my $t = tag();
            my $c = $conns[ $i % 2 ];
            my ($st, $h) = $c->get("/login?user=$user&key=login&status=$status&tag=$t");
            api('logins', "%7F%00%00%01$user", on => $c);
            return ($st // 'ERR', $h->{'x-status'} // '', $h->{'x-who'} // '', $t);
        };
        my (@s, %w, @tags);
        for my $i (0 .. 19) { my @r = $req->($i, 'alice', 200); push @s, $r[0]; $w{ $r[2] } = 1; push @tags, $r[3] }
        is("@s", join(' ', ('200') x 20), 'logins: 20 successes, on both workers, all admitted');
        is(scalar keys %w, 2, 'logins: the successes came through both workers');
        @s = ();
        my @ftags;
        for my $i (0 .. 6) { my @r = $req->($i, 'alice', 401); push @s, "$r[0]/$r[1]"; push @ftags, $r[3] }
        is("@s", join(' ', ('401/PASSED') x 5, ('429/REJECTED') x 2),
            'logins: then 5 failures admitted (alternating workers), the 6th and 7th rejected');
        my @ok = map { ($req->($_, 'alice', 200))[0] } 0 .. 1;
        is("@ok", '429 429', 'logins: a key with its 5 failures is rejected even with quantity=0 (a success too)');
        my @bob = map { ($req->($_, 'bob', 401))[0] } 0 .. 5;
        is("@bob", '401 401 401 401 401 429', 'logins: another account from the same address has its own 5');
        is(remaining('logins', '%7F%00%00%01alice'), 0, 'logins: the API shows alice with nothing left');

        # the access log: PASSED and 0 for a success, PASSED and 1 for a failure, REJECTED and
        # nothing settled for a rejection
        my $ls = logline($tags[0]);
        is("$ls->[0] $ls->[1] $ls->[2]", '200 PASSED 0', 'log: a success: PASSED, settled 0');
        my $lf = logline($ftags[0]);
        is("$lf->[0] $lf->[1] $lf->[2]", '401 PASSED 1', 'log: a failure: PASSED, settled 1');
        my $lr = logline($ftags[5]);
        is("$lr->[0] $lr->[1]", '429 REJECTED', 'log: a rejection: REJECTED');
        ok(empty_settle($lr->[2]), 'log: a rejected request settled nothing ($ratelimit_settled empty)')
          or diag("settled '$lr->[2]'");
        $_->close for @conns;
    }

    # Many successes at once, on fresh connections (both workers): none counted.
    my $r = run_clients($n->port, '/login?user=carol&key=login&status=200', 8, 25, keepalive => 0);
    is(codes($r), '200', 'logins: 200 concurrent successes all admitted') or diag(explain $r);
    my @f = map { ($n->get("/login?user=carol&key=login&status=403"))[0] } 1 .. 6;
    is("@f", '403 403 403 403 403 429', 'logins: after them, still 5 failures (403) allowed');

    # The sliding log counts only up to its limit, and a success is free there too.
    my @l = map { ($n->get("/loglog?user=dave&key=login&status=$_"))[0] } (401) x 3, 200, (401) x 3;
    is("@l", '401 401 401 200 401 401 429', 'log algorithm: 5 failures then 429');
}

# ------------------------------------------------------------------ tokens: a response header
{
    # tok: a bucket of 100 refilling 1 unit a second. 150 tokens from a fresh key: admitted,
    # then 50 into debt: a request needs the level at 99 or less: 51 s.
    my $k = fresh_key('tok');
    my $t0 = time;
    my ($st, $h) = $n->get("/tok?k=$k&hdr=X-Tokens:150&tag=" . (my $t = tag()));
    is($st, 200, 'tokens: a fresh key is admitted (quantity=0)');
    my ($item) = parse_sf_list($h->{ratelimit});
    is($item ? $item->{r} : undef, 100, 'tokens: its RateLimit header shows the state at decision time (100 left)');
    is(logline($t)->[2], '150', 'tokens: $ratelimit_settled is 150');
    my ($st2, $h2) = $n->get("/tok?k=$k&hdr=X-Tokens:1");
    my $span = time - $t0;
    is($st2, 429, 'tokens: the next request is rejected: the key is in debt');
    my $ra = $h2->{'retry-after'} // '';
    if ($span < 1) {
        is($ra, 51, 'tokens: Retry-After is exactly the 51 s the debt takes to drain to room for one');
    } else {
        ok($ra == 51 || $ra == ceil(51 - $span), "tokens: Retry-After $ra for the debt (span ${span}s)");
    }
    my $t1 = time;
    my $s = api('tok', $k);
    my $lag = (time - $t0) * 1000;
    ok(defined $s->{retry_after_ms} && $s->{retry_after_ms} <= 51000 && $s->{retry_after_ms} >= 51000 - $lag - 1,
        "tokens: the API's retry_after_ms $s->{retry_after_ms} is 51000 less the time since (<= ${\ int $lag} ms)");

    # A huge charge is capped at one bucket of debt: level 200, 101 s to room for one.
    my $k2 = fresh_key('tok');
    $t0 = time;
    ($st) = $n->get("/tok?k=$k2&hdr=X-Tokens:100000");
    is($st, 200, 'tokens: 100000 tokens on a fresh key: admitted');
    $s = api('tok', $k2);
    $lag = (time - $t0) * 1000;
    ok(defined $s->{retry_after_ms} && $s->{retry_after_ms} <= 101000 && $s->{retry_after_ms} >= 101000 - $lag - 1,
        "tokens: the debt is capped at one bucket: retry_after_ms $s->{retry_after_ms} ~ 101000");

    # fast: 10 a second, capacity 10. 19 tokens: rejected at once, Retry-After 1 (1 s to room
    # for one), and admitted again once it has passed.
    my $k3 = fresh_key('fast');
    ($st) = $n->get("/fast?k=$k3&hdr=X-Tokens:19");
    ($st2, $h2) = $n->get("/fast?k=$k3&hdr=X-Tokens:0");
    is("$st $st2", '200 429', 'tokens: a bucket of 10 after 19 tokens: rejected');
    is($h2->{'retry-after'} // '', 1, 'tokens: Retry-After 1 (1 s of debt)');
    sleep 1;
    ($st) = $n->get("/fast?k=$k3&hdr=X-Tokens:0");
    is($st, 200, 'tokens: admitted again after Retry-After');
}

# ------------------------------------------------------------------ tokens: a trailer
{
    # Without proxy_pass_trailers, proxy_pass does not give the trailer to the variable
    # (Debian's 1.22 has no such directive at all).
    my $t = tag();
    my ($st, undef, $body) = http_request($n->port, "/trcheck?key=tr&chunked=1&bytes=100&trailer=X-Tokens:42&tag=$t");
    is($st, 200, 'trailer: a chunked response with a trailer passes through proxy_pass');
    is(length $body, 100, 'trailer: the whole body came');
    my $v = logline($t)->[4];
    ok(defined $v && ($v eq '' || $v eq '-'), "trailer: proxy_pass without proxy_pass_trailers: \$upstream_trailer_x_tokens empty (nginx $version)")
      or diag("got '$v'");
    SKIP: {
        skip "nginx $version has no proxy_pass_trailers: no route passes trailers to \$upstream_trailer_NAME but grpc_pass (tested below)", 6
          unless $pass_trailers;
        $t = tag();
        ($st) = http_request($n->port, "/trpass?key=tr&chunked=1&bytes=100&trailer=X-Tokens:42&tag=$t");
        is(logline($t)->[4], '42', 'trailer: with proxy_pass_trailers on, $upstream_trailer_x_tokens is 42');
        my $k = fresh_key('ttr');
        my $t0 = time;
        $t = tag();
        ($st) = http_request($n->port, "/ttr?k=$k&key=tr&chunked=1&bytes=5000&trailer=X-Tokens:150&tag=$t");
        is($st, 200, 'trailer: a streamed response on a fresh key: admitted');
        is(logline($t)->[2], '150', 'trailer: $ratelimit_settled is the trailer\'s 150');
        my ($st2, $h2) = http_request($n->port, "/ttr?k=$k&key=tr&chunked=1&trailer=X-Tokens:1");
        my $span = time - $t0;
        is($st2, 429, 'trailer: the next request is rejected: 150 tokens took the key into debt');
        my $ra = $h2->{'retry-after'} // '';
        ok($ra == 51 || ($span >= 1 && $ra == ceil(51 - $span)), "trailer: Retry-After $ra (51 s of debt)");
        my $s = api('tok', $k);
        ok(($s->{retry_after_ms} // 0) > 49000, 'trailer: the API shows the debt');
    }
}

# ------------------------------------------------------------------ tokens: a gRPC trailer
# grpc_pass reads the upstream's trailers (the grpc-status HEADERS frame) into
# $upstream_trailer_NAME on every nginx with it (1.22 too). The upstream is t/lib/grpc_tokens.py
# (RLTest::Grpc): a call asking "tokens=N" ends with the trailing metadata "x-tokens: N".
{
    my $why = grpc_missing();
    my $h2_listen = $h2_new ? "listen 127.0.0.1:%%PORT1%%;\n        http2 on;" : 'listen 127.0.0.1:%%PORT1%% http2;';
    if (!$why) {
        my ($rc, $out) = nginx_t("    server { $h2_listen location / { grpc_pass grpc://127.0.0.1:$bp; } }\n");
        $why = "nginx $version has no grpc_pass over HTTP/2: $out" if $rc != 0;
    }
    SKIP: {
        skip "gRPC trailer not tested: $why", 20 if $why;
        my $g = start_grpc();
        my $gp = $g->port;
        # tok1h: a bucket of 100 refilling one unit every 36 s: no refill within the test.
        my $gn = start_nginx(<<"EOF2");
    log_format g '\$http_x_tag|\$status|\$ratelimit_status|\$ratelimit_settled|\$upstream_trailer_x_tokens';
    ratelimit_zone tok1h key=\$http_x_key requests=100 period=1h burst=99;
    server {
        $h2_listen
        access_log %%DIR%%/access.log g;
        location / { ratelimit zone=tok1h quantity=1 settle=\$upstream_trailer_x_tokens; grpc_pass grpc://127.0.0.1:$gp; }
    }
    server { listen 127.0.0.1:%%PORT%%; location /api/ { ratelimit_api; } }
EOF2
        my $hp = ($gn->ports)[1];
        # (status, ratelimit_status, settled, trailer) of the call tagged $t, awaited
        my $glog = sub {
            my ($t) = @_;
            my $deadline = time + 5;
            while (1) {
                for my $l (split /\n/, slurp($gn->dir . '/access.log')) {
                    my @f = split /\|/, $l, -1;
                    return join ' ', @f[1 .. 4] if $f[0] eq $t;
                }
                return '' if time > $deadline;
                sleep 0.02;
            }
        };
        my $call = sub {
            my ($method, $req, $k, $t) = @_;
            return grpc_call($hp, $method, $req, { 'x-key' => $k, 'x-tag' => $t });
        };
        my $rem = sub { my $s = $gn->key_state('tok1h', $_[0]); return $s->{remaining} // "status $s->{status}" };

        # 42 tokens in a unary call's trailer: the key keeps 100 - 42.
        my $k = fresh_key('g');
        my $t = tag();
        my $r = $call->('Unary', 'tokens=42', $k, $t);
        is($r->{code}, 'OK', 'gRPC: a unary call through grpc_pass') or diag(explain $r);
        is($r->{trailing}{'x-tokens'}, '42', 'gRPC: the client got the trailer x-tokens: 42');
        my ($item) = parse_sf_list($r->{initial}{ratelimit});
        is($item ? $item->{r} : undef, 99, 'gRPC: its RateLimit header shows the decision (quantity 1: 99 left)');
        is($glog->($t), '200 PASSED 42 42', "gRPC: \$upstream_trailer_x_tokens and \$ratelimit_settled 42 (nginx $version)");
        is($rem->($k), 58, 'gRPC: the key has 100 - 42 = 58 left');

        # A call without the trailer: the empty value settles nothing, the 1 taken stays.
        $k = fresh_key('g');
        $t = tag();
        $r = $call->('Unary', '', $k, $t);
        is(join(' ', $r->{code}, scalar keys %{ $r->{trailing} }), 'OK 0', 'gRPC: a call ending without x-tokens');
        is($glog->($t), '200 PASSED - -', 'gRPC: no trailer: nothing settled');
        is($rem->($k), 99, 'gRPC: no trailer: the key keeps what quantity took (99 left)');
        like($gn->error_log, qr/ratelimit zone "tok1h": invalid settle "", settled nothing/, 'gRPC: no trailer: logged');

        # A streamed call: 5 messages, then the trailer.
        $k = fresh_key('g');
        $t = tag();
        $r = $call->('Stream', 'tokens=30 messages=5', $k, $t);
        is(join(' ', $r->{code}, $r->{messages}, $r->{trailing}{'x-tokens'} // '-'), 'OK 5 30',
            'gRPC: a streamed call: 5 messages, then the trailer x-tokens: 30');
        is($glog->($t), '200 PASSED 30 30', 'gRPC: streamed: settled the trailer\'s 30');
        is($rem->($k), 70, 'gRPC: streamed: the key has 70 left');

        # Debt: 150 tokens take the key 51 units past room for one: 51 x 36 s.
        $k = fresh_key('g');
        my $t0 = time;
        $t = tag();
        $r = $call->('Unary', 'tokens=150', $k, $t);
        is($r->{code}, 'OK', 'gRPC: 150 tokens on a fresh key: admitted');
        is($glog->($t), '200 PASSED 150 150', 'gRPC: settled 150');
        my $s = $gn->key_state('tok1h', $k);
        my $lag = (time - $t0) * 1000;
        is($s->{remaining}, 0, 'gRPC: the key is in debt: nothing left');
        ok(defined $s->{retry_after_ms} && $s->{retry_after_ms} <= 1836000 && $s->{retry_after_ms} >= 1836000 - $lag - 1,
            "gRPC: retry_after_ms $s->{retry_after_ms} is 51 x 36 s less the time since (<= ${\ int $lag} ms)");
        $t = tag();
        $r = $call->('Unary', 'tokens=1', $k, $t);
        is($r->{code}, 'UNAVAILABLE', 'gRPC: the next call fails (grpc-python maps HTTP 429 to UNAVAILABLE)');
        like($r->{details}, qr/\b429\b/, 'gRPC: its details name the 429');
        is($glog->($t), '429 REJECTED - -', 'gRPC: rejected, settled nothing');
        is($rem->($k), 0, 'gRPC: the rejection changed nothing');
        $g->stop;
        $gn->stop;
    }
}

# ------------------------------------------------------------------ refunds
{
    my $k = fresh_key('ref');
    my @s = map { ($n->get("/ref?k=$k"))[0] } 1 .. 6;
    is("@s", join(' ', ('502') x 6), 'refund: 6 requests with the upstream down: 502, none rejected (limit 3)');
    is(remaining('ref', $k), 3, 'refund: the key has its 3 units: the 502s were given back');
    my @ok = map { ($n->get("/refok?k=$k&key=ref"))[0] } 1 .. 2;
    my @t = map { ($n->get("/ref504?k=$k&key=ref&ms=3000"))[0] } 1 .. 3;
    is("@ok @t", '200 200 504 504 504', 'refund: 2 admitted, then 3 upstream timeouts (504) still admitted');
    my @more = map { ($n->get("/refok?k=$k&key=ref"))[0] } 1 .. 2;
    is("@more", '200 429', 'refund: the 504s cost nothing: one unit left, then 429');
}

# ------------------------------------------------------------------ bytes
{
    my $k = fresh_key('bytes');
    my $t = tag();
    my ($st, undef, $body) = http_request($n->port, "/bytes?k=$k&key=b&bytes=50000&tag=$t");
    is(length $body, 50000, 'bytes: a response of 50000 bytes');
    my $l = logline($t);
    ok($l->[3] > 50000 && $l->[3] < 51000, "bytes: \$bytes_sent $l->[3] (the head included)");
    is($l->[2], $l->[3], 'bytes: $ratelimit_settled is $bytes_sent');
    is(remaining('bytes', $k), 100000000 - $l->[3], 'bytes: the key was charged $bytes_sent, once');

    # A client that closes mid-body: a small receive buffer, a few KB read, then closed.
    my $before = remaining('bytes', $k);
    $t = tag();
    my $size = 20_000_000;
    socket(my $s, Socket::PF_INET(), Socket::SOCK_STREAM(), 0) or die "socket: $!";
    setsockopt($s, SOL_SOCKET, SO_RCVBUF, 4096);
    connect($s, Socket::pack_sockaddr_in($n->port, Socket::inet_aton('127.0.0.1'))) or die "connect: $!";
    syswrite($s, "GET /bytes?k=$k&key=bcut&bytes=$size&tag=$t HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n");
    my ($got, $buf) = (0, '');
    my $sel = IO::Select->new($s);
    while ($got < 65536 && $sel->can_read(5)) {
        my $r = sysread($s, $buf, 16384);
        last unless $r;
        $got += $r;
    }
    close $s;
    $l = logline($t);
    ok(@$l && $l->[3] >= $got && $l->[3] < $size, "bytes: the client read $got bytes and closed: \$bytes_sent $l->[3], less than the body")
      or diag(explain $l);
    is($l->[2], $l->[3], 'bytes: closed mid-body: settled what was sent');
    is(settle_value(sub { remaining('bytes', $k) }, $before - ($l->[3] // 0)), $before - ($l->[3] // 0),
        'bytes: closed mid-body: charged once, exactly what was sent');
    note("client closed after $got bytes of $size; nginx had sent $l->[3]; backend cut: " . $b->stats('bcut')->{cut});
}

# ------------------------------------------------------------------ redirects, subrequests
{
    my $k = fresh_key('tf');
    my ($st) = $n->get("/tf?k=$k&key=rd");
    is($st, 200, 'try_files to a named location: 200');
    is(settle_value(sub { remaining('rd', $k) }, 93), 93, 'try_files: settled once (7 of 100)');
    $k = fresh_key('ep');
    ($st) = $n->get("/ep?k=$k&key=rd");
    is($st, 200, 'error_page to a named location: 200');
    is(settle_value(sub { remaining('rd', $k) }, 93), 93, 'error_page: settled once (7 of 100)');

    my $body;
    ($st, undef, $body) = $n->get('/page.shtml?k=ssi1');
    is($st, 200, 'SSI: the page');
    like($body, qr/\[ssi\]\n\[ssi\]/, 'SSI: both includes reached the upstream');
    is(settle_value(sub { remaining('rd', 'ssi1') }, 97), 97, 'SSI: only the page settled (3), not its two subrequests (7 each)');

    $k = fresh_key('mir');
    ($st) = $n->get("/mir?k=$k&key=mir");
    is($st, 200, 'mirror: 200');
    ok(defined $b->wait_for('mir', sub { $_[0]{served} >= 2 }), 'mirror: the mirror subrequest reached the upstream too');
    is(settle_value(sub { remaining('rd', $k) }, 97, after => 0.5), 97, 'mirror: only the main request settled (3), not the mirror (7)');
}

# ------------------------------------------------------------------ dry run
{
    # dry: a bucket of 2 refilling 2 an hour (30 min a unit). Two failures fill it; the third
    # would be rejected: it passes (dry run), and settles nothing: the level stays 2, room for
    # one unit 30 minutes away (with it settled: 60).
    my $k = fresh_key('dry');
    my (@s, @x, @t);
    for (1 .. 3) {
        push @t, tag();
        my ($st, $h) = $n->get("/dry?k=$k&key=dry&status=401&tag=$t[-1]");
        push @s, $st;
        push @x, $h->{'x-status'} // '';
    }
    is("@s", '401 401 401', 'dry run: three failures all pass');
    is("@x", 'PASSED PASSED REJECTED_DRY_RUN', 'dry run: the third would have been rejected');
    is(logline($t[1])->[2], '1', 'dry run: a failure the limit admitted settled 1');
    ok(empty_settle(logline($t[2])->[2]), 'dry run: the one it would have rejected settled nothing');
    my $s = api('dry', $k);
    ok(defined $s->{retry_after_ms} && $s->{retry_after_ms} > 1_700_000 && $s->{retry_after_ms} <= 1_800_000,
        "dry run: one unit 30 minutes away (retry_after_ms $s->{retry_after_ms}): the third was not settled");
}

# ------------------------------------------------------------------ invalid values
{
    # inv: 10 a day, quantity 1. Invalid values settle nothing: each request keeps its 1.
    my $k = fresh_key('inv');
    my $c = $n->keepalive;
    my $log0 = length $n->error_log;
    my $t0 = time;
    # (beyond 10^12, as for quantity=, is invalid)
    my @v = ('abc', '', '-3', '1000000000001', '1.5', '2x', '0x10');
    my (@s, @tags);
    for my $v (@v) {
        push @tags, tag();
        my ($st) = $c->get("/inv?k=$k&tag=$tags[-1]", length $v ? { 'X-Cost' => $v } : {});
        push @s, $st;
    }
    my $span = time - $t0;
    is("@s", join(' ', ('200') x @v), 'invalid settle: the requests are admitted');
    # The key read on the requests' own connection: after the last one's log phase, where its
    # settle is taken (or not) and logged.
    is(remaining('inv', $k, on => $c), 10 - @v, 'invalid settle: each settled nothing (kept its quantity 1)');
    ok(empty_settle(logline($tags[0])->[2]), 'invalid settle: $ratelimit_settled empty');
    my ($st) = $c->get("/inv?k=$k", { 'X-Cost' => '2' });
    is(remaining('inv', $k, on => $c), 10 - @v - 2, 'invalid settle: a valid 2 then charges 1 more');
    my @w = grep { /invalid settle/ } split /\n/, substr($n->error_log, $log0);
    if ($span < 1) {
        is(scalar @w, 1, "invalid settle: logged once for ${\ scalar @v} values within a second on one worker")
          or diag(join "\n", @w);
    } else {
        ok(@w >= 1 && @w <= ceil($span) + 1, "invalid settle: logged at most once a second (${\ scalar @w} in ${span}s)");
    }
    like($w[0] // '', qr/ratelimit zone "inv": invalid settle "abc", settled nothing/, 'invalid settle: the message');
    $c->close;

    # escaped: a backslash and control bytes do not reach the log raw (printable ASCII as is)
    $log0 = length $n->error_log;
    ($st) = $n->get("/inv2?k=" . fresh_key('inv'), { 'X-Cost' => "1\"2\\3\x1b[31m\x7f" });
    my $line = $n->wait_log(qr/(ratelimit zone "inv2": invalid settle .*)/) // '';
    like($line, qr/invalid settle ".*", settled nothing/, 'invalid settle: a hostile value logged');
    unlike($line, qr/[\x00-\x1f\x7f]/, 'invalid settle: no raw control byte in the log line');
    like($line, qr/invalid settle "1"2\\x5c3\\x1b\[31m\\x7f"/, 'invalid settle: the backslash and control bytes as \\xHH');
}

# ------------------------------------------------------------------ overshoot
{
    # 32 clients of one key, limit 100 (a fixed window), quantity 1 each, every response
    # settling 10. A request is admitted while the count has room for one; U requests admitted
    # before their settles landed add 9 each unseen: admitted cost <= limit + U * 9, U at most
    # the clients in flight (32).
    my $clients = 32;
    my $k = fresh_key('over');
    $b->reset('over');
    my $r = run_clients($n->port, "/over?k=$k&key=over&ms=100", $clients, 4, keepalive => 0);
    my $admitted = $r->{200} // 0;
    my $cost = 10 * $admitted;
    my $bound = 100 + $clients * 9;
    is(codes($r), '200,429', 'overshoot: some admitted, the rest rejected') or diag(explain $r);
    ok($cost >= 100, "overshoot: at least the limit admitted ($cost)");
    ok($cost <= $bound, "overshoot: admitted cost $cost <= limit + $clients x 9 = $bound");
    my $max = $b->stats('over')->{max};
    diag("overshoot: $clients clients x 4 requests, limit 100, settle 10 (quantity 1): admitted $admitted"
        . " (cost $cost; bound $bound), at most $max at once at the upstream");
}

# ------------------------------------------------------------------ the examples, for real
# The first capture of $re in file $f, awaited for up to 3 s (undef if it never matched).
sub file_match {
    my ($f, $re) = @_;
    my $deadline = time + 3;
    while (1) {
        return $1 if slurp($f) =~ $re;
        return undef if time > $deadline;
        sleep 0.02;
    }
}
# examples/settle-*.conf with their listen, pid and logs moved into a test prefix and their
# upstream (127.0.0.1:9000) replaced by the backend (or by nothing, for the refund).
sub run_example {
    my ($name, $upstream_port, $edit) = @_;
    my $text = slurp(repo_root() . "/examples/$name");
    my $so = module_so();
    $text =~ s{^(\s*)load_module\s+\S*ngx_http_ratelimit_module\.so\s*;}{$1load_module $so;}m;
    $text =~ s/listen\s+[\d.]+:\d+/listen 127.0.0.1:%%PORT%%/g;
    $text =~ s/^\s*pid\s+[^;]+;/pid %%DIR%%\/nginx.pid;/m;
    $text =~ s/^\s*error_log\s+[^;]+;//mg;
    $text = "error_log %%DIR%%/error.log info;\n$text";
    $text =~ s/^(\s*worker_processes)\s+[^;]+;/$1 2;/m;
    $text =~ s/127\.0\.0\.1:9000/127.0.0.1:$upstream_port/g;
    $edit->($text) if $edit;
    return start_nginx(undef, full => $text, files => { 'logs/.keep' => '' });
}
{
    my $e = run_example('settle-logins.conf', $bp);
    my @s = map { ($e->get("/login?user=erin&key=ex&status=$_"))[0] } (200) x 3, 401, 403, 200, (401) x 3, 401, 200;
    is("@s", '200 200 200 401 403 200 401 401 401 429 429', 'examples/settle-logins.conf: 5 failures, successes free, then 429');
    is(($e->get('/login?user=frank&key=ex&status=200'))[0], 200, 'examples/settle-logins.conf: another account is not limited');
    my @log = split /\n/, slurp($e->dir . '/logs/logins.log');
    is(scalar(grep { /"erin" 40[13] PASSED settled=1$/ } @log), 5, 'examples/settle-logins.conf: its log shows the 5 settled failures');
    $e->stop;

    $e = run_example('settle-refund.conf', $dead);
    my @r = map { my ($st, $h) = $e->get('/api/x', { 'X-Api-Key' => 'k1' }); my ($i) = parse_sf_list($h->{ratelimit}); "$st/" . ($i ? $i->{r} : '-') } 1 .. 4;
    is("@r", join(' ', ('502/999') x 4), 'examples/settle-refund.conf: each 502 given back (999 left at every decision)');
    $e->stop;

    # the trailer route passes trailers where this nginx can (the example's line uncommented)
    $e = run_example('settle-tokens.conf', $bp, sub { $_[0] =~ s/# (proxy_pass_trailers on;)/$1/ if $pass_trailers });
    my $ak = { 'X-Api-Key' => 'k1' };
    # 100000 tokens a minute (1 per 0.6 ms): 125833 take the key 25834 units past room for one,
    # 15.5004 s
    my ($st) = $e->get('/v1/completions?key=ex&hdr=X-Tokens:125833', $ak);
    my ($st2, $h2) = $e->get('/v1/completions?key=ex&hdr=X-Tokens:1', $ak);
    is("$st $st2", '200 429', 'examples/settle-tokens.conf: 125833 tokens from the header: the next request is rejected');
    is($h2->{'retry-after'} // '', 16, 'examples/settle-tokens.conf: Retry-After 16 (15.5 s of debt)');
    my (undef, undef, $sb) = http_request($e->port, '/v1/stream?key=ex&chunked=1&bytes=3000&trailer=X-Tokens:777', { 'X-Api-Key' => 'k2' });
    is(length($sb // ''), 3000, 'examples/settle-tokens.conf: a streamed response');
    my $want = $pass_trailers ? 777 : 2000;
    is(file_match($e->dir . '/logs/tokens.log', qr/ tokens=(\d+)\n\z/), $want, "examples/settle-tokens.conf: the stream charged $want tokens ("
        . ($pass_trailers ? 'the trailer' : "nginx $version drops the trailer: the map's estimate") . ')');
    $e->stop;

    # bytes: a file of 1 MB under /downloads/ (the example's root moved into the prefix)
    my $file = 'x' x 1_000_000;
    $e = run_example('settle-bytes.conf', $bp, sub { $_[0] =~ s{root /var/www;}{root %%DIR%%/www;} });
    mkdir $e->dir . '/www';
    mkdir $e->dir . '/www/downloads';
    spew($e->dir . '/www/downloads/f', $file);
    chmod 0755, $e->dir . '/www', $e->dir . '/www/downloads';
    chmod 0644, $e->dir . '/www/downloads/f';
    my ($bs, undef, $body) = $e->get('/downloads/f');
    is(length($body // ''), 1_000_000, 'examples/settle-bytes.conf: a download');
    my $line = file_match($e->dir . '/logs/bytes.log', qr/(200 \d+ PASSED settled=\S*)/) // '';
    my ($sent, $settled) = $line =~ /200 (\d+) PASSED settled=(\d*)/;
    ok(defined $sent && $sent > 1_000_000 && $settled eq $sent, "examples/settle-bytes.conf: settled \$bytes_sent ($line)");
    $e->stop;
}

done_testing;
