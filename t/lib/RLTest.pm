package RLTest;
# Small harness for the end-to-end tests of ngx_http_ratelimit_module.
# Core Perl only: every test file starts its own nginx (own temp prefix, free loopback
# ports), talks raw HTTP/1.1 to it and stops it at the end, whatever happens.
# At done_testing (or at exit without it) every nginx is stopped and one more test checks
# every error.log the file produced (start_nginx, nginx_t) for [alert], [crit], "exited on
# signal" and sanitizer reports, and the sanitizer log files (ASAN_OPTIONS/UBSAN_OPTIONS
# log_path) written since the file started. start_nginx(..., allow_alerts => 1) or
# allow_log => qr/.../ (or $n->allow_log(qr/.../)) lets an instance log alerts on purpose.
# RLTEST_KEEP=1 keeps the temporary directories and prints where they are.
use strict;
use warnings;
use Exporter 'import';
use Cwd qw(abs_path);
use File::Basename qw(dirname);
use File::Spec;
use File::Temp qw(tempdir);
use IO::Select;
use IO::Socket::INET;
use POSIX qw(:sys_wait_h);
use Socket qw(SOL_SOCKET SO_REUSEADDR);
use Time::HiRes qw(time sleep);

our @EXPORT = qw(free_port start_nginx nginx_t module_so repo_root nginx_bin
  run_clients avoid_window_edge wait_window_offset slurp spew http_request
  conf_line_of gif_body_ok parse_sf_list statuses start_redis start_proxy fresh_key codes tally
  worker_rss);

our $NGINX   = $ENV{NGINX_BIN} || '/usr/sbin/nginx';
our $TIMEOUT = 10;    # seconds for any single network operation

my @INSTANCES;        # every nginx started by this process, stopped in END
my @LOGS;             # [error.log, instance or undef] of every prefix made here, checked at the end
my $CREATOR = $$;
our $KEEP = $ENV{RLTEST_KEEP} ? 1 : 0;    # RLTEST_KEEP=1: keep the temporary directories
my $T_START = time;

# Every test file is bounded in time: after RLTEST_TIMEOUT seconds (default 150) it dies,
# and END below stops its nginx.
$SIG{ALRM} = sub { die "RLTest: test file timed out\n" };
alarm($ENV{RLTEST_TIMEOUT} || 150);

sub nginx_bin { $NGINX }

# A temporary directory, removed at the end unless RLTEST_KEEP=1 (then its path is printed).
my @KEPT;
sub _tempdir {
    my ($prefix) = @_;
    my $dir = tempdir("$prefix-XXXXXX", TMPDIR => 1, CLEANUP => !$KEEP);
    push @KEPT, $dir if $KEEP;
    return $dir;
}

# The repository root: this file is <root>/t/lib/RLTest.pm.
sub repo_root {
    my $here = abs_path(__FILE__);
    return dirname(dirname(dirname($here)));
}

sub module_so {
    return $ENV{RATELIMIT_SO} if $ENV{RATELIMIT_SO};
    return File::Spec->catfile(repo_root(), 'build', 'ngx_http_ratelimit_module.so');
}

sub slurp {
    my ($f) = @_;
    open my $fh, '<', $f or return '';
    local $/;
    my $s = <$fh>;
    close $fh;
    return $s // '';
}

sub spew {
    my ($f, $s) = @_;
    open my $fh, '>', $f or die "cannot write $f: $!";
    print $fh $s;
    close $fh;
}

sub free_port {
    my $s = IO::Socket::INET->new(
        LocalAddr => '127.0.0.1', LocalPort => 0, Proto => 'tcp', Listen => 1, ReuseAddr => 0,
    ) or die "cannot bind: $!";
    my $p = $s->sockport;
    close $s;
    return $p;
}

# Line number (1-based) of the first line of file $f containing $marker.
sub conf_line_of {
    my ($f, $marker) = @_;
    my @lines = split /\n/, slurp($f), -1;
    for my $i (0 .. $#lines) {
        return $i + 1 if index($lines[$i], $marker) >= 0;
    }
    return undef;
}

sub gif_body_ok {
    my ($body) = @_;
    return defined $body && length($body) == 43 && substr($body, 0, 6) eq 'GIF89a';
}

