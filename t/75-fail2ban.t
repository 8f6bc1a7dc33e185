# fail2ban: examples/fail2ban/filter.d/nginx-ratelimit.conf, run by the real fail2ban-regex
# over the error log of a real nginx, matches every rejection of the module (rate, block=,
# quantity beyond capacity; concurrency with mode=aggressive), with the rejected client's
# address, and nothing else: not the passed, delayed or dry-run requests. Clients get their
# own addresses through realip (X-Forwarded-For from 127.0.0.1). ngx_ratelimit_zones restricts
# the filter to some zones; the stock nginx-limit-req filter matches none of these lines (the
# wording differs), which is why the example filter exists. Broken filters fail the same
# checks, so that the checks can fail.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use RLTest;
use RLTest::Backend qw(start_backend);
use RLTest::StreamClient qw(tcp_outcome tcp_open udp_once udp_socket);
use RLTest::TcpBackend;
use RLTest::UdpBackend;
use RLTest::Util qw(temp_dir stream_module_so wait_until);
use Test::More;

my $F2B = (grep { -x } map { "$_/fail2ban-regex" } split(/:/, $ENV{PATH} // ''), '/usr/bin')[0];
plan skip_all => 'fail2ban-regex not installed (apt-get install fail2ban)' unless $F2B;

my $filter = repo_root() . '/examples/fail2ban/filter.d/nginx-ratelimit.conf';
ok(-f $filter, 'examples/fail2ban/filter.d/nginx-ratelimit.conf exists') or BAIL_OUT('no filter');

my $b  = start_backend();
my $bp = $b->port;

avoid_window_edge(3600, 10);
my $n = start_nginx(<<"EOF2");
    set_real_ip_from 127.0.0.1;
    real_ip_header X-Forwarded-For;
    ratelimit_zone r   key=\$binary_remote_addr requests=2 period=1h burst=1;
    ratelimit_zone dl  key=\$binary_remote_addr rate=5r/s burst=10;
    ratelimit_zone dd  key=\$binary_remote_addr rate=5r/s burst=10;
    ratelimit_zone drb key=\$binary_remote_addr requests=1 period=1h block=10m;
    ratelimit_zone bl  key=\$binary_remote_addr requests=1 period=1h block=10m;
    ratelimit_zone q   key=\$binary_remote_addr requests=5 period=1h burst=4;
    ratelimit_zone c   key=\$binary_remote_addr concurrency=1;
    server {
        listen 127.0.0.1:%%PORT%%;
        add_header X-Status \$ratelimit_status always;
        location /r   { ratelimit zone=r; empty_gif; }
        location /dl  { ratelimit zone=dl delay=1; empty_gif; }
        location /dd  { ratelimit_dry_run on; ratelimit zone=dd delay=1; empty_gif; }
        location /drb { ratelimit_dry_run on; ratelimit zone=drb; empty_gif; }
        location /bl  { ratelimit zone=bl; empty_gif; }
        location /q   { ratelimit zone=q quantity=\$arg_q; empty_gif; }
        location /c   { ratelimit zone=c; proxy_pass http://127.0.0.1:$bp; }
    }
EOF2

# Per client address: the statuses ($ratelimit_status) of its requests.
my %seen;
sub send_as {
    my ($ip, $path, $count) = @_;
    for (1 .. $count) {
        my ($s, $h) = $n->get($path, { 'X-Forwarded-For' => $ip });
        push @{ $seen{$ip} }, ($h->{'x-status'} // ($s // 'ERR'));
    }
}

send_as('10.1.0.1', '/r', 5);            # 2 pass, 3 rejected
send_as('2001:db8::11', '/r', 3);        # 2 pass, 1 rejected (IPv6)
send_as('10.1.0.2', '/r', 2);            # passes only
send_as('10.2.0.1', '/dl', 5);           # passes, then delayed
send_as('10.3.0.1', '/drb', 4);          # dry run with block=: would be rejected, never is
send_as('10.3.0.2', '/dd', 5);           # dry run: would be delayed
send_as('10.4.0.1', '/bl', 4);           # 1 passes, rejected and blocked, rejected by the block
send_as('10.5.0.1', '/q?q=500', 2);      # quantity 500 exceeds its capacity
send_as('10.5.0.2', '/q?q=99999999999999999999', 1);    # quantity over 10^12
send_as('10.5.0.3', '/q?q=2', 2);        # passes

# Concurrency: 10.6.0.1 holds its one slot, its second request is rejected.
my $held = $b->enter($n->port, '/c', 'c1', headers => { 'X-Forwarded-For' => '10.6.0.1' });
my $second = $b->enter($n->port, '/c', 'c1', headers => { 'X-Forwarded-For' => '10.6.0.1' });
is("$held->{held} $second->{held} " . ($second->{status} // ''), '1 0 429',
   'concurrency: the first request holds the slot, the second is rejected');
is($b->finish('c1', $held), '200', 'concurrency: the held request completes');
push @{ $seen{'10.6.0.1'} }, 'PASSED', ($second->{h}{'x-status'} // 'ERR');

my %count;    # address -> status -> count
for my $ip (keys %seen) { $count{$ip}{$_}++ for @{ $seen{$ip} } }
my @rate_ips = grep { $_ ne '10.6.0.1' } sort keys %seen;

# The scenario did what it should: the kinds of requests the filter must tell apart.
is($count{'10.1.0.1'}{REJECTED}, 3, 'rate: 10.1.0.1 rejected 3 times');
is($count{'2001:db8::11'}{REJECTED}, 1, 'rate: 2001:db8::11 rejected once');
is(join(' ', @{ $seen{'10.1.0.2'} }), 'PASSED PASSED', 'rate: 10.1.0.2 passed only');
ok($count{'10.2.0.1'}{DELAYED}, 'delay: 10.2.0.1 delayed') or diag("@{ $seen{'10.2.0.1'} }");
ok(!$count{'10.2.0.1'}{REJECTED}, 'delay: 10.2.0.1 never rejected');
is($count{'10.3.0.1'}{REJECTED_DRY_RUN}, 3, 'dry run: 10.3.0.1 would have been rejected 3 times');
ok($count{'10.3.0.2'}{DELAYED_DRY_RUN}, 'dry run: 10.3.0.2 would have been delayed');
is(join(' ', @{ $seen{'10.4.0.1'} }), 'PASSED REJECTED BLOCKED BLOCKED', 'block=: 10.4.0.1 rejected, then blocked');
is($count{'10.5.0.1'}{REJECTED}, 2, 'quantity: 10.5.0.1 rejected twice');
is($count{'10.5.0.2'}{REJECTED}, 1, 'quantity over 10^12: 10.5.0.2 rejected');
is(join(' ', @{ $seen{'10.5.0.3'} }), 'PASSED PASSED', 'quantity: 10.5.0.3 passed');

my $log_file = $n->error_log_file;
my $log = $n->error_log;
like($log, qr/limiting request by zone "r", retry in \d+\.\d{3}s, client: 10\.1\.0\.1,/, 'log: realip sets the client of the rejection line');
like($log, qr/delaying request, excess: [\d.]+, by zone "dl", delay [\d.]+s, client: 10\.2\.0\.1,/, 'log: a delay line');
like($log, qr/delaying request \(dry run\), excess: [^\n]*client: 10\.3\.0\.2,/, 'log: a dry-run delay line');
like($log, qr/limiting request \(dry run\) by zone "drb", would block for 600\.000s, client: 10\.3\.0\.1,/, 'log: a dry-run block line');
like($log, qr/limiting request by zone "bl", retry in [\d.]+s, blocked for 600\.000s, client: 10\.4\.0\.1,/, 'log: a block starts');
like($log, qr/limiting request by zone "bl", blocked for [\d.]+s, client: 10\.4\.0\.1,/, 'log: a block rejects');
like($log, qr/limiting request by zone "q", quantity 500 exceeds its capacity, client: 10\.5\.0\.1,/, 'log: quantity beyond capacity');
like($log, qr/limiting request by zone "q", quantity over \d+ exceeds its capacity, client: 10\.5\.0\.2,/, 'log: quantity over 10^12');
like($log, qr/limiting connections by zone "c", client: 10\.6\.0\.1,/, 'log: a concurrency rejection');

# fail2ban-regex LOG FILTER[opts] -> ([address, line], ...) of the lines it matched, or undef.
sub f2b {
    my ($flt) = @_;
    my ($rc, $out) = run_cmd(60, $F2B, '-o', '<ip> | <msg>', $log_file, $flt);
    if ($rc != 0) { diag("fail2ban-regex $flt: exit $rc\n$out"); return undef }
    my @m;
    for (split /\n/, $out) {
        push @m, [$1, $2] if m{^(\S+) \| (\d{4}/\d\d/\d\d \d\d:\d\d:\d\d \[.*)$};
    }
    return \@m;
}

# The rejections of the log, per address: the 429s of each client, zones restricted by $zones
# (a regex of zone names) and concurrency counted or not.
sub expected {
    my ($zones, $conn) = @_;
    my %want;
    my %path = ('10.1.0.1' => 'r', '2001:db8::11' => 'r', '10.4.0.1' => 'bl', '10.5.0.1' => 'q', '10.5.0.2' => 'q');
    for my $ip (keys %path) {
        next unless $path{$ip} =~ /^(?:$zones)$/;
        $want{$ip} = grep { /^(REJECTED|BLOCKED)$/ } @{ $seen{$ip} };
    }
    $want{'10.6.0.1'} = 1 if $conn && 'c' =~ /^(?:$zones)$/;
    return \%want;
}

# What is wrong with the matches $m against the rejections %$want: every problem, one line each.
sub problems {
    my ($m, $want, $conn) = @_;
    return ('fail2ban-regex failed') unless $m;
    my @p;
    my %got;
    $got{ $_->[0] }++ for @$m;
    for my $ip (sort keys %{ { %$want, %got } }) {
        my ($g, $w) = ($got{$ip} // 0, $want->{$ip} // 0);
        push @p, "$ip: $g matches, $w rejections" if $g != $w;
    }
    for (@$m) {
        my ($ip, $line) = @$_;
        push @p, "matched a dry-run line: $line" if $line =~ /dry run/;
        push @p, "matched a delay line: $line" if $line =~ /delaying request/;
        push @p, "matched a line that is no rejection: $line"
          unless $line =~ /\] \d+#\d+: \*\d+ limiting (?:request|connections) by zone "[^"]+"/;
        push @p, "matched with another address than the line's client: $ip | $line"
          unless $line =~ /, client: \Q$ip\E,/;
        push @p, "matched a concurrency line: $line" if !$conn && $line =~ /limiting connections/;
    }
    my $in_log = () = $log =~ /limiting (?:request|connections) by zone "[^"]+"/g;
    push @p, "the log has no rejection line" unless $in_log;
    return @p;
}

sub check {
    my ($name, $flt, $want, $conn) = @_;
    my $m = f2b($flt);
    my @p = problems($m, $want, $conn);
    ok(!@p, $name) or diag(join("\n", @p));
    return $m;
}

# The filter as shipped: rate rejections of any zone, concurrency not (mode = normal).
my $all = expected('[^"]+', 0);
my $m = check('filter: every rate rejection matched with its client, nothing else', $filter, $all, 0);
my $n_lines = () = $log =~ /\] \d+#\d+: \*\d+ limiting request by zone "[^"]+"/g;
is(scalar @{ $m // [] }, $n_lines, "filter: as many matches as rate-rejection lines ($n_lines)");
my %matched = map { $_->[0] => 1 } @{ $m // [] };
for my $ip (qw(10.1.0.2 10.2.0.1 10.3.0.1 10.3.0.2 10.5.0.3)) {
    ok(!$matched{$ip}, "filter: $ip (passed, delayed or dry run only) not matched");
}
ok($matched{$_}, "filter: rejected client $_ matched") for qw(10.1.0.1 2001:db8::11 10.4.0.1 10.5.0.1 10.5.0.2);

# mode=aggressive: the concurrency rejection too.
$m = check('filter[mode=aggressive]: also the concurrency rejection', "$filter\[mode=aggressive\]", expected('[^"]+', 1), 1);
$n_lines = () = $log =~ /\] \d+#\d+: \*\d+ limiting (?:request|connections) by zone "[^"]+"/g;
is(scalar @{ $m // [] }, $n_lines, "filter[mode=aggressive]: as many matches as rejection lines ($n_lines)");

# ngx_ratelimit_zones restricts to zones.
$m = check('filter[ngx_ratelimit_zones=bl]: the rejections of zone bl only', "$filter\[ngx_ratelimit_zones=bl\]", expected('bl', 0), 0);
is(join(' ', map { $_->[0] } @{ $m // [] }), '10.4.0.1 10.4.0.1 10.4.0.1', 'filter[ngx_ratelimit_zones=bl]: 10.4.0.1, three times');
check('filter[ngx_ratelimit_zones="r|q", mode=aggressive]: zones r and q, not c',
      "$filter\[ngx_ratelimit_zones=\"r|q\", mode=aggressive\]", expected('r|q', 1), 1);

# The stock nginx-limit-req filter (limit_req's wording) matches none of these lines.
SKIP: {
    skip 'no stock nginx-limit-req filter in /etc/fail2ban/filter.d', 1
      unless -f '/etc/fail2ban/filter.d/nginx-limit-req.conf';
    my $s = f2b('/etc/fail2ban/filter.d/nginx-limit-req.conf');
    is(defined $s ? scalar @$s : 'failed', 0, 'the stock nginx-limit-req filter matches none of the module\'s lines');
}

# The checks can fail: broken filters do not pass them.
{
    my $dir = temp_dir('rltest-f2b');
    my %bad = (
        'broad' => 'limiting request.*client: <HOST>,',    # dry run too
        'no-quantity' => 'limiting request by zone "[^"]+", (?:retry in [\d.]+s(?:, blocked for [\d.]+s)?|blocked for [\d.]+s), client: <HOST>,',
        'no-block' => 'limiting request by zone "[^"]+", (?:retry in [\d.]+s|quantity (?:over )?\d+ exceeds its capacity), client: <HOST>,',
        'delays' => '(?:limiting request by zone "[^"]+", |delaying request, excess: )[^\n]*?client: <HOST>,',
    );
    for my $k (sort keys %bad) {
        my $f = "$dir/$k.conf";
        spew($f, "[Definition]\nfailregex = ^\\s*\\[[a-z]+\\] \\d+#\\d+: \\*\\d+ $bad{$k}\nignoreregex =\ndatepattern = {^LN-BEG}\n");
        my @p = problems(f2b($f), $all, 0);
        ok(scalar @p, "a broken filter ($k) fails the checks") or diag("no problem found with $k");
        note("$k: $_") for @p[0 .. ($#p < 2 ? $#p : 2)];
    }
}

$n->stop;

# stream{}: the filter matches the rejections of connections (limit_req's shape, nginx's stream
# context before the client), with mode=aggressive those of in-flight zones and the lines of
# dropped datagrams; never the dry run's. The stream module's lines of a real nginx.
SKIP: {
    skip 'no stream module built (build/ngx_stream_ratelimit_module.so)', 7 unless -f stream_module_so();
    my $tb = RLTest::TcpBackend->start;
    my $ub = RLTest::UdpBackend->start(replies => 0);
    my ($tba, $uba) = ($tb->addr, $ub->addr);
    my $s = start_nginx(undef, nports => 5, stream => <<"EOF2");
    ratelimit_zone sr key=\$binary_remote_addr rate=1r/m;
    ratelimit_zone sd key=\$binary_remote_addr rate=1r/m;
    ratelimit_zone sc key=\$binary_remote_addr concurrency=1;
    ratelimit_zone su key=\$binary_remote_addr rate=1r/m;
    ratelimit_zone sg key=\$binary_remote_addr rate=1r/m;
    server { listen 127.0.0.1:%%PORT%%;  ratelimit zone=sr; return "ok\\n"; }
    server { listen 127.0.0.1:%%PORT1%%; ratelimit zone=sd; ratelimit_dry_run on; return "ok\\n"; }
    server { listen 127.0.0.1:%%PORT2%%; ratelimit zone=sc; proxy_pass $tba; }
    server { listen 127.0.0.1:%%PORT3%% udp; ratelimit zone=su; proxy_pass $uba; proxy_timeout 5s; }
    server { listen 127.0.0.1:%%PORT4%% udp; ratelimit zone=sg at=datagram; proxy_pass $uba; proxy_timeout 5s; }
EOF2
    my @p = $s->ports;
    tcp_outcome($p[0]) for 1 .. 3;                 # 1 passes, 2 rejected
    tcp_outcome($p[1]) for 1 .. 3;                 # dry run: 2 would be
    my $held = tcp_open($p[2]);                    # holds sc's slot
    $tb->wait_for(sub { $_[0]{open} >= 1 });
    tcp_outcome($p[2]);                            # rejected: no slot
    udp_once($p[3], "s$_") for 1 .. 3;             # 3 sessions from fresh ports: 1 passes, 2 rejected
    my $u = udp_socket($p[4]);
    $u->send("g$_") for 1 .. 4;                    # one session: 1 passes, 3 dropped
    $ub->settled(2);
    my $want = sub { my ($re) = @_; scalar(() = $s->error_log =~ /$re/g) };
    my $rate = $want->(qr/\] \d+#\d+: \*\d+ limiting connections, excess: [\d.]+ by zone "(?:sr|su)"/);
    my $conn = $want->(qr/\] \d+#\d+: \*\d+ limiting connections by zone "sc"/);
    my $dgrams = wait_until(sub { $want->(qr/\] \d+#\d+: \*\d+ limiting datagrams by zone "sg"/) }, 5);
    is("$rate $conn " . ($dgrams ? 'some' : 'none'), '4 1 some',
       'stream: the log has 4 rejections of connections and sessions, 1 of an in-flight zone, a line of dropped datagrams');
    like($s->error_log, qr/limiting connections, dry run, excess: [^\n]*by zone "sd"/, 'stream: the dry run\'s line');
    my $count = sub {
        my ($flt) = @_;
        my ($rc, $out) = run_cmd(60, $F2B, '-o', '<ip> | <msg>', $s->error_log_file, $flt);
        return undef if $rc != 0;
        my @m = grep { m{^\S+ \| \d{4}/} } split /\n/, $out;
        return \@m;
    };
    my $m = $count->($filter) // [];
    is(scalar @$m, $rate, "stream: the filter matches the $rate rejections of connections and sessions");
    ok(!grep({ !/^127\.0\.0\.1 \| / } @$m), 'stream: with the client\'s address, TCP and UDP (udp client:)');
    ok(!grep({ /dry run|datagrams|by zone "sc"/ } @$m), 'stream: nothing else (dry run, in-flight, datagrams)');
    $m = $count->("$filter\[mode=aggressive\]") // [];
    is(scalar @$m, $rate + $conn + $dgrams, 'stream, mode=aggressive: also the in-flight rejection and the datagrams\' lines');
    ok(!grep({ /dry run/ } @$m), 'stream, mode=aggressive: not the dry run');
    close $held if $held;
    $s->stop;
    $tb->stop;
    $ub->stop;
}

done_testing;
