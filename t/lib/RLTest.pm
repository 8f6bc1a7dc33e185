package RLTest;
# Small harness for the end-to-end tests of ngx_http_ratelimit_module.
# Core Perl only: every test file starts its own nginx (own temp prefix, free loopback
# ports), talks raw HTTP/1.1 to it and stops it at the end, whatever happens.
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
  conf_line_of gif_body_ok parse_sf_list statuses start_redis);

our $NGINX   = $ENV{NGINX_BIN} || '/usr/sbin/nginx';
our $TIMEOUT = 10;    # seconds for any single network operation

my @INSTANCES;        # every nginx started by this process, stopped in END
my $CREATOR = $$;

# Every test file is bounded in time: after RLTEST_TIMEOUT seconds (default 150) it dies,
# and END below stops its nginx.
$SIG{ALRM} = sub { die "RLTest: test file timed out\n" };
alarm($ENV{RLTEST_TIMEOUT} || 150);

sub nginx_bin { $NGINX }

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
    my $dir = tempdir('rltest-XXXXXX', TMPDIR => 1, CLEANUP => 1);
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
# context text), so (module path; '' for none), files => { relpath => content }.
sub start_nginx {
    my ($http, %o) = @_;
    my $self = bless { creator => $$, workers => $o{workers} // 2 }, __PACKAGE__;
    my $dir = tempdir('rltest-XXXXXX', TMPDIR => 1, CLEANUP => 1);
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

# Reloads (optionally with a new http body) and waits until a full new set of workers runs.
sub reload {
    my ($self, $http) = @_;
    $self->_write_conf($http) if defined $http;
    my %old = map { $_ => 1 } $self->worker_pids;
    my $m = $self->master_pid or die "no master pid";
    my $log_before = length $self->error_log;
    kill 'HUP', $m or die "kill HUP: $!";
    my $deadline = time + 10;
    while (time < $deadline) {
        my @w = $self->worker_pids;
        my $new = grep { !$old{$_} } @w;
        # old workers still alive (even shutting down) are checked separately
        my $old_alive = grep { _alive($_) } keys %old;
        return 1 if $new >= $self->{workers} && !$old_alive;
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

END {
    my $rc = $?;
    if ($$ == $CREATOR) { $_->stop for @INSTANCES; RLTest::Redis::stop_all(); }
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
        dir => $o{dir} // tempdir('rlredis-XXXXXX', TMPDIR => 1, CLEANUP => 1), creator => $$ }, $class;
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

# The keys of the database (few, in tests).
sub keys_matching {
    my ($self, $pattern) = @_;
    return grep { length } split /\n/, $self->cli('--scan', '--pattern', $pattern);
}

sub kill_now {
    my ($self, $sig) = @_;
    return unless $self->{pid};
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

1;