# Parses a RateLimit / RateLimit-Policy value: '"a";q=10;w=1, "b";r=3;t=2' ->
# ( { name => 'a', q => 10, w => 1 }, { name => 'b', r => 3, t => 2 } ). undef -> ().
sub parse_sf_list {
    my ($v) = @_;
    return () unless defined $v && length $v;
    my @items;
    for my $item (split /\s*,\s*/, $v) {
        my ($name, @params) = split /;/, $item;
        my %i;
        ($i{name} = $name // '') =~ s/^\s*"(.*)"\s*$/$1/;
        for my $p (@params) {
            my ($k, $val) = split /=/, $p, 2;
            $i{$k} = $val;
        }
        push @items, \%i;
    }
    return @items;
}

# statuses($nginx, $path, $n, \%headers) -> list of the $n statuses of sequential requests
sub statuses {
    my ($n, $path, $count, $hdrs) = @_;
    my @s;
    for (1 .. $count) {
        my ($st) = $n->get($path, $hdrs);
        push @s, $st // 'ERR';
    }
    return @s;
}

# Builds a complete nginx.conf. $http is the body of the http block; it may contain
# %%PORT%%, %%PORT1%%..%%PORT3%% and %%DIR%% which are substituted.
sub _full_conf {
    my ($dir, $http, %o) = @_;
    my $so      = exists $o{so} ? $o{so} : module_so();
    my $workers = $o{workers} // 2;
    my $level   = $o{log_level} // 'info';
    my $main    = $o{main} // '';
    my $load    = defined $so && length $so ? "load_module $so;\n" : '';
    my $user    = $> == 0 ? "user nobody nogroup;\n" : '';
    my $conf = <<"EOF";
$load${user}worker_processes $workers;
daemon on;
master_process on;
pid $dir/nginx.pid;
error_log $dir/error.log $level;
$main
events {
    worker_connections 1024;
}

http {
    access_log off;
    client_body_temp_path $dir/client_body_temp;
    proxy_temp_path $dir/proxy_temp;
    fastcgi_temp_path $dir/fastcgi_temp;
    uwsgi_temp_path $dir/uwsgi_temp;
    scgi_temp_path $dir/scgi_temp;
    default_type application/octet-stream;

$http
}
EOF
    return $conf;
}

sub _subst {
    my ($text, $dir, $ports) = @_;
    $text =~ s/%%DIR%%/$dir/g;
    $text =~ s/%%PORT%%/$ports->[0]/g;
    for my $i (1 .. $#$ports) {
        $text =~ s/%%PORT$i%%/$ports->[$i]/g;
    }
    return $text;
}

sub _run_capture {
    my (@cmd) = @_;
    my $pid = open(my $fh, '-|') // die "fork: $!";
    if (!$pid) {
        open STDERR, '>&', \*STDOUT;
        exec @cmd or POSIX::_exit(127);
    }
    my $out = '';
    my $deadline = time + 30;
    local $/;
    $out = <$fh> // '';
    close $fh;
    my $rc = $? >> 8;
    return ($rc, $out);
}

# nginx_t($http_body, %opts) or nginx_t(undef, full => $complete_conf_text)
# Returns (exit code, output, conf path, dir).
sub nginx_t {
    my ($http, %o) = @_;
    my $dir = _tempdir('rltest');
    push @LOGS, ["$dir/error.log", $o{allow_alerts} ? qr/./ : $o{allow_log}];
    chmod 0755, $dir;
    my $ports = [map { free_port() } 0 .. 3];
    my $conf  = defined $o{full} ? $o{full} : _full_conf($dir, $http, %o);
    $conf = _subst($conf, $dir, $ports);
    my $file = "$dir/nginx.conf";
    spew($file, $conf);
    my ($rc, $out) = _run_capture($NGINX, '-t', '-p', "$dir/", '-c', $file, '-e', "$dir/error.log");
    return ($rc, $out, $file, $dir);
}

# start_nginx($http_body, %opts): opts workers (2), log_level (info), main (extra main
# context text), so (module path; '' for none), files => { relpath => content },
# allow_alerts / allow_log (see the top).
sub start_nginx {
    my ($http, %o) = @_;
    my $self = bless { creator => $$, workers => $o{workers} // 2 }, __PACKAGE__;
    my $dir = _tempdir('rltest');
    push @LOGS, ["$dir/error.log", $o{allow_alerts} ? qr/./ : $o{allow_log}];
    chmod 0755, $dir;
    $self->{dir}   = $dir;
    $self->{ports} = [map { free_port() } 0 .. 3];
    $self->{opts}  = \%o;
    if (my $files = $o{files}) {
        for my $rel (sort keys %$files) {
            my $path = "$dir/$rel";
            my $d = dirname($path);
            system('mkdir', '-p', $d) == 0 or die "mkdir $d";
            chmod 0755, $d;
            spew($path, $files->{$rel});
            chmod 0644, $path;
        }
    }
    $self->_write_conf($http);
    my ($rc, $out) = _run_capture($NGINX, '-p', "$dir/", '-c', "$dir/nginx.conf", '-e', "$dir/error.log");
    if ($rc != 0) {
        die "nginx failed to start (rc $rc): $out\n--- error.log:\n" . slurp("$dir/error.log");
    }
    push @INSTANCES, $self;
    $self->_wait_started;
    return $self;
}

sub _write_conf {
    my ($self, $http) = @_;
    my $dir = $self->{dir};
    $self->{http} = $http;
    my $text = defined $self->{opts}{full} ? $self->{opts}{full} : _full_conf($dir, $http, %{ $self->{opts} });
    my $conf = _subst($text, $dir, $self->{ports});
    spew("$dir/nginx.conf", $conf);
    $self->{conf} = $conf;
}

sub dir      { $_[0]{dir} }
sub port     { $_[0]{ports}[0] }
sub ports    { @{ $_[0]{ports} } }
sub conf     { $_[0]{conf} }
sub conf_file { "$_[0]{dir}/nginx.conf" }
sub error_log { slurp("$_[0]{dir}/error.log") }
sub error_log_file { "$_[0]{dir}/error.log" }

sub master_pid {
    my ($self) = @_;
    my $p = slurp("$self->{dir}/nginx.pid");
    $p =~ s/\s+//g;
    return $p =~ /^\d+$/ ? $p : undef;
}

# Pids of the master's children that are worker processes.
sub worker_pids {
    my ($self) = @_;
    my $m = $self->master_pid or return ();
    my @w;
    opendir my $d, '/proc' or return ();
    for my $p (grep { /^\d+$/ } readdir $d) {
        my $stat = slurp("/proc/$p/stat");
        next unless $stat =~ /^\d+ \(.*\) (\S) (\d+)/s;
        next if $1 eq 'Z';
        next unless $2 == $m;
        my $cmd = slurp("/proc/$p/cmdline");
        next unless $cmd =~ /worker process/;
        next if $cmd =~ /shutting down/;
        push @w, $p;
    }
    closedir $d;
    @w = sort { $a <=> $b } @w;
    return @w;
}

# True while $pid exists and is not a zombie (PID 1 here may reap slowly).
sub _alive {
    my ($pid) = @_;
    return 0 unless kill 0, $pid;
    my $stat = slurp("/proc/$pid/stat");
    return 0 if $stat =~ /^\d+ \(.*\) Z /s;
    return 1;
}

sub _can_connect {
    my ($port) = @_;
    my $s = IO::Socket::INET->new(PeerAddr => '127.0.0.1', PeerPort => $port, Proto => 'tcp', Timeout => 1);
    return 0 unless $s;
    close $s;
    return 1;
}

sub _wait_started {
    my ($self) = @_;
    my $deadline = time + 10;
    while (time < $deadline) {
        if ($self->master_pid && (my @w = $self->worker_pids) >= $self->{workers} && _can_connect($self->port)) {
            return 1;
        }
        sleep 0.05;
    }
    die "nginx did not start within 10s\n" . $self->error_log;
}

# Reloads (optionally with a new http body) and waits until a full new set of workers runs
# and the old ones are gone. Returns the seconds from the signal until the new workers ran.
sub reload {
    my ($self, $http) = @_;
    $self->_write_conf($http) if defined $http;
    my %old = map { $_ => 1 } $self->worker_pids;
    my $m = $self->master_pid or die "no master pid";
    my $log_before = length $self->error_log;
    my $t0 = time;
    my $up;
    kill 'HUP', $m or die "kill HUP: $!";
    my $deadline = time + 10;
    while (time < $deadline) {
        my @w = $self->worker_pids;
        my $new = grep { !$old{$_} } @w;
        $up //= time - $t0 if $new >= $self->{workers};
        # old workers still alive (even shutting down) are checked separately
        my $old_alive = grep { _alive($_) } keys %old;
        return $up || 0.001 if $new >= $self->{workers} && !$old_alive;
        my $log = substr($self->error_log, $log_before);
        die "reload failed:\n$log" if $log =~ /\[emerg\]/;
        sleep 0.05;
    }
    die "reload did not complete within 10s\n" . substr($self->error_log, $log_before);
}

sub stop {
    my ($self) = @_;
    return if $self->{stopped} || $self->{creator} != $$;
    $self->{stopped} = 1;
    my $m = $self->master_pid or return;
    my @w = $self->worker_pids;
    kill 'QUIT', $m;
    my $deadline = time + 5;
    while (time < $deadline) {
        last unless _alive($m);
        sleep 0.02;
    }
    if (_alive($m)) {
        kill 'KILL', $m;
        kill 'KILL', @w if @w;
    }
    for (1 .. 20) {
        last unless grep { _alive($_) } @w;
        sleep 0.05;
    }
}

sub DESTROY { $_[0]->stop }

# ------------------------------------------------------------- teardown check

# What no error.log may contain, as Test::Nginx checks on teardown: an alert or crit line, a
# worker killed by a signal, a sanitizer report.
our $BAD_LOG = qr/\[alert\]|\[crit\]|exited on signal|AddressSanitizer|LeakSanitizer|runtime error:/;

# The sanitizer report files (ASAN_OPTIONS / UBSAN_OPTIONS log_path, as ./build.sh test-asan
# sets) written since this test file started.
sub _sanitizer_reports {
    my @r;
    for my $v (grep { defined } @ENV{qw(ASAN_OPTIONS UBSAN_OPTIONS)}) {
        next unless $v =~ /(?:^|:)log_path=([^:]+)/;
        for my $f (glob("$1*")) {
            my $m = (stat $f)[9] // 0;
            push @r, $f if $m >= int($T_START) && -s $f;
        }
    }
    my %u;
    return grep { !$u{$_}++ } @r;
}

# The offending lines of every error.log made by this file (with the file name), and every
# sanitizer report since it started.
sub bad_log_lines {
    my @bad;
    for my $l (@LOGS) {
        my ($file, $allow) = @$l;
        for my $line (split /\n/, slurp($file)) {
            next unless $line =~ $BAD_LOG;
            next if defined $allow && $line =~ $allow && $line !~ /exited on signal|Sanitizer|runtime error:/;
            push @bad, "$file: $line";
        }
    }
    push @bad, map { "$_: " . substr(slurp($_), 0, 4000) } _sanitizer_reports();
    return @bad;
}

my $CHECKED = 0;

# Stops every nginx, then the check: one more test (before done_testing) or, if the file ends
# without done_testing, a diagnostic and a failing exit code.
sub _teardown_check {
    my ($as_test) = @_;
    return if $CHECKED++ || $$ != $CREATOR;
    $_->stop for @INSTANCES;
    my @bad = bad_log_lines();
    if ($as_test) {
        Test::More::ok(!@bad, 'teardown: no alert, crit, signal or sanitizer report in any error.log')
          or Test::More::diag(join "\n", @bad);
    } elsif (@bad) {
        print STDERR "# RLTest teardown: alert, crit, signal or sanitizer report:\n# ", join("\n# ", @bad), "\n";
        return 1;
    }
    return 0;
}

# done_testing runs the teardown check first (test files call Test::More's done_testing).
{
    require Test::More;
    no warnings 'redefine';
    my $orig = \&Test::More::done_testing;
    *Test::More::done_testing = sub { _teardown_check(1); goto &$orig };
}

# Tests that provoke an alert on purpose: $n->allow_log(qr/.../) ignores matching alert or crit
# lines of this instance (never a signal or a sanitizer report).
sub allow_log {
    my ($self, $re) = @_;
    $_->[1] = $re for grep { $_->[0] eq "$self->{dir}/error.log" } @LOGS;
    return $self;
}

END {
    my $rc = $?;
    if ($$ == $CREATOR) {
        my $fail = _teardown_check(0);
        $_->stop for @INSTANCES;
        RLTest::Redis::stop_all();
        print STDERR "# RLTEST_KEEP: kept $_\n" for @KEPT;
        $rc = 255 if $fail && !$rc;
    }
    $? = $rc;
}

# start_redis(%opts) -> RLTest::Redis: a redis-server on a free loopback port, in its own
# directory, stopped at the end of the test file. opts: args => [extra redis-server args],
# password => what cli() authenticates with.
sub start_redis {
    my (%o) = @_;
    return RLTest::Redis->start(%o);
}

# ---------------------------------------------------------------- HTTP client

sub _read_until_close {
    my ($sock, $deadline) = @_;
    my $sel = IO::Select->new($sock);
    my $buf = '';
    while (1) {
        my $left = $deadline - time;
        last if $left <= 0;
        last unless $sel->can_read($left);
        my $n = sysread($sock, $buf, 65536, length $buf);
        last unless $n;
    }
    return $buf;
}

sub _parse_head {
    my ($head) = @_;
    my @lines = split /\r\n/, $head;
    my $status_line = shift @lines // '';
    my ($status) = $status_line =~ m{^HTTP/\d\.\d (\d{3})};
    my %h;
    my %count;
    for my $l (@lines) {
        next unless $l =~ /^([^:]+):\s*(.*?)\s*$/;
        my $k = lc $1;
        $count{$k}++;
        $h{$k} = exists $h{$k} ? "$h{$k}, $2" : $2;
    }
    $h{':count'}  = \%count;
    $h{':status'} = $status_line;
    $h{':raw'}    = $head;
    return ($status, \%h);
}

sub _request_text {
    my ($method, $path, $hdrs, $keepalive) = @_;
    my $req = "$method $path HTTP/1.1\r\nHost: localhost\r\n";
    $req .= "Connection: " . ($keepalive ? 'keep-alive' : 'close') . "\r\n";
    for my $k (sort keys %{ $hdrs || {} }) {
        $req .= "$k: $hdrs->{$k}\r\n";
    }
    return "$req\r\n";
}

# http_request($port, $path, \%headers, $method) -> (status, \%headers, body)
sub http_request {
    my ($port, $path, $hdrs, $method) = @_;
    $method ||= 'GET';
    my $deadline = time + $TIMEOUT;
    my $s = IO::Socket::INET->new(PeerAddr => '127.0.0.1', PeerPort => $port, Proto => 'tcp',
        Timeout => $TIMEOUT) or return (undef, {}, "connect failed: $!");
    $s->autoflush(1);
    print $s _request_text($method, $path, $hdrs, 0);
    my $buf = _read_until_close($s, $deadline);
    close $s;
    my $i = index($buf, "\r\n\r\n");
    return (undef, {}, $buf) if $i < 0;
    my ($status, $h) = _parse_head(substr($buf, 0, $i));
    my $body = substr($buf, $i + 4);
    if (($h->{'transfer-encoding'} // '') =~ /chunked/i) {
        $body = _dechunk($body);
    }
    return ($status, $h, $body);
}

sub _dechunk {
    my ($b) = @_;
    my $out = '';
    while ($b =~ s/^([0-9a-fA-F]+)[^\r\n]*\r\n//) {
        my $n = hex $1;
        last if $n == 0;
        $out .= substr($b, 0, $n);
        substr($b, 0, $n + 2) = '';
    }
    return $out;
}

sub get {
    my ($self, $path, $hdrs) = @_;
    return http_request($self->port, $path, $hdrs, 'GET');
}

sub get_port {
    my ($self, $port, $path, $hdrs) = @_;
    return http_request($port, $path, $hdrs, 'GET');
}

# A keep-alive connection: $c = $nginx->keepalive; $c->get($path, \%h) -> (status, \%h, body)
sub keepalive {
    my ($self, $port) = @_;
    return RLTest::KeepAlive->new($port // $self->port);
}

# Waits until the error log contains $re (returns the matching text) or $timeout passes.
sub wait_log {
    my ($self, $re, $timeout) = @_;
    my $deadline = time + ($timeout // 3);
    while (1) {
        my $log = $self->error_log;
        return $1 // $& if $log =~ $re;
        return undef if time > $deadline;
        sleep 0.05;
    }
}

# ------------------------------------------------- helpers shared by the Redis tests

# $n->timed($path [, \%headers]) -> (status or 'ERR', X-Status header or '', milliseconds)
sub timed {
    my ($self, $path, $hdrs) = @_;
    my $t0 = time;
    my ($s, $h) = $self->get($path, $hdrs);
    return ($s // 'ERR', $h->{'x-status'} // '', int((time - $t0) * 1000));
}

# $n->resumes_within($path_or_coderef [, $limit]): seconds until a request is decided by Redis
# again (X-Status PASSED or REJECTED), polling; 99 if not within $limit (5) seconds. A coderef
# gives a new path for each try.
sub resumes_within {
    my ($self, $path, $limit) = @_;
    my $t0 = time;
    while (time - $t0 < ($limit // 5)) {
        my (undef, $x) = $self->timed(ref $path ? $path->() : $path);
        return time - $t0 if $x eq 'PASSED' || $x eq 'REJECTED';
        sleep 0.02;
    }
    return 99;
}

# $n->wait_decided($path [, $timeout]): until every worker (X-Who: $pid) has had a request
# decided in Redis (X-Status PASSED). Seconds it took, or undef after $timeout (5) seconds.
# A coderef gives a new path for each try.
sub wait_decided {
    my ($self, $path, $timeout) = @_;
    my %seen;
    my $t0 = time;
    while (time - $t0 < ($timeout // 5)) {
        my ($s, $h) = $self->get(ref $path ? $path->() : $path);
        $seen{ $h->{'x-who'} // '' } = 1 if ($h->{'x-status'} // '') eq 'PASSED';
        return time - $t0 if keys %seen >= $self->{workers};
        sleep 0.02;
    }
    return undef;
}

# $n->remaining($path): units left as a quantity=0 location reports them ('-' if not decided
# in Redis).
sub remaining {
    my ($self, $path) = @_;
    my ($s, $h) = $self->get($path);
    my ($item) = parse_sf_list($h->{ratelimit});
    return ($h->{'x-status'} // '') eq 'PASSED' && $item ? $item->{r} : '-';
}

# $n->wait_consumed($path, $max): polls a quantity=0 location until the key has at most $max
# units left; false after 5 seconds.
sub wait_consumed {
    my ($self, $path, $max) = @_;
    my $deadline = time + 5;
    while (time < $deadline) {
        my $rem = $self->remaining($path);
        return 1 if $rem =~ /^\d+$/ && $rem <= $max;
        sleep 0.02;
    }
    return 0;
}

# A new client key each call: k1, k2, ... (or PREFIX1, ...).
my $FRESH = 0;
sub fresh_key { my ($prefix) = @_; $FRESH++; return ($prefix // 'k') . $FRESH }

# The statuses seen in a run_clients result: '200,429'.
sub codes { my ($r) = @_; return join ',', sort grep { !/^:/ } keys %$r }

# Recorded "uri key status ..." values of a run_clients result -> { "uri key" => { status => n } }.
sub tally {
    my ($r) = @_;
    my %t;
    for my $v (keys %{ $r->{':values'} || {} }) {
        my ($uri, $k, $st) = split / /, $v;
        $t{"$uri $k"}{ $st // '' } += $r->{':values'}{$v};
    }
    return \%t;
}

# Resident memory of a process in kB (VmRSS), 0 if gone.
sub worker_rss {
    my ($pid) = @_;
    return slurp("/proc/$pid/status") =~ /^VmRSS:\s+(\d+)\s+kB/m ? $1 : 0;
}

# start_proxy(upstream => $redis_or_port, ...) -> RLTest::Proxy, a misbehaving Redis in front of
# a real one (see t/lib/RLTest/Proxy.pm).
sub start_proxy {
    require RLTest::Proxy;
    return RLTest::Proxy->start(@_);
}

# ------------------------------------------------------- concurrency helper

# run_clients($port, $path_or_coderef, $clients, $per_client, %opts)
# $port may be an arrayref: client c then talks to $port->[c % n].
# Forks $clients processes; each sends $per_client GET requests (keep-alive unless
# keepalive => 0) and reports statuses. $path may be a coderef ($client, $i) -> path.
# opts: headers => {}, record => 'header-name' (counts values of that response header).
# until => epoch time after which each client stops early; during => coderef run by the
# parent while the clients run (they start 0.3s after the call).
# Returns a hashref: status => count, plus {':values'}{value} => count when record is set,
# {':errors'} => number of failed requests, {':max_ms'} => the slowest request.
sub run_clients {
    my ($port, $path, $clients, $per_client, %o) = @_;
    my $ka = $o{keepalive} // 1;
    my $start_at = time + 0.3;
    my @kids;
    for my $c (0 .. $clients - 1) {
        pipe(my $r, my $w) or die "pipe: $!";
        my $pid = fork // die "fork: $!";
        if (!$pid) {
            close $r;
            $SIG{ALRM} = sub { POSIX::_exit(1) };
            alarm 60;
            my @res;
            eval {
                my $wait = $start_at - time;
                sleep $wait if $wait > 0;
                my $to = ref $port ? $port->[ $c % @$port ] : $port;
                my $conn = $ka ? RLTest::KeepAlive->new($to) : undef;
                for my $i (0 .. $per_client - 1) {
                    my $p = ref $path ? $path->($c, $i) : $path;
                    my $t0 = time;
                    my ($st, $h) = $ka ? $conn->get($p, $o{headers}) : http_request($to, $p, $o{headers});
                    my $ms = int((time - $t0) * 1000);
                    my $v = $o{record} ? ($h->{ lc $o{record} } // '') : '';
                    push @res, ($st // 'ERR') . "\t$ms\t$v";
                    last if $o{until} && time > $o{until};
                }
                $conn->close if $conn;
                1;
            };
            print $w join("\n", @res), "\n" if @res;
            close $w;
            POSIX::_exit(0);
        }
        close $w;
        push @kids, [$pid, $r];
    }
    $o{during}->() if $o{during};  # e.g. a fault injected while the clients run
    my %count = (':errors' => 0);
    for my $k (@kids) {
        my ($pid, $r) = @$k;
        local $/;
        my $data = <$r> // '';
        close $r;
        waitpid $pid, 0;
        for my $line (split /\n/, $data) {
            my ($st, $ms, $v) = split /\t/, $line, 3;
            $count{$st}++;
            $count{':max_ms'} = $ms if !defined $count{':max_ms'} || $ms > $count{':max_ms'};
            $count{':errors'}++ if $st eq 'ERR';
            $count{':values'}{ $v // '' }++ if $o{record};
        }
    }
    return \%count;
}

# ------------------------------------------------------------ time helpers

# If fewer than $margin seconds remain in the current window of $period seconds
# (windows aligned to multiples of $period since the epoch), sleeps into the next one.
sub avoid_window_edge {
    my ($period, $margin) = @_;
    my $now  = time;
    my $left = $period - ($now - $period * int($now / $period));
    sleep $left + 0.05 if $left < $margin;
}

# Sleeps until ($now mod $period) == $offset (next occurrence).
sub wait_window_offset {
    my ($period, $offset) = @_;
    my $now = time;
    my $pos = $now - $period * int($now / $period);
    my $d = $offset - $pos;
    $d += $period if $d < 0.02;
    sleep $d;
}

package RLTest::KeepAlive;
use strict;
use warnings;
use IO::Socket::INET;
use IO::Select;
use Time::HiRes qw(time);

sub new {
    my ($class, $port) = @_;
    my $self = bless { port => $port, buf => '' }, $class;
    return $self;
}

sub _flat { return map { ref $_ eq 'ARRAY' ? _flat(@$_) : $_ // '' } @_ }

sub _connect {
    my ($self) = @_;
    $self->{sock} = IO::Socket::INET->new(PeerAddr => '127.0.0.1', PeerPort => $self->{port},
        Proto => 'tcp', Timeout => $RLTest::TIMEOUT);
    $self->{buf} = '';
    $self->{sock}->autoflush(1) if $self->{sock};
    return $self->{sock};
}

sub close {
    my ($self) = @_;
    close $self->{sock} if $self->{sock};
    delete $self->{sock};
}

sub _fill {
    my ($self, $deadline) = @_;
    my $sel = IO::Select->new($self->{sock});
    my $left = $deadline - time;
    return 0 if $left <= 0 || !$sel->can_read($left);
    my $n = sysread($self->{sock}, $self->{buf}, 65536, length $self->{buf});
    return $n ? 1 : 0;
}

sub get {
    my ($self, $path, $hdrs, $method) = @_;
    for my $attempt (1, 2) {
        my @r = $self->_try($path, $hdrs, $method || 'GET');
        return @r if defined $r[0];
        $self->close;    # server closed a kept-alive connection: retry once on a new one
    }
    return (undef, {}, 'request failed');
}

sub _try {
    my ($self, $path, $hdrs, $method) = @_;
    my $fresh = 0;
    if (!$self->{sock}) { $self->_connect or return (undef); $fresh = 1; }
    my $deadline = time + $RLTest::TIMEOUT;
    my $s = $self->{sock};
    local $SIG{PIPE} = 'IGNORE';
    print {$s} RLTest::_request_text($method, $path, $hdrs, 1) or return (undef);
    my $i;
    while (($i = index($self->{buf}, "\r\n\r\n")) < 0) {
        return (undef) unless $self->_fill($deadline);
    }
    my ($status, $h) = RLTest::_parse_head(substr($self->{buf}, 0, $i));
    substr($self->{buf}, 0, $i + 4) = '';
    my $body = '';
    if ($method eq 'HEAD' || $status =~ /^(1\d\d|204|304)$/) {
        # no body
    } elsif (defined(my $cl = $h->{'content-length'})) {
        while (length($self->{buf}) < $cl) {
            last unless $self->_fill($deadline);
        }
        $body = substr($self->{buf}, 0, $cl, '');
    } elsif (($h->{'transfer-encoding'} // '') =~ /chunked/i) {
        while ($self->{buf} !~ /(?:^|\r\n)0\r\n\r\n/) {
            last unless $self->_fill($deadline);
        }
        $body = RLTest::_dechunk($self->{buf});
        $self->{buf} = '';
    } else {
        1 while $self->_fill($deadline);
        $body = $self->{buf};
        $self->{buf} = '';
        $self->close;
    }
    $self->close if ($h->{connection} // '') =~ /close/i;
    return ($status, $h, $body);
}

package RLTest::Redis;
use strict;
use warnings;
use File::Temp qw(tempdir);
use POSIX qw(:sys_wait_h);
use Time::HiRes qw(time sleep);

our $SERVER = $ENV{REDIS_SERVER} || '/usr/bin/redis-server';
our $CLI    = $ENV{REDIS_CLI}    || '/usr/bin/redis-cli';
my @ALL;

sub start {
    my ($class, %o) = @_;
    my $self = bless { port => $o{port} // RLTest::free_port(), args => $o{args} || [], password => $o{password},
        dir => $o{dir} // RLTest::_tempdir('rlredis'), creator => $$ }, $class;
    push @ALL, $self;
    $self->_spawn;
    return $self;
}

sub _spawn {
    my ($self) = @_;
    my $pid = fork // die "fork: $!";
    if (!$pid) {
        open STDOUT, '>', "$self->{dir}/redis.log";
        open STDERR, '>&', \*STDOUT;
        exec $SERVER, '--port', $self->{port}, '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no',
          '--dir', $self->{dir}, '--daemonize', 'no', @{ $self->{args} }
          or POSIX::_exit(127);
    }
    $self->{pid} = $pid;
    my $deadline = time + 10;
    while (time < $deadline) {
        return 1 if ($self->cli('PING') // '') =~ /PONG|NOAUTH/;
        die "redis-server exited: " . RLTest::slurp("$self->{dir}/redis.log") if waitpid($pid, WNOHANG) == $pid;
        sleep 0.05;
    }
    die "redis-server did not start\n" . RLTest::slurp("$self->{dir}/redis.log");
}

sub port { $_[0]{port} }
sub pid  { $_[0]{pid} }
sub addr { "127.0.0.1:$_[0]{port}" }

# cli(@args): runs redis-cli against this server; returns its output without the newline.
sub cli {
    my ($self, @args) = @_;
    my $pid = open(my $fh, '-|') // die "fork: $!";
    if (!$pid) {
        open STDERR, '>&', \*STDOUT;
        my @auth = defined $self->{password} ? ('-a', $self->{password}, '--no-auth-warning') : ();
        exec $CLI, '-h', '127.0.0.1', '-p', $self->{port}, @auth, @args or POSIX::_exit(127);
    }
    local $/;
    my $out = <$fh>;
    close $fh;
    $out //= '';
    $out =~ s/\n\z//;
    return $out;
}

# cmd(@args) -> (1, reply) or (0, reason): one command over a kept connection, the reply
# decoded and binary safe (GET of a packed state), as RLTest::RedisCluster's cmd.
sub cmd {
    my ($self, @args) = @_;
    my $why = 'no connection';
    for my $attempt (1, 2) {
        my $c = $self->{conn};
        if (!$c || $c->{pid} != $$) {
            $c = $self->{conn} = RLTest::RedisCluster::_connect($self->{port}, $self->{password})
              or return (0, "cannot connect to $self->{port}");
        }
        my ($ok, $v) = RLTest::RedisCluster::_roundtrip($c, @args);
        return (1, $v) if $ok;
        $why = $v;
        close $c->{s};
        delete $self->{conn};
    }
    return (0, $why);
}

# The keys of the database (few, in tests).
sub keys_matching {
    my ($self, $pattern) = @_;
    return grep { length } split /\n/, $self->cli('--scan', '--pattern', $pattern);
}

sub kill_now {
    my ($self, $sig) = @_;
    return unless $self->{pid};
    close $self->{conn}{s} if $self->{conn};
    delete $self->{conn};
    kill $sig // 'KILL', $self->{pid};
    waitpid $self->{pid}, 0;
    delete $self->{pid};
}

sub restart {
    my ($self) = @_;
    $self->kill_now('KILL');
    $self->_spawn;
}

sub stop {
    my ($self) = @_;
    return if $self->{creator} != $$;
    $self->kill_now('TERM') if $self->{pid};
}

sub stop_all { $_->stop for @ALL; @ALL = (); }

package RLTest::RedisCluster;
# A Redis Cluster on loopback for the end-to-end tests: N primaries and R replicas per
# primary, each an RLTest::Redis in its own directory on free ports (client port and cluster
# bus port both chosen free, so no port+10000 clash), created with redis-cli --cluster create,
# with cluster-require-full-coverage no (a dead primary does not take the others down),
# replica validity factor 0, no replica migration, DEBUG allowed. Slot migrations are done by
# hand (SETSLOT IMPORTING/MIGRATING, MIGRATE, SETSLOT NODE), so they can be left half-done, or
# by redis-cli --cluster reshard; failovers by CLUSTER FAILOVER or by killing a primary. Every
# wait is bounded; the nodes are stopped at the end (TERM, then KILL after 3s).
#
#   my $c = start_redis_cluster(primaries => 3, replicas => 1, password => undef);
# Nodes and topology
#   $c->nodes, $c->live_nodes         every node (RLTest::Redis: port, addr, pid, restart ...)
#   $c->primaries                     live primaries owning slots, in the order of their first slot
#   $c->seeds                         '127.0.0.1:p1 127.0.0.1:p2 ...' of those primaries
#   $c->replicas_of($primary)         its replicas, as the cluster says
#   $c->id($node)                     CLUSTER MYID
#   $c->view($node)                   CLUSTER NODES parsed (id, port, flags, master_id, slots, migrating, importing)
#   $c->owner($slot [, $via])         the primary owning $slot;  $c->slot_owners: arrayref slot -> node
#   $c->slots_of($primary)            its slots
#   $c->keyslot($key)                 CLUSTER KEYSLOT;  RLTest::RedisCluster::slot_of($key): the same, locally
#   $c->owner_of_key($key)            owner(keyslot($key))
# Commands
#   $c->cli($node, @args)             one command, reply as redis-cli prints it (kept connection)
#   $c->cmd($node, @args)             (1, decoded reply) or (0, reason)
#   $c->cli_all(@args)                on every live node
#   $c->scan($pattern)                [key, primary] for every matching key on every live primary
#   $c->learn($n, $loc, $prefix, @ks) where the state of each client key went (one request each)
#   $c->dbsize($node), $c->countkeysinslot($node, $slot), $c->keys_in_slot($node, $slot)
#   $c->redirections($node)           (MOVED, ASK) replied so far (INFO errorstats)
#   $c->info($node [, $section])      CLUSTER INFO, or INFO $section
# Changes
#   $c->migrate_slot($slot, $to)                  a complete, clean migration (clients get MOVED)
#   $c->begin_migration($slot, $to, @keys)        IMPORTING/MIGRATING, then moves @keys only (ASK)
#   $c->move_keys($slot, @keys)                   moves more keys of a migration under way
#   $c->finish_migration($slot)                   moves the rest, SETSLOT NODE on every primary
#   $c->reshard($from, $to, $count)               redis-cli --cluster reshard; returns the moved slots
#   $c->manual_failover($replica [, FORCE|TAKEOVER])  CLUSTER FAILOVER, waits for the switch
#   $c->wait_synced($replica)                     replica link up, at its primary's offset
#   $c->kill_primary($primary)                    kill -9; returns the time of the kill
#   $c->wait_promoted($old_primary, $timeout)     -> (time ok, new primary): a replica took over
#   $c->revive($node)                             restarts a killed node (it rejoins)
#   $c->wait_ok($timeout)             every live node: cluster_state:ok, 16384 slots ok, same slot
#                                     map, every owner alive; returns the time it became so
#   $c->stop                          stops every node (also done at the end)
use strict;
use warnings;
use IO::Select;
use IO::Socket::INET;
use POSIX qw(:sys_wait_h);
use Time::HiRes qw(time sleep);

our $CLI_TIMEOUT = 10;    # seconds for any single redis-cli run
my @CLUSTERS;
my $CLUSTER_CREATOR = $$;

push @RLTest::EXPORT, 'start_redis_cluster';
sub RLTest::start_redis_cluster { return RLTest::RedisCluster->start(@_) }

# start(primaries => 3, replicas => 0, password => undef, node_timeout => 1000 (ms),
#       full_coverage => 0 (cluster-require-full-coverage), args => [extra redis-server args],
#       ports => [client ports for the first nodes, e.g. where nginx already looks])
sub start {
    my ($class, %o) = @_;
    my $np = $o{primaries} // 3;
    my $nr = $o{replicas}  // 0;
    die "a cluster needs at least 3 primaries\n" if $np < 3;
    my $self = bless { password => $o{password}, creator => $$, nodes => [], ids => {},
        node_timeout => $o{node_timeout} // 1000 }, $class;
    push @CLUSTERS, $self;
    my @args = ('--cluster-enabled', 'yes', '--cluster-config-file', 'nodes.conf',
        '--cluster-node-timeout', $self->{node_timeout}, '--cluster-replica-validity-factor', '0',
        '--cluster-allow-replica-migration', 'no',
        '--cluster-require-full-coverage', ($o{full_coverage} ? 'yes' : 'no'),
        '--enable-debug-command', 'local', '--repl-diskless-sync-delay', '0', @{ $o{args} || [] });
    push @args, '--requirepass', $o{password}, '--masterauth', $o{password} if defined $o{password};
    my %used = map { $_ => 1 } @{ $o{ports} || [] };
    my @given = @{ $o{ports} || [] };
    my $port = sub {
        for (1 .. 50) { my $p = RLTest::free_port(); next if $used{$p}++ || $p > 65535; return $p }
        die "no free port\n";
    };
    for (1 .. $np * (1 + $nr)) {
        my $p = @given ? shift @given : $port->();
        my $bus = $port->();
        push @{ $self->{nodes} }, RLTest::Redis->start(port => $p, password => $o{password},
            args => [@args, '--cluster-port', $bus]);
    }
    my @auth = defined $o{password} ? ('-a', $o{password}, '--no-auth-warning') : ();
    my ($rc, $out) = _run(60, $RLTest::Redis::CLI, @auth, '--cluster', 'create',
        (map { $_->addr } @{ $self->{nodes} }), '--cluster-replicas', $nr, '--cluster-yes');
    die "redis-cli --cluster create failed (rc $rc):\n$out\n" if $rc != 0 || $out !~ /All 16384 slots covered/;
    $self->wait_ok(20);
    # every replica attached and in sync with its primary, and every node knows it
    my $deadline = time + 20;
    while (1) {
        my @p = $self->primaries;
        my $replicas = grep { $self->_role($_) eq 'slave' } $self->live_nodes;
        my $synced = grep { ($self->info($_, 'replication') =~ /master_link_status:up/) } grep { $self->_role($_) eq 'slave' } $self->live_nodes;
        my %sigs = map { _roles_of($self->view($_)) => 1 } $self->live_nodes;
        my ($sig) = keys %sigs;
        my $nrep = () = ($sig // '') =~ /<\d+/g;
        last if @p == $np && $replicas == $np * $nr && $synced == $replicas && keys %sigs == 1 && $nrep == $np * $nr;
        die "cluster: primaries/replicas not settled within 20s\n" . $self->cli($self->{nodes}[0], 'CLUSTER', 'NODES') if time > $deadline;
        sleep 0.1;
    }
    return $self;
}

# Runs a command with its output captured; killed after $secs seconds. -> (rc, output)
sub _run {
    my ($secs, @cmd) = @_;
    my $pid = open(my $fh, '-|') // die "fork: $!";
    if (!$pid) {
        open STDERR, '>&', \*STDOUT;
        open STDIN, '<', '/dev/null';
        alarm $secs;    # survives exec: SIGALRM ends a stuck command
        exec @cmd or POSIX::_exit(127);
    }
    local $/;
    my $out = <$fh> // '';
    close $fh;
    return ($? & 127 ? 128 + ($? & 127) : $? >> 8, $out);
}

# cli($node, @args): one command to one node, as redis-cli would print its reply: errors
# (MOVED, ASK, ERR ...) as their text, nil as '', arrays one element a line, CRLF as LF, no
# final newline. Commands go over a kept connection per node (fork/exec of redis-cli is too
# slow on a loaded machine); arguments starting with '-' (redis-cli options) run redis-cli.
sub cli {
    my ($self, $node, @args) = @_;
    if (@args && $args[0] =~ /^-/) {
        my @auth = defined $self->{password} ? ('-a', $self->{password}, '--no-auth-warning') : ();
        my (undef, $out) = _run($CLI_TIMEOUT, $RLTest::Redis::CLI, '-h', '127.0.0.1', '-p', $node->port, @auth, @args);
        $out =~ s/\n\z//;
        return $out;
    }
    my ($ok, $v) = $self->cmd($node, @args);
    return "connection failed: $v" unless $ok;
    my $out = join "\n", _flat($v);
    $out =~ s/\r\n/\n/g;
    $out =~ s/\n\z//;
    return $out;
}

# cmd($node, @args) -> (1, reply) or (0, reason): the reply decoded (status, error text,
# integer, bulk string or undef, arrayref), bounded by $CLI_TIMEOUT; binary safe.
sub cmd {
    my ($self, $node, @args) = @_;
    my $why = 'no connection';
    for my $attempt (1, 2) {
        my $c = $self->{conns}{ $node->port };
        if (!$c || $c->{pid} != $$) {
            $c = $self->{conns}{ $node->port } = _connect($node->port, $self->{password}) or return (0, "cannot connect to " . $node->port);
        }
        my ($ok, $v) = _roundtrip($c, @args);
        return (1, $v) if $ok;
        $why = $v;
        close $c->{s};
        delete $self->{conns}{ $node->port };
    }
    return (0, $why);
}

sub _flat { return map { ref $_ eq 'ARRAY' ? _flat(@$_) : $_ // '' } @_ }

sub _connect {
    my ($port, $password) = @_;
    my $s = IO::Socket::INET->new(PeerAddr => '127.0.0.1', PeerPort => $port, Proto => 'tcp', Timeout => 2) or return undef;
    binmode $s;
    my $c = { s => $s, pid => $$ };
    if (defined $password) {
        my ($ok, $v) = _roundtrip($c, 'AUTH', $password);
        return undef unless $ok && $v eq 'OK';
    }
    return $c;
}

sub _roundtrip {
    my ($c, @args) = @_;
    my $req = '*' . @args . "\r\n" . join('', map { '$' . length($_) . "\r\n$_\r\n" } @args);
    local $SIG{PIPE} = 'IGNORE';
    my $st = { s => $c->{s}, buf => '', deadline => time + $CLI_TIMEOUT };
    while (length $req) {
        my $n = syswrite($c->{s}, $req);
        return (0, "write: $!") unless $n;
        substr($req, 0, $n) = '';
    }
    my ($ok, $v) = _reply($st);
    return $ok ? (1, $v) : (0, 'no reply');
}

sub _fill {
    my ($st) = @_;
    my $left = $st->{deadline} - time;
    return 0 if $left <= 0 || !IO::Select->new($st->{s})->can_read($left);
    my $n = sysread($st->{s}, $st->{buf}, 65536, length $st->{buf});
    return $n ? 1 : 0;
}

sub _line {
    my ($st) = @_;
    my $i;
    while (($i = index($st->{buf}, "\r\n")) < 0) { return undef unless _fill($st) }
    my $l = substr($st->{buf}, 0, $i);
    substr($st->{buf}, 0, $i + 2) = '';
    return $l;
}

sub _reply {
    my ($st) = @_;
    my $l = _line($st) // return (0);
    my ($t, $rest) = (substr($l, 0, 1), substr($l, 1));
    return (1, $rest) if $t eq '+' || $t eq '-' || $t eq ':';
    if ($t eq '$') {
        return (1, undef) if $rest < 0;
        while (length($st->{buf}) < $rest + 2) { return (0) unless _fill($st) }
        my $v = substr($st->{buf}, 0, $rest);
        substr($st->{buf}, 0, $rest + 2) = '';
        return (1, $v);
    }
    if ($t eq '*') {
        return (1, undef) if $rest < 0;
        my @a;
        for (1 .. $rest) {
            my ($ok, $v) = _reply($st);
            return (0) unless $ok;
            push @a, $v;
        }
        return (1, \@a);
    }
    return (0);
}

sub nodes { @{ $_[0]{nodes} } }
sub live_nodes { grep { $_->{pid} } @{ $_[0]{nodes} } }
sub node_by_port { my ($self, $port) = @_; my ($n) = grep { $_->port == $port } $self->nodes; return $n }

# The node's cluster id (cached: ids do not change).
sub id {
    my ($self, $node) = @_;
    return $self->{ids}{ $node->port } //= do {
        my $id = $self->cli($node, 'CLUSTER', 'MYID');
        die "CLUSTER MYID on " . $node->port . ": $id\n" unless $id =~ /^[0-9a-f]{40}$/;
        $id;
    };
}

sub info {
    my ($self, $node, $section) = @_;
    return $self->cli($node, $section ? ('INFO', $section) : ('CLUSTER', 'INFO'));
}

# CLUSTER NODES as seen by $node (default: the first live node): a list of hashrefs
# { id, port, flags => {myself, master, slave, fail, 'fail?', ...}, master_id, slots => [[a, b], ...],
#   migrating => {slot => id}, importing => {slot => id} }.
sub view {
    my ($self, $node) = @_;
    $node //= ($self->live_nodes)[0] // die "no live node\n";
    my @v;
    for my $line (split /\n/, $self->cli($node, 'CLUSTER', 'NODES')) {
        my ($id, $addr, $flags, $master, undef, undef, undef, undef, @slots) = split ' ', $line;
        next unless defined $addr && $id =~ /^[0-9a-f]{40}$/;
        my ($port) = $addr =~ /:(\d+)@/;
        my %n = (id => $id, port => $port // 0, flags => { map { $_ => 1 } split /,/, $flags },
            master_id => ($master eq '-' ? undef : $master), slots => [], migrating => {}, importing => {});
        for my $s (@slots) {
            if ($s =~ /^\[(\d+)->-([0-9a-f]+)\]$/) { $n{migrating}{$1} = $2 }
            elsif ($s =~ /^\[(\d+)-<-([0-9a-f]+)\]$/) { $n{importing}{$1} = $2 }
            elsif ($s =~ /^(\d+)-(\d+)$/) { push @{ $n{slots} }, [$1, $2] }
            elsif ($s =~ /^(\d+)$/) { push @{ $n{slots} }, [$1, $1] }
        }
        push @v, \%n;
    }
    return @v;
}

sub _role {
    my ($self, $node) = @_;
    my ($me) = grep { $_->{flags}{myself} } $self->view($node);
    return '' unless $me;
    return $me->{flags}{master} ? 'master' : $me->{flags}{slave} ? 'slave' : '';
}

# Roles in a view: "port port<master_port ..." sorted by port.
sub _roles_of {
    my (@view) = @_;
    my %port_of = map { $_->{id} => $_->{port} } @view;
    return join ' ', map { $_->{port} . ($_->{flags}{slave} ? '<' . ($port_of{ $_->{master_id} // '' } // '?') : '') }
      sort { $a->{port} <=> $b->{port} } @view;
}

# Owner map of a view: "a-b:port a-b:port ..." sorted by slot.
sub _map_of {
    my (@view) = @_;
    my @r;
    for my $n (@view) {
        next unless $n->{flags}{master};
        push @r, [$_->[0], $_->[1], $n->{port}] for @{ $n->{slots} };
    }
    return join ' ', map { "$_->[0]-$_->[1]:$_->[2]" } sort { $a->[0] <=> $b->[0] } @r;
}

# The live primaries (owning slots), ordered by their first slot.
sub primaries {
    my ($self) = @_;
    my %live = map { $_->port => $_ } $self->live_nodes;
    my @m = grep { $_->{flags}{master} && !$_->{flags}{fail} && @{ $_->{slots} } && $live{ $_->{port} } } $self->view;
    @m = sort { $a->{slots}[0][0] <=> $b->{slots}[0][0] } @m;
    return map { $live{ $_->{port} } } @m;
}

sub seeds { join ' ', map { $_->addr } $_[0]->primaries }

# The replicas (live or not) whose primary is $primary, as the cluster says.
sub replicas_of {
    my ($self, $primary) = @_;
    my $id = $self->id($primary);
    return grep { defined } map { $self->node_by_port($_->{port}) } grep { ($_->{master_id} // '') eq $id } $self->view;
}

# The primary that owns $slot according to $via (default: the first live node).
sub owner {
    my ($self, $slot, $via) = @_;
    for my $n ($self->view($via)) {
        next unless $n->{flags}{master};
        for my $r (@{ $n->{slots} }) {
            return $self->node_by_port($n->{port}) if $slot >= $r->[0] && $slot <= $r->[1];
        }
    }
    return undef;
}

# The whole slot map at once: an arrayref, slot -> the owning node (undef if unassigned).
sub slot_owners {
    my ($self, $via) = @_;
    my @map;
    for my $n ($self->view($via)) {
        next unless $n->{flags}{master};
        my $node = $self->node_by_port($n->{port});
        @map[ $_->[0] .. $_->[1] ] = ($node) x ($_->[1] - $_->[0] + 1) for @{ $n->{slots} };
    }
    return \@map;
}

# The primary holding a key (CLUSTER KEYSLOT, then the slot map).
sub owner_of_key { my ($self, $key) = @_; return $self->owner($self->keyslot($key)) }

# All slots owned by $primary.
sub slots_of {
    my ($self, $primary) = @_;
    my ($me) = grep { $_->{port} == $primary->port } $self->view;
    return () unless $me;
    return map { $_->[0] .. $_->[1] } @{ $me->{slots} };
}

sub keyslot {
    my ($self, $key) = @_;
    my $s = $self->cli(($self->live_nodes)[0], 'CLUSTER', 'KEYSLOT', $key);
    die "CLUSTER KEYSLOT: $s\n" unless $s =~ /^\d+$/;
    return $s + 0;
}

# The slot of a key, computed here (CRC16/XMODEM of the hash tag, mod 16384).
sub slot_of {
    my ($key) = @_;
    if ($key =~ /^[^{]*\{([^}]+)\}/s) { $key = $1 }
    my $crc = 0;
    for my $c (unpack 'C*', $key) {
        $crc ^= $c << 8;
        for (1 .. 8) { $crc = $crc & 0x8000 ? (($crc << 1) ^ 0x1021) & 0xffff : ($crc << 1) & 0xffff }
    }
    return $crc % 16384;
}

# Keys matching $pattern on every live primary: list of [key, primary].
sub scan {
    my ($self, $pattern) = @_;
    my @r;
    for my $p ($self->primaries) {
        my $cursor = 0;
        do {
            my ($ok, $v) = $self->cmd($p, 'SCAN', $cursor, 'MATCH', $pattern, 'COUNT', 1000);
            die "SCAN on " . $p->port . ": " . ($ok ? $v : 'failed') . "\n" unless $ok && ref $v eq 'ARRAY';
            $cursor = $v->[0];
            push @r, map { [$_, $p] } @{ $v->[1] };
        } while ($cursor ne '0');
    }
    return @r;
}

# learn($n, $location, $key_prefix, @client_keys): one request per client key through nginx
# $n; returns { client key => { key => Redis key, slot, node } } for the keys whose single new
# state key (a key starting with $key_prefix, e.g. 'rl:{zone:') was found.
sub learn {
    my ($self, $n, $loc, $prefix, @ks) = @_;
    my %seen = map { $_->[0] => 1 } $self->scan("$prefix*");
    my %r;
    for my $k (@ks) {
        $n->get("$loc?k=$k");
        my @new = grep { !$seen{ $_->[0] } } $self->scan("$prefix*");
        $seen{ $_->[0] } = 1 for @new;
        next unless @new == 1;
        $r{$k} = { key => $new[0][0], node => $new[0][1], slot => $self->keyslot($new[0][0]) };
    }
    return \%r;
}

sub dbsize { my ($self, $node) = @_; my $n = $self->cli($node, 'DBSIZE'); return $n =~ /^\d+$/ ? $n : -1 }

sub countkeysinslot {
    my ($self, $node, $slot) = @_;
    my $n = $self->cli($node, 'CLUSTER', 'COUNTKEYSINSLOT', $slot);
    return $n =~ /^\d+$/ ? $n : -1;
}

# Waits until every live node says cluster_state:ok with all 16384 slots assigned and ok, all
# live nodes agree on the owner of every slot, and every owner is a live process.
# Returns the time it became so; dies after $timeout seconds (default 10) saying what is not.
sub wait_ok {
    my ($self, $timeout) = @_;
    my $deadline = time + ($timeout // 10);
    my %live = map { $_->port => 1 } $self->live_nodes;
    my $why;
    while (1) {
        $why = $self->_not_ok(\%live);
        return time unless defined $why;
        die "cluster not ok within ${\($timeout // 10)}s: $why\n" if time > $deadline;
        sleep 0.05;
    }
}

sub _not_ok {
    my ($self, $live) = @_;
    my $map;
    for my $n ($self->live_nodes) {
        my $info = $self->info($n);
        return "$n->{port}: " . ($info =~ /(cluster_state:\w+)/ ? $1 : $info) unless $info =~ /cluster_state:ok/;
        for my $f (qw(cluster_slots_assigned cluster_slots_ok)) {
            return "$n->{port}: $f not 16384" unless $info =~ /$f:16384\b/;
        }
        my $m = _map_of($self->view($n));
        return "$n->{port} disagrees on the slot map" if defined $map && $m ne $map;
        $map = $m;
    }
    for my $owner ($map =~ /:(\d+)/g) {
        return "slots owned by $owner, which is not running" unless $live->{$owner};
    }
    return undef;
}

sub _wait_until {
    my ($timeout, $what, $cond) = @_;
    my $deadline = time + $timeout;
    while (1) {
        return time if $cond->();
        die "cluster: $what not reached within ${timeout}s\n" if time > $deadline;
        sleep 0.02;
    }
}

# --------------------------------------------------------------------- resharding

sub _ok {
    my ($what, $out) = @_;
    die "$what: $out\n" unless $out eq 'OK';
}

# Starts moving $slot from its owner to primary $to, and moves @keys (keys of that slot) only:
# clients then get ASK for those keys and for keys that do not exist on the source.
sub begin_migration {
    my ($self, $slot, $to, @keys) = @_;
    my $from = $self->owner($slot) // die "slot $slot has no owner\n";
    die "slot $slot is already on " . $to->port . "\n" if $from->port == $to->port;
    $self->{migration}{$slot} = [$from, $to];
    _ok("SETSLOT IMPORTING", $self->cli($to, 'CLUSTER', 'SETSLOT', $slot, 'IMPORTING', $self->id($from)));
    _ok("SETSLOT MIGRATING", $self->cli($from, 'CLUSTER', 'SETSLOT', $slot, 'MIGRATING', $self->id($to)));
    $self->move_keys($slot, @keys) if @keys;
    return $from;
}

# MIGRATE the given keys of a slot under migration from its source to its target.
sub move_keys {
    my ($self, $slot, @keys) = @_;
    my ($from, $to) = @{ $self->{migration}{$slot} || die "slot $slot is not being migrated\n" };
    while (my @batch = splice @keys, 0, 100) {
        my @auth = defined $self->{password} ? ('AUTH', $self->{password}) : ();
        my $out = $self->cli($from, 'MIGRATE', '127.0.0.1', $to->port, '', 0, 5000, @auth, 'KEYS', @batch);
        die "MIGRATE: $out\n" unless $out eq 'OK' || $out eq 'NOKEY';
    }
}

# Up to 1000 keys of $slot on $node (binary safe).
sub keys_in_slot {
    my ($self, $node, $slot) = @_;
    my ($ok, $v) = $self->cmd($node, 'CLUSTER', 'GETKEYSINSLOT', $slot, 1000);
    die "CLUSTER GETKEYSINSLOT on " . $node->port . ": " . ($ok ? $v : 'failed') . "\n" unless $ok && ref $v eq 'ARRAY';
    return @$v;
}

# Moves what is left of $slot and assigns it to the target on the target, the source and every
# other primary; waits (bounded) until every primary says so (replicas follow by gossip).
sub finish_migration {
    my ($self, $slot) = @_;
    my ($from, $to) = @{ $self->{migration}{$slot} || die "slot $slot is not being migrated\n" };
    while (my @k = $self->keys_in_slot($from, $slot)) { $self->move_keys($slot, @k) }
    my $to_id = $self->id($to);
    _ok("SETSLOT NODE on the target", $self->cli($to, 'CLUSTER', 'SETSLOT', $slot, 'NODE', $to_id));
    _ok("SETSLOT NODE on the source", $self->cli($from, 'CLUSTER', 'SETSLOT', $slot, 'NODE', $to_id));
    for my $p ($self->primaries) {
        next if $p->port == $from->port || $p->port == $to->port;
        _ok("SETSLOT NODE on " . $p->port, $self->cli($p, 'CLUSTER', 'SETSLOT', $slot, 'NODE', $to_id));
    }
    delete $self->{migration}{$slot};
    _wait_until(10, "slot $slot owned by " . $to->port . " on every primary", sub {
        !grep { my $o = $self->owner($slot, $_); !$o || $o->port != $to->port } $self->primaries;
    });
    return $from;
}

# A complete migration of $slot to $to (clients get MOVED afterwards). Returns the source.
sub migrate_slot {
    my ($self, $slot, $to) = @_;
    $self->begin_migration($slot, $to);
    return $self->finish_migration($slot);
}

# redis-cli --cluster reshard, non-interactive: moves $count slots (the first ones redis-cli
# picks: the lowest of $from) with their keys from primary $from to primary $to. Returns the
# slots that changed owner; dies if redis-cli fails or the cluster is not ok afterwards.
sub reshard {
    my ($self, $from, $to, $count) = @_;
    my %before = map { $_ => 1 } $self->slots_of($from);
    my @auth = defined $self->{password} ? ('-a', $self->{password}, '--no-auth-warning') : ();
    my ($rc, $out) = _run(120, $RLTest::Redis::CLI, @auth, '--cluster', 'reshard', $from->addr,
        '--cluster-from', $self->id($from), '--cluster-to', $self->id($to), '--cluster-slots', $count,
        '--cluster-yes', '--cluster-pipeline', 100);
    die "redis-cli --cluster reshard failed (rc $rc):\n" . substr($out, -2000) . "\n" if $rc != 0;
    $self->wait_ok(20);
    my %after = map { $_ => 1 } $self->slots_of($from);
    return sort { $a <=> $b } grep { !$after{$_} } keys %before;
}

# Counts of the cluster redirections a node replied: (MOVED, ASK), from INFO errorstats.
sub redirections {
    my ($self, $node) = @_;
    my $s = $self->cli($node, 'INFO', 'errorstats');
    my ($moved) = $s =~ /errorstat_MOVED:count=(\d+)/;
    my ($ask)   = $s =~ /errorstat_ASK:count=(\d+)/;
    return ($moved // 0, $ask // 0);
}

# Runs a command on every live node (e.g. ACL SETUSER, which is not propagated); returns the
# replies.
sub cli_all {
    my ($self, @args) = @_;
    return map { $self->cli($_, @args) } $self->live_nodes;
}

# ---------------------------------------------------------------------- failover

# CLUSTER FAILOVER [FORCE|TAKEOVER] on $replica; waits until it is a primary and the cluster
# is ok again. Returns the time of completion.
sub manual_failover {
    my ($self, $replica, @opt) = @_;
    $self->wait_synced($replica, 10) unless @opt;
    _ok("CLUSTER FAILOVER", $self->cli($replica, 'CLUSTER', 'FAILOVER', @opt));
    _wait_until(10, $replica->port . " promoted", sub { $self->_role($replica) eq 'master' });
    return $self->wait_ok(10);
}

# Waits until $replica's link to its primary is up, not syncing, at the primary's offset.
sub wait_synced {
    my ($self, $replica, $timeout) = @_;
    _wait_until($timeout // 10, $replica->port . " in sync with its primary", sub {
        my $r = $self->info($replica, 'replication');
        return 0 unless $r =~ /role:slave/ && $r =~ /master_link_status:up/ && $r =~ /master_sync_in_progress:0/;
        my ($mport) = $r =~ /master_port:(\d+)/;
        my ($off) = $r =~ /slave_repl_offset:(\d+)/;
        my $m = $self->node_by_port($mport // 0) or return 0;
        my ($moff) = $self->info($m, 'replication') =~ /master_repl_offset:(\d+)/;
        return defined $off && defined $moff && $off >= $moff;
    });
}

# kill -9 of a node (its id is remembered first). Returns the time of the kill.
sub kill_primary {
    my ($self, $node) = @_;
    $self->id($node);
    $self->{replicas_before}{ $node->port } = [map { $_->port } $self->replicas_of($node)];
    $node->kill_now('KILL');
    return time;
}

# Waits until a replica of the killed $old primary serves its slots and the cluster is ok.
# Returns (time when ok, the new primary).
sub wait_promoted {
    my ($self, $old, $timeout) = @_;
    my @cands = map { $self->node_by_port($_) } @{ $self->{replicas_before}{ $old->port } || [] };
    die "no replica of " . $old->port . " to promote\n" unless @cands;
    my $new;
    _wait_until($timeout // 15, "a replica of " . $old->port . " promoted", sub {
        ($new) = grep { $_->{pid} && $self->_role($_) eq 'master' } @cands;
        return $new;
    });
    my $t = $self->wait_ok($timeout // 15);
    return ($t, $new);
}

# Restarts a node that was killed: it rejoins with its nodes.conf (a former primary comes back
# as a replica of the one that replaced it).
sub revive {
    my ($self, $node) = @_;
    $node->restart;
}

# ---------------------------------------------------------------------- stopping

sub stop {
    my ($self) = @_;
    return if $self->{creator} != $$;
    close $_->{s} for values %{ $self->{conns} || {} };
    $self->{conns} = {};
    my @n = grep { $_->{pid} } @{ $self->{nodes} };
    kill 'TERM', $_->{pid} for @n;
    my $deadline = time + 3;
    while (@n && time < $deadline) {
        @n = grep { waitpid($_->{pid}, WNOHANG) == 0 or do { delete $_->{pid}; 0 } } @n;
        sleep 0.02 if @n;
    }
    for my $n (@n) {
        kill 'KILL', $n->{pid};
        waitpid $n->{pid}, 0;
        delete $n->{pid};
    }
}

END {
    my $rc = $?;
    if ($$ == $CLUSTER_CREATOR) { $_->stop for @CLUSTERS; @CLUSTERS = (); }
    $? = $rc;
}

1;
