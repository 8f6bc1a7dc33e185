# Redis over TLS (ratelimit_redis ... ssl): decisions and headers as over TCP for a few
# algorithms, the state in Redis; ssl_name; mutual TLS; every fault of the spec (a CA that is
# not trusted, a certificate for another name, an expired one, a plain server behind "ssl", a
# TLS server without "ssl", a handshake that never ends) gets on_error quickly and a log line
# that says why; ssl_verify=off warns once; no secret in the log; one handshake per connection,
# not per request, and the session resumed on a new connection (debug log); SNI only for a
# name; nginx -t refuses bad ssl parameters naming the file and line; a TLS Redis
# Cluster: limits, a MOVED followed, a failover survived. The PKI is made here (RLTest::TLS).
# runs alone: it loads the machine and measures time (handshakes, a migration under load)
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use RLTest;
use Test::More;
use Time::HiRes qw(time sleep);

my $t_start    = time;
my $timeout_ms = 150;
my $connect_ms = 300;    # connect_timeout=: bounds the TCP connect and the TLS handshake
my $margin_ms  = 250;    # scheduling slack of a loaded 2-core test machine
my $pw         = 'tls-s3cret-pw';
my $fault_pw   = 'fault-s3cret-pw';

# ------------------------------------------------------------------ the harness itself

my $pki = RLTest::TLS->new;
my $CA  = $pki->ca;
{
    my %want = (server => 'OK', client => 'OK', expired => 'certificate has expired',
        untrusted => 'unable to get local issuer certificate', wrong_name => 'OK');
    for my $name (sort keys %want) {
        my ($rc, $out) = $pki->verify($name);
        like($out, qr/\Q$want{$name}\E/, "PKI: $name against the CA: $want{$name}") or diag($out);
    }
    my ($rc, $out) = $pki->verify('wrong_name', undef, '-verify_ip', '127.0.0.1');
    like($out, qr/IP address mismatch/, 'PKI: wrong_name does not name 127.0.0.1');
    ($rc, $out) = $pki->verify('server', undef, '-verify_ip', '127.0.0.1', '-verify_hostname', 'localhost');
    is($rc, 0, 'PKI: server names localhost and 127.0.0.1') or diag($out);
}

# The servers: a TLS Redis with a password (the good one), one requiring client certificates,
# three with bad certificates, a plain one, and a listener that never answers a handshake.
my $good    = start_redis(tls => $pki->redis_tls, password => $pw, args => ['--requirepass', $pw]);
my $mtls    = start_redis(tls => $pki->redis_tls(auth_clients => 'yes'));
my $expired = start_redis(tls => $pki->redis_tls(server => 'expired'));
my $wrong   = start_redis(tls => $pki->redis_tls(server => 'wrong_name'));
my $untrust = start_redis(tls => $pki->redis_tls(server => 'untrusted'));
my $hsr     = start_redis(tls => $pki->redis_tls);    # its connections counted alone
my $plain   = start_redis();
my $sni     = sni_listener($pki->cert('server'), $pki->key('server'));
my $creator = $$;
END { if ($sni && $sni->{pid} && $$ == $creator) { kill 'KILL', $sni->{pid}; waitpid $sni->{pid}, 0 } }
my $stall   = start_proxy(upstream => $plain);
$stall->mode('silent');    # accepts, reads the ClientHello, answers nothing

is($good->cli('PING'), 'PONG', 'harness: redis-cli speaks TLS to the TLS Redis');
is(join(' ', $mtls->cmd('PING')), '1 PONG', 'harness: the Perl client speaks mTLS to the mTLS Redis');
{
    my %nocert = %{ $mtls->tls };
    delete @nocert{qw(client_cert client_key)};
    my $conn = RLTest::Redis::resp_connect($mtls->port, undef, undef, \%nocert);
    my ($answered) = $conn ? RLTest::Redis::resp_roundtrip($conn, 'PING') : (0);
    ok(!$answered, 'harness: the mTLS Redis refuses a client without a certificate');
    my ($rc, $out) = run_cmd(10, $RLTest::Redis::CLI, '-h', '127.0.0.1', '-p', $good->port, '-a', $pw, '--no-auth-warning', 'PING');
    unlike($out, qr/PONG/, 'harness: the TLS Redis does not answer plain TCP');
}

