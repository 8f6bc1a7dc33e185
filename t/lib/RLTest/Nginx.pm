package RLTest::Nginx;
# An nginx instance of a test: its own temporary prefix and free loopback ports, the module
# loaded, started (start_nginx) or only checked (nginx_t); reloaded, stopped (also at the
# end of the test file, whatever happens), its conf and error log read; requests to it; and
# the teardown check: every error.log made here is checked for [alert], [crit], "exited on
# signal" and sanitizer reports (see RLTest.pm, which runs it).
# $NGINX_BIN is the nginx binary (/usr/sbin/nginx), RLTest::Util::module_so the module.
#
# A stream{} block: start_nginx($http, stream => $text) or nginx_t($http, stream => $text). The
# stream module (RLTest::Util::stream_module_so: $RATELIMIT_STREAM_SO or
# build/ngx_stream_ratelimit_module.so; stream_so => '' for none) is loaded after nginx's own
# stream module where that is a module too (Debian: $NGINX_STREAM_MODULE, default
# /usr/lib/nginx/modules/ngx_stream_module.so, from libnginx-mod-stream), not where stream is
# built in (an upstream build --with-stream: stream_built_in). The http module is loaded too
# unless so => ''; load_order => 'stream_first' loads the stream modules before it (Debian's
# own order, its 50- link sorting after the http module's, is the default: http first). The
# http block ($http may be undef) gets a server of its own (on a port of its own) that tells
# when nginx is up, so no connection reaches the test's servers before the test (it takes the
# http{} level's ratelimit lines, if a test has some there). A stream
# configuration gets ports free for TCP and UDP both, nports of them (4; %%PORT%%,
# %%PORT1%%...).
use strict;
use warnings;
use Exporter 'import';
use File::Basename qw(dirname);
use File::Path qw(make_path);
use Time::HiRes qw(time sleep);
use IO::Socket::INET;
use RLTest::Util qw(module_so stream_module_so slurp spew free_port temp_dir run_cmd pid_alive wait_until settle_value);
use RLTest::Http qw(http_request parse_sf_list);
use RLTest::KeepAlive;

our @EXPORT_OK = qw(nginx_bin start_nginx nginx_t stream_built_in nginx_version);

our $BIN = $ENV{NGINX_BIN} || '/usr/sbin/nginx';
our $STREAM_CORE_SO = $ENV{NGINX_STREAM_MODULE} || '/usr/lib/nginx/modules/ngx_stream_module.so';
our $CMD_TIMEOUT = 30;    # seconds for nginx -t, and for nginx to daemonize at a start

my @INSTANCES;        # every nginx started by this process, stopped at the end
my @LOGS;             # [error.log, allowed re or undef] of every prefix made here, checked at the end
my $T_START = time;   # sanitizer reports older than this are not this file's

sub nginx_bin { $BIN }

# Whether stream is built into the nginx binary (`nginx -V` says --with-stream, not
# --with-stream=dynamic): then no stream module is loaded before the test's.
my $BUILT_IN;
sub stream_built_in {
    return $BUILT_IN if defined $BUILT_IN;
    my ($rc, $out) = run_cmd($CMD_TIMEOUT, $BIN, '-V');
    die "$BIN -V failed: $out\n" if $rc != 0;
    return $BUILT_IN = $out =~ /--with-stream(?![=_])/ ? 1 : 0;
}

# The nginx binary's version as a number: 1022001 for 1.22.1 (what a test needs to know: stream
# servers selected by name came with 1.25.5).
my $VERSION;
sub nginx_version {
    return $VERSION if defined $VERSION;
    my ($rc, $out) = run_cmd($CMD_TIMEOUT, $BIN, '-v');
    my ($a, $b, $c) = $out =~ m{nginx/(\d+)\.(\d+)\.(\d+)} or die "$BIN -v: $out\n";
    return $VERSION = $a * 1000000 + $b * 1000 + $c;
}