my ($gp, $mp) = ($good->port, $mtls->port);
my %p = (expired => $expired->port, wrong => $wrong->port, untrusted => $untrust->port,
    plain => $plain->port, stall => $stall->port);
my $ssl = "ssl ssl_trusted_certificate=$CA";
my $tmo = "timeout=${timeout_ms}ms connect_timeout=${connect_ms}ms";
my @algos = qw(gcra token fixed sliding log);
my ($zones, $locs) = ('', '');
for my $a (@algos) {
    my $burst = $a =~ /^(gcra|token)$/ ? ' burst=2' : '';
    $zones .= "    ratelimit_zone z_$a key=\$arg_k requests=3 period=1h$burst algo=$a redis=main;\n";
    $locs  .= "        location /$a { ratelimit zone=z_$a; empty_gif; }\n";
}
# Each fault has a ratelimit_redis (errors are logged per ratelimit_redis) and a location.
my @faults = (
    # name, address, parameters, what the log says
    ['untrusted', "127.0.0.1:$p{untrusted}", "$ssl password=$fault_pw",
        qr/certificate verify failed: (?:unable to get local issuer certificate|unable to verify the first certificate|self.signed certificate in certificate chain)/],
    ['expired', "127.0.0.1:$p{expired}", "$ssl password=$fault_pw", qr/certificate verify failed: certificate has expired/],
    ['wrongip', "127.0.0.1:$p{wrong}", "$ssl password=$fault_pw", qr/certificate does not match "127\.0\.0\.1"/],
    ['wrongname', "127.0.0.1:$p{wrong}", "$ssl ssl_name=localhost password=$fault_pw", qr/certificate does not match "localhost"/],
    ['othername', "127.0.0.1:$gp", "$ssl ssl_name=other.example password=$pw", qr/certificate does not match "other\.example"/],
    ['plainssl', "127.0.0.1:$p{plain}", "$ssl password=$fault_pw", qr/TLS handshake (?:failed|timed out)/],
    ['nossl', "127.0.0.1:$gp", "password=$pw", qr/\S/],    # whatever the reason, logged
    ['stalled', "127.0.0.1:$p{stall}", "$ssl password=$fault_pw", qr/TLS handshake timed out/],
    ['nocert', "127.0.0.1:$mp", $ssl, qr/\S/],
    ['othercert', "127.0.0.1:$mp", "$ssl ssl_certificate=${\ $pki->cert('other_client')} ssl_certificate_key=${\ $pki->key('other_client')}",
        qr/\S/],
);
my ($fault_redis, $fault_locs) = ('', '');
for my $f (@faults) {
    my ($name, $addr, $params) = @$f;
    $fault_redis .= "    ratelimit_redis $name $addr $params $tmo;\n"
      . "    ratelimit_zone f_$name key=\$arg_k requests=5 period=1h redis=$name;\n";
    $fault_locs .= "        location /f_$name { ratelimit_on_error deny; ratelimit zone=f_$name; empty_gif; }\n";
}
my $client_cert = "ssl_certificate=${\ $pki->cert('client')} ssl_certificate_key=${\ $pki->key('client')}";

my $n = start_nginx(<<"EOF2");
    ratelimit_redis main 127.0.0.1:$gp $ssl password=$pw prefix=t70: $tmo;
    ratelimit_redis named 127.0.0.1:$gp $ssl ssl_name=localhost password=$pw prefix=t70n: $tmo;
    ratelimit_redis mtls 127.0.0.1:$mp $ssl $client_cert $tmo;
    ratelimit_redis noverify 127.0.0.1:$p{untrusted} ssl ssl_verify=off $tmo;
    ratelimit_redis hsr 127.0.0.1:${\ $hsr->port} $ssl $tmo;
    ratelimit_redis sni_name 127.0.0.1:$sni->{port} $ssl ssl_name=localhost $tmo;
    ratelimit_redis sni_ip 127.0.0.1:$sni->{port} $ssl $tmo;
$fault_redis
$zones
    ratelimit_zone warm   key=\$arg_k requests=1000000 period=1h burst=999999 redis=main;
    ratelimit_zone hs     key=\$arg_k requests=1000000 period=1h burst=999999 redis=hsr;
    ratelimit_zone zn     key=\$arg_k requests=2 period=1h burst=1 redis=named;
    ratelimit_zone zm     key=\$arg_k requests=2 period=1h burst=1 redis=mtls;
    ratelimit_zone zv     key=\$arg_k requests=2 period=1h burst=1 redis=noverify;
    ratelimit_zone zsn    key=\$arg_k requests=2 period=1h burst=1 redis=sni_name;
    ratelimit_zone zsi    key=\$arg_k requests=2 period=1h burst=1 redis=sni_ip;
    server {
        listen 127.0.0.1:%%PORT%%;
        add_header X-Status \$ratelimit_status always;
        add_header X-Who \$pid always;
$locs
        location /warm   { ratelimit_on_error deny; ratelimit zone=warm; empty_gif; }
        location /hs     { ratelimit_on_error deny; ratelimit zone=hs; empty_gif; }
        location /named  { ratelimit_on_error deny; ratelimit zone=zn; empty_gif; }
        location /mtls   { ratelimit_on_error deny; ratelimit zone=zm; empty_gif; }
        location /noverify { ratelimit_on_error deny; ratelimit zone=zv; empty_gif; }
        location /sni_name { ratelimit zone=zsn; empty_gif; }
        location /sni_ip   { ratelimit zone=zsi; empty_gif; }
        location /allow_nocert { ratelimit_on_error allow; ratelimit zone=f_nocert; empty_gif; }
$fault_locs
    }
EOF2
my @workers = $n->worker_pids;
avoid_window_edge(3600, 10);