# The load_module lines: the http module and the stream ones, in the order asked.
sub _load_lines {
    my (%o) = @_;
    my $so = exists $o{so} ? $o{so} : module_so();
    my @http = defined $so && length $so ? ($so) : ();
    return join '', map { "load_module $_;\n" } @http unless defined $o{stream};
    my $sso = exists $o{stream_so} ? $o{stream_so} : stream_module_so();
    my @stream = ((stream_built_in() ? () : ($STREAM_CORE_SO)), (defined $sso && length $sso ? ($sso) : ()));
    my @all = ($o{load_order} // '') eq 'stream_first' ? (@stream, @http) : (@http, @stream);
    return join '', map { "load_module $_;\n" } @all;
}

# Builds a complete nginx.conf. $http is the body of the http block, o{stream} that of a stream
# block; they may contain %%PORT%%, %%PORT1%%..%%PORTn%% and %%DIR%% which are substituted.
# o{ready_port}: a server of the http block on that port (the probe of a start).
sub _full_conf {
    my ($dir, $http, %o) = @_;
    my $workers = $o{workers} // 2;
    my $level   = $o{log_level} // 'info';
    my $main    = $o{main} // '';
    my $load    = _load_lines(%o);
    my $user    = $> == 0 ? "user nobody nogroup;\n" : '';
    my $stream  = defined $o{stream} ? "\nstream {\n$o{stream}\n}\n" : '';
    $http = ($http // '') . (defined $o{ready_port} ? "    server { listen 127.0.0.1:$o{ready_port}; return 204; }\n" : '');
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
$stream
EOF
    return $conf;
}

# The ports of an instance: o{nports} (4), free for TCP and UDP both with a stream block.
sub _ports {
    my (%o) = @_;
    return [map { free_port(udp => defined $o{stream}) } 1 .. ($o{nports} // 4)];
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

# nginx_t($http_body, %opts) or nginx_t(undef, full => $complete_conf_text)
# Returns (exit code, output, conf path, dir).
sub nginx_t {
    my ($http, %o) = @_;
    my $dir = temp_dir('rltest');
    push @LOGS, ["$dir/error.log", $o{allow_alerts} ? qr/./ : $o{allow_log}];
    chmod 0755, $dir;
    my $ports = _ports(%o);
    my $conf  = defined $o{full} ? $o{full} : _full_conf($dir, $http, %o);
    $conf = _subst($conf, $dir, $ports);
    my $file = "$dir/nginx.conf";
    spew($file, $conf);
    my ($rc, $out) = run_cmd($CMD_TIMEOUT, $BIN, '-t', '-p', "$dir/", '-c', $file, '-e', "$dir/error.log");
    return ($rc, $out, $file, $dir);
}

# start_nginx($http_body, %opts): opts workers (2), log_level (info), main (extra main
# context text), so (module path; '' for none), full (the complete conf instead),
# files => { relpath => content }, allow_alerts / allow_log (see the teardown check);
# stream, stream_so, load_order, nports (see the top of this file).
sub start_nginx {
    my ($http, %o) = @_;
    my $self = bless { creator => $$, workers => $o{workers} // 2 }, __PACKAGE__;
    my $dir = temp_dir('rltest');
    push @LOGS, ["$dir/error.log", $o{allow_alerts} ? qr/./ : $o{allow_log}];
    chmod 0755, $dir;
    $self->{dir}   = $dir;
    $self->{ports} = _ports(%o);
    # A stream configuration is probed on a server of its own (see _full_conf).
    $o{ready_port} = free_port() if defined $o{stream} && !defined $o{full};
    $self->{probe} = $o{ready_port} // $self->{ports}[0];
    $self->{opts}  = \%o;
    if (my $files = $o{files}) {
        for my $rel (sort keys %$files) {
            my $path = "$dir/$rel";
            my $d = dirname($path);
            make_path($d);
            -d $d or die "mkdir $d";
            chmod 0755, $d;
            spew($path, $files->{$rel});
            chmod 0644, $path;
        }
    }
    $self->_write_conf($http);
    my ($rc, $out) = run_cmd($CMD_TIMEOUT, $BIN, '-p', "$dir/", '-c', "$dir/nginx.conf", '-e', "$dir/error.log");
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
        if ($self->master_pid && (my @w = $self->worker_pids) >= $self->{workers} && _can_connect($self->{probe})) {
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
        my $old_alive = grep { pid_alive($_) } keys %old;
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
        last unless pid_alive($m);
        sleep 0.02;
    }
    if (pid_alive($m)) {
        kill 'KILL', $m;
        kill 'KILL', @w if @w;
    }
    for (1 .. 20) {
        last unless grep { pid_alive($_) } @w;
        sleep 0.05;
    }
}

sub DESTROY { $_[0]->stop }

# Every nginx this process started.
sub stop_all { $_->stop for @INSTANCES }

# Waits until the error log contains $re (returns the matching text) or $timeout (3) passes.
sub wait_log {
    my ($self, $re, $timeout) = @_;
    my $found;
    wait_until(sub { $found = $self->error_log =~ $re ? $1 // $& : undef; return defined $found },
        timeout => $timeout // 3, every => 0.05);
    return $found;
}

# $n->log_lines($file, $re, $count [, $timeout]) -> the lines of $file (relative to the prefix:
# an access log the test configured) that match $re, once there are at least $count of them
# (what was logged at the end of a session, awaited), or those there are after $timeout (3) s.
sub log_lines {
    my ($self, $file, $re, $count, $timeout) = @_;
    my $deadline = time + ($timeout // 3);
    while (1) {
        my @l = grep { $_ =~ $re } split /\n/, slurp("$self->{dir}/$file");
        return @l if @l >= $count || time > $deadline;
        sleep 0.05;
    }
}

# ---------------------------------------------------------------- requests

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

# $n->key_state($zone, $key, %o): one key's state from a ratelimit_api location at o{base}
# ('/api/'), decoded ({ status => ... } when the answer is not a 200 with JSON). $key is sent
# as given (escape it, %XX). o{on}: a keep-alive connection (RLTest::KeepAlive) to ask over
# instead of a new one: nginx reads a connection's next request only once the last one has
# ended there, its log phase (settle=) and cleanup included, so the answer shows what the
# requests sent before on that connection left in shared memory (a response alone does not:
# the client may read it before its request has ended).
sub key_state {
    my ($self, $zone, $key, %o) = @_;
    my $path = ($o{base} // '/api/') . "zones/$zone?key=$key";
    my ($st, undef, $body) = $o{on} ? $o{on}->get($path) : $self->get($path);
    return { status => $st // 'ERR' } unless ($st // '') eq '200';
    require JSON::PP;
    return eval { JSON::PP::decode_json($body) } // { status => 'bad json' };
}

# $n->api($method, $path): (status, the body decoded from JSON or undef, \%headers) of one
# request to a ratelimit_api location.
sub api {
    my ($self, $method, $path) = @_;
    my ($st, $h, $body) = http_request($self->port, $path, undef, $method);
    require JSON::PP;
    return ($st // 'ERR', eval { JSON::PP::decode_json($body // '') }, $h);
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
    return wait_until(sub { my $rem = $self->remaining($path); return $rem =~ /^\d+$/ && $rem <= $max }, timeout => 5) ? 1 : 0;
}

# $n->settle_remaining($path, $want [, $timeout]): polls a quantity=0 location until the key
# has exactly $want units left (for up to $timeout seconds, 3), then reads it once more 0.2 s
# later (settle_value). Returns the last value read ('-' if not decided in Redis).
sub settle_remaining {
    my ($self, $path, $want, $timeout) = @_;
    return settle_value(sub { $self->remaining($path) }, $want, timeout => $timeout // 3);
}

# ------------------------------------------------------------ teardown check

# What no error.log may contain, as Test::Nginx checks on teardown: an alert or crit line, a
# worker killed by a signal, a sanitizer report.
our $BAD_LOG = qr/\[alert\]|\[crit\]|exited on signal|AddressSanitizer|LeakSanitizer|runtime error:/;

# Tests that provoke an alert on purpose: $n->allow_log(qr/.../) ignores matching alert or crit
# lines of this instance (never a signal or a sanitizer report).
sub allow_log {
    my ($self, $re) = @_;
    $_->[1] = $re for grep { $_->[0] eq "$self->{dir}/error.log" } @LOGS;
    return $self;
}

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

1;