sub seq_of {
    my ($path, $count) = @_;
    my (@st, @r);
    for (1 .. $count) {
        my ($st, $h) = $n->get($path);
        push @st, ($st // 'ERR') . ' ' . ($h->{'x-status'} // '');
        my ($item) = parse_sf_list($h->{ratelimit});
        push @r, $item ? $item->{r} : '-';
    }
    return (join(' ', @st), join(' ', @r));
}

ok(defined $n->wait_decided('/warm?k=ready'), 'every worker decides over TLS');

# 1. Decisions and headers over TLS as over TCP, the state in that Redis.
for my $a (@algos) {
    my ($st, $r) = seq_of("/$a?k=one", 4);
    is($st, '200 PASSED 200 PASSED 200 PASSED 429 REJECTED', "TLS, $a: 3 admitted, the 4th rejected");
    is($r, '2 1 0 0', "TLS, $a: remaining 2 1 0 0");
    my (undef, $h) = $n->get("/$a?k=one");
    my $max = $a eq 'sliding' ? 7200 : 3600;
    ok(($h->{'retry-after'} // '') =~ /^\d+$/ && $h->{'retry-after'} >= 1 && $h->{'retry-after'} <= $max,
        "TLS, $a: Retry-After within the period (" . ($h->{'retry-after'} // 'none') . ')');
}
{
    my @keys = $good->keys_matching('t70:*');
    for my $a (@algos) {
        is(scalar(grep { /^t70:\{z_$a:[0-9a-f]{32}\}:$a$/ } @keys), 1, "TLS, $a: the state key is in the TLS Redis")
          or diag("@keys");
    }
}

# 2. ssl_name=localhost: checked against DNS:localhost.
{
    my ($st) = seq_of('/named?k=n', 3);
    is($st, '200 PASSED 200 PASSED 429 REJECTED', 'ssl_name=localhost: decided over TLS');
    is(scalar(grep { /^t70n:\{zn:/ } $good->keys_matching('t70n:*')), 1, 'ssl_name=localhost: the state is in Redis');
}

# SNI: the name of ssl_name= is sent; an address is not (a listener that records what the
# ClientHello names, then closes the connection).
{
    my %seen;
    my $deadline = time + 3;
    while (time < $deadline) {
        $n->get('/sni_name?k=' . fresh_key());
        $n->get('/sni_ip?k=' . fresh_key());
        %seen = map { $_ => 1 } grep { length } split /\n/, slurp($sni->{file});
        last if $seen{localhost} && $seen{'-'};
        sleep 0.05;
    }
    is(join(' ', sort keys %seen), '- localhost', 'SNI: "localhost" sent with ssl_name=localhost, none for 127.0.0.1');
    kill 'KILL', $sni->{pid};
    waitpid $sni->{pid}, 0;
    delete $sni->{pid};
}

# 3. mTLS: with ssl_certificate= and ssl_certificate_key= the server takes the connection.
{
    my ($st) = seq_of('/mtls?k=m', 3);
    is($st, '200 PASSED 200 PASSED 429 REJECTED', 'mTLS with a client certificate: decided');
    is(scalar(grep { /^rl:\{zm:/ } $mtls->keys_matching('rl:*')), 1, 'mTLS: the state is in the mTLS Redis');
}

# 4. ssl_verify=off: the untrusted server is taken, and the start warned once.
{
    my ($st) = seq_of('/noverify?k=v', 3);
    is($st, '200 PASSED 200 PASSED 429 REJECTED', 'ssl_verify=off: the untrusted certificate is accepted');
    seq_of('/noverify?k=v2', 5);
    my @warn = grep { /ssl_verify=off/ } split /\n/, $n->error_log;
    is(scalar @warn, 1, 'ssl_verify=off: warned once') or diag(join "\n", @warn);
    like($warn[0] // '', qr/\[warn\]/, 'ssl_verify=off: a warning');
}

# 5. Faults: on_error (deny: 503 ERROR) within the timeouts, and the reason logged.
for my $f (@faults) {
    my ($name, $addr, undef, $re) = @$f;
    my @r = map { [$n->timed("/f_$name?k=" . fresh_key())] } 1 .. 4;
    is(join(' ', map { "$_->[0] $_->[1]" } @r), join(' ', ('503 ERROR') x 4), "$name: on_error deny applies");
    my ($slowest) = sort { $b <=> $a } map { $_->[2] } @r;
    ok($slowest < $connect_ms + $margin_ms, "$name: slowest request ${slowest}ms (connect_timeout ${connect_ms}ms)");
    my $line = $n->wait_log(qr/(ratelimit redis "\Q$name\E" at \Q$addr\E: [^\n]*?$re[^\n]*)/, 3);
    ok(defined $line, "$name: the log says why ($re)")
      or diag(join("\n", grep { /ratelimit redis "\Q$name\E"/ } split /\n/, $n->error_log) || "nothing logged for $name");
}
ok($stall->accepted > 0, 'stalled: nginx did connect to the silent listener (' . $stall->accepted . ')');
{
    my @r = map { ($n->timed("/allow_nocert?k=" . fresh_key()))[0, 1] } 1 .. 2;
    is("@r", '200 ERROR 200 ERROR', 'mTLS without a client certificate, on_error allow: 200');
}
# The others work meanwhile (their connections are their own).
is((seq_of('/warm?k=' . fresh_key(), 2))[0], '200 PASSED 200 PASSED', 'the good ratelimit_redis still decides');

# 6. One TLS handshake per connection, not per request: 200 keep-alive requests over the
# workers' kept connections add (almost) no connection to Redis.
{
    ok(defined $n->wait_decided('/hs?k=ready'), 'handshakes: every worker connected');
    $hsr->cmd('PING');    # the harness's own connection, kept
    my $conns = sub { my (undef, $s) = $hsr->cmd('INFO', 'stats'); $s =~ /total_connections_received:(\d+)/ ? $1 : -1 };
    my $before = $conns->();
    my $r = run_clients($n->port, sub { "/hs?k=h$_[0]_$_[1]" }, 4, 50, keepalive => 1, record => 'X-Status');
    my $after = $conns->();
    is($r->{':values'}{PASSED} // 0, 200, 'handshakes: 200 requests decided over TLS');
    ok($before >= 0 && $after - $before <= 2, 'handshakes: ' . ($after - $before) . ' new connections to Redis for 200 requests (the 2 workers were connected already)');
}
# Connections lost: new handshakes (resuming the kept session, the server's cache still has
# it), then the server restarted (its cache gone: a full handshake again).
{
    my $out = $good->cli('CLIENT', 'KILL', 'TYPE', 'normal');
    like($out, qr/^\d+$/, "connections killed ($out)");
    my $t = $n->resumes_within(sub { '/warm?k=' . fresh_key() }, 5);
    ok($t < 1, sprintf('after CLIENT KILL: decided over TLS again in %.2fs', $t));
    $good->restart;
    $t = $n->resumes_within(sub { '/warm?k=' . fresh_key() }, 5);
    ok($t < 1.5, sprintf('after a restart of the TLS Redis: decided over TLS again in %.2fs', $t));
}

# 7. No secret in the log; no worker crashed.
{
    my $log = $n->error_log;
    unlike($log, qr/\Q$pw\E|\Q$fault_pw\E/, 'no password in error.log');
    unlike($log, qr/PRIVATE KEY/, 'no private key in error.log');
    is(join(' ', $n->worker_pids), join(' ', @workers), 'the same workers run: none crashed');
}
$n->stop;

# 8. The TLS session is kept and offered again: after its connection is killed, the next
# handshake resumes it (Redis caches sessions; the module's debug log says which).
SKIP: {
    skip 'this nginx is not built --with-debug', 3 unless `${\ nginx_bin()} -V 2>&1` =~ /--with-debug/;
    my $d = start_nginx(<<"EOF2", workers => 1, log_level => 'debug');
    ratelimit_redis main 127.0.0.1:$gp $ssl password=$pw prefix=t70s: $tmo;
    ratelimit_zone zs key=\$arg_k requests=1000 period=1h burst=999 redis=main;
    server {
        listen 127.0.0.1:%%PORT%%;
        add_header X-Status \$ratelimit_status always;
        location / { ratelimit zone=zs; empty_gif; }
    }
EOF2
    my $at = qr/ratelimit redis "main" at 127\.0\.0\.1:$gp: TLS up/;
    ok($d->resumes_within(sub { '/?k=' . fresh_key() }, 5) < 5, 'sessions: decided over TLS');
    ok($d->wait_log(qr/$at \(new session\)/, 3), 'sessions: the first handshake makes a new session');
    $good->cli('CLIENT', 'KILL', 'TYPE', 'normal');
    $d->resumes_within(sub { '/?k=' . fresh_key() }, 5);
    ok($d->wait_log(qr/$at \(session reused\)/, 3), 'sessions: the handshake after the connection was lost resumed the session')
      or diag(join "\n", grep { /TLS up/ } split /\n/, $d->error_log);
    $d->stop;
}

# ------------------------------------------------------------------ nginx -t
{
    my $cert = $pki->cert('client');
    my $key  = $pki->key('client');
    my @cases = (
        ['ssl_certificate without ssl_certificate_key', "127.0.0.1:6379 $ssl ssl_certificate=$cert", qr/ssl_certificate_key/],
        ['ssl_certificate_key without ssl_certificate', "127.0.0.1:6379 $ssl ssl_certificate_key=$key", qr/ssl_certificate\b/],
        ['ssl_trusted_certificate without ssl', "127.0.0.1:6379 ssl_trusted_certificate=$CA", qr/ssl_trusted_certificate/],
        ['ssl_name without ssl', "127.0.0.1:6379 ssl_name=localhost", qr/ssl_name/],
        ['ssl_verify=off without ssl', "127.0.0.1:6379 ssl_verify=off", qr/ssl_verify/],
        ['a missing trusted certificate file', "127.0.0.1:6379 ssl ssl_trusted_certificate=/nonexistent/rl70-ca.pem", qr{/nonexistent/rl70-ca\.pem}],
        ['a missing client certificate file', "127.0.0.1:6379 ssl ssl_certificate=/nonexistent/rl70-c.pem ssl_certificate_key=$key", qr{/nonexistent/rl70-c\.pem}],
    );
    for my $c (@cases) {
        my ($name, $args, $re) = @$c;
        my ($rc, $out, $file) = nginx_t(<<"C");
    ratelimit_redis r $args;   # BAD
    ratelimit_zone z key=\$arg_k rate=1r/s redis=r;
    server { listen 127.0.0.1:%%PORT%%; location / { ratelimit zone=z; empty_gif; } }
C
        my $line = conf_line_of($file, '# BAD');
        isnt($rc, 0, "nginx -t, $name: fails");
        like($out, $re, "nginx -t, $name: names the parameter or file") or diag($out);
        like($out, qr/ratelimit_redis/, "nginx -t, $name: names ratelimit_redis") or diag($out);
        like($out, qr/\Q in $file:$line\E\b/, "nginx -t, $name: names $file:$line") or diag($out);
    }
    my ($rc, $out) = nginx_t(<<"C");
    ratelimit_redis r 127.0.0.1:6379 $ssl ssl_name=localhost $client_cert ssl_verify=on;
    ratelimit_zone z key=\$arg_k rate=1r/s redis=r;
    server { listen 127.0.0.1:%%PORT%%; location / { ratelimit zone=z; empty_gif; } }
C
    is($rc, 0, 'nginx -t: every ssl parameter together is accepted') or diag($out);
}

# ------------------------------------------------------------------ a TLS Redis Cluster
{
    my $c = start_redis_cluster(primaries => 3, replicas => 1, tls => $pki->redis_tls);
    my @prim = $c->primaries;
    is(scalar @prim, 3, 'cluster: three TLS primaries');
    is($c->cli($prim[0], 'PING'), 'PONG', 'cluster: the harness talks TLS to the nodes');
    my $seeds = $c->seeds;
    my $cn = start_nginx(<<"EOF2");
    ratelimit_redis rc cluster $seeds $ssl timeout=${timeout_ms}ms connect_timeout=${connect_ms}ms;
    ratelimit_zone cwarm key=\$arg_k requests=1000000 period=1h burst=999999 redis=rc;
    ratelimit_zone cs    key=\$arg_k requests=3 period=1h algo=fixed redis=rc;
    ratelimit_zone cm    key=\$arg_k requests=100000 period=1h algo=fixed redis=rc;
    server {
        listen 127.0.0.1:%%PORT%% reuseport;
        ratelimit_on_error deny;
        add_header X-Status \$ratelimit_status always;
        add_header X-Who \$pid always;
        location /warm { ratelimit zone=cwarm; empty_gif; }
        location /cs   { ratelimit zone=cs; empty_gif; }
        location /cm   { ratelimit zone=cm; empty_gif; }
        location /cm_peek { ratelimit zone=cm quantity=0; empty_gif; }
    }
EOF2
    ok(defined $cn->wait_decided('/warm?k=ready', 10), 'cluster: every worker decides over TLS');
    my @s = map { my ($st, $h) = $cn->get('/cs?k=c1'); ($st // 'ERR') . ' ' . ($h->{'x-status'} // '') } 1 .. 4;
    is("@s", '200 PASSED 200 PASSED 200 PASSED 429 REJECTED', 'cluster: limits decided over TLS');
    is(scalar(my @k = $c->scan('rl:{cs:*')), 1, 'cluster: the state key is in the cluster');

    # MOVED: the slot of a key being consumed migrates; the module follows over TLS. A fixed
    # window (nothing comes back within the hour): what is left counts every admission.
    avoid_window_edge(3600, 30);
    my $l = $c->learn($cn, '/cm', 'rl:{cm:', 'mv');
    ok($l->{mv}, 'MOVED: the state key of the client key found') or diag(explain $l);
    if ($l->{mv}) {
        my $src = $l->{mv}{node};
        my ($dst) = grep { $_->port != $src->port } @prim;
        my ($moved_before) = $c->redirections($src);
        my $migrated;
        my $r = run_clients($cn->port, sub { sleep 0.003; '/cm?k=mv' }, 2, 1000000, keepalive => 1,
            until => time + 2.5, record => 'X-Status',
            during => sub { sleep 0.6; $c->migrate_slot($l->{mv}{slot}, $dst); $migrated = time });
        ok($migrated, 'MOVED: the slot migrated while the clients ran');
        my ($moved_after) = $c->redirections($src);
        is(codes($r), '200', 'MOVED: only 200 while the slot moves') or diag(explain $r);
        is($r->{':values'}{ERROR} // 0, 0, 'MOVED: no request got on_error');
        is($c->owner($l->{mv}{slot})->port, $dst->port, 'MOVED: the slot is on the other primary');
        is($c->countkeysinslot($dst, $l->{mv}{slot}), 1, 'MOVED: the state key moved with it');
        ok($moved_after > $moved_before, 'MOVED: the module was redirected (' . ($moved_after - $moved_before) . ') and followed');
        my $passed = $r->{':values'}{PASSED} // 0;
        is($cn->remaining('/cm_peek?k=mv'), 100000 - 1 - $passed, "MOVED: every admission counted across the move ($passed + 1)");

        # Failover: the primary holding the key is killed, its replica takes over, limiting resumes.
        my $owner = $c->owner($l->{mv}{slot});
        my ($rep) = $c->replicas_of($owner);
        ok($rep, 'failover: the owner has a replica');
        if ($rep) {
            $c->wait_synced($rep, 10);
            my $before = $cn->remaining('/cm_peek?k=mv');
            my $killed = $c->kill_primary($owner);
            my ($ok_at, $new) = $c->wait_promoted($owner, 20);
            is($new->port, $rep->port, sprintf('failover: the replica was promoted (%.1fs)', $ok_at - $killed));
            my $t = $cn->resumes_within('/cm_peek?k=mv', 8);
            ok($t < 8, sprintf('failover: limiting resumes over TLS %.2fs after the cluster is ok', $t));
            is($cn->remaining('/cm_peek?k=mv'), $before, 'failover: the state survived on the replica');
            my ($st, $h) = $cn->get('/cm?k=mv');
            is(($st // 'ERR') . ' ' . ($h->{'x-status'} // ''), '200 PASSED', 'failover: decided by the new primary');
        }
    }
    my @bad = grep { /\[(error|crit|alert|emerg)\]/ && !/limiting request/ } split /\n/, $cn->error_log;
    ok(@bad <= 20, 'cluster: few errors logged (the killed primary only): ' . scalar @bad) or diag(join "\n", @bad[0 .. 9]);
    $cn->stop;
}

diag(sprintf 'took %.1fs', time - $t_start);
done_testing;

# A TLS listener that writes the server name each ClientHello asked for ('-': none) to a file,
# a line per connection, and closes the connection. Killed by the test; ends by itself after
# 60 s. -> { port, pid, file }
sub sni_listener {
    my ($cert, $key) = @_;
    require IO::Socket::SSL;
    my $file = RLTest::Util::temp_dir('rlsni') . '/names';
    spew($file, '');
    my $l = IO::Socket::SSL->new(LocalAddr => '127.0.0.1', LocalPort => 0, Listen => 16, ReuseAddr => 1,
        SSL_server => 1, SSL_cert_file => $cert, SSL_key_file => $key, Timeout => 2)
      or die 'sni listener: ' . IO::Socket::SSL::errstr() . "\n";
    my $port = $l->sockport;
    my $pid = fork // die "fork: $!";
    if (!$pid) {
        $SIG{ALRM} = sub { POSIX::_exit(0) };
        alarm 60;
        while (1) {
            my $c = $l->accept or next;
            open my $fh, '>>', $file or POSIX::_exit(1);
            print $fh (($c->get_servername // '') eq '' ? '-' : $c->get_servername), "\n";
            close $fh;
            $c->close(SSL_fast_shutdown => 1);
        }
    }
    close $l;
    return { port => $port, pid => $pid, file => $file };
}
