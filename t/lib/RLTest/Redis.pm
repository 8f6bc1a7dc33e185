package RLTest::Redis;
# A redis-server of a test on a free loopback port, in its own temporary directory, no
# persistence, stopped at the end of the test file; and a small RESP client (binary safe,
# every reply bounded by $CLI_TIMEOUT) that RLTest::RedisCluster uses too.
#
#   my $r = start_redis(args => [extra redis-server args], password => what cli/cmd send,
#                       port => N, dir => D, bind => '127.0.0.2' (default 127.0.0.1), tls => {...});
#   $r->port, $r->addr, $r->host, $r->pid, $r->tls (the tls hash or undef)
#   $r->cli(@args)              redis-cli's output, without the final newline
#   $r->cmd(@args)              (1, decoded reply) or (0, reason), over a kept connection
#   $r->keys_matching($pattern) the keys (few, in tests)
#   $r->wait_asleep([$timeout]) until it stops answering (inside a DEBUG SLEEP sent elsewhere)
#   $r->kill_now([$sig]), $r->restart, $r->stop
# tls => { cert => F, key => F, ca => F, auth_clients => 'no' (default) | 'yes' | 'optional',
#          client_cert => F, client_key => F, verify => 0 }: a TLS-only server (--port 0,
#          --tls-port N: port/addr are the TLS port); cli (redis-cli --tls --cacert [--cert
#          --key]), cmd, wait_asleep and the RESP client (IO::Socket::SSL) speak TLS to it,
#          presenting client_cert/client_key when given (required with auth_clients yes). The
#          harness does not check the server's certificate (the expired or wrong-name server of a
#          test must still be reachable by it) unless verify => 1. RLTest::TLS's
#          $pki->redis_tls(...) makes such a hash. cli_tls_args($tls) are the redis-cli options.
# $REDIS_SERVER and $REDIS_CLI name other binaries.
use strict;
use warnings;
use Exporter 'import';
use IO::Select;
use IO::Socket::INET;
use POSIX qw(:sys_wait_h);
use Time::HiRes qw(time sleep);
use RLTest::Util qw(free_port temp_dir slurp run_cmd stop_child wait_until);

our @EXPORT_OK = qw(start_redis cli_tls_args);

our $SERVER = $ENV{REDIS_SERVER} || '/usr/bin/redis-server';
our $CLI    = $ENV{REDIS_CLI}    || '/usr/bin/redis-cli';
our $CLI_TIMEOUT = 10;    # seconds for any single command
my @ALL;

# start_redis(%opts) -> RLTest::Redis: a redis-server on a free loopback port, in its own
# directory, stopped at the end of the test file. opts: args => [extra redis-server args],
# password => what cli() authenticates with, bind => the loopback address it listens on
# (127.0.0.1), tls => {...} (see above).
sub start_redis { return __PACKAGE__->start(@_) }

sub start {
    my ($class, %o) = @_;
    my $tls = $o{tls};
    if ($tls) {
        $tls = { auth_clients => 'no', %$tls };
        defined $tls->{$_} or die "start_redis: tls needs $_\n" for qw(cert key ca);
        die "start_redis: tls auth_clients is yes, no or optional\n" unless $tls->{auth_clients} =~ /^(yes|no|optional)$/;
        die "start_redis: tls auth_clients yes needs client_cert and client_key\n"
          if $tls->{auth_clients} eq 'yes' && !($tls->{client_cert} && $tls->{client_key});
        require IO::Socket::SSL;
    }
    my $self = bless { port => $o{port} // free_port(), args => $o{args} || [], password => $o{password},
        dir => $o{dir} // temp_dir('rlredis'), creator => $$, host => $o{bind} // '127.0.0.1', tls => $tls }, $class;
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
        my $t = $self->{tls};
        my @port = $t ? ('--port', 0, '--tls-port', $self->{port}, '--tls-cert-file', $t->{cert},
            '--tls-key-file', $t->{key}, '--tls-ca-cert-file', $t->{ca}, '--tls-auth-clients', $t->{auth_clients})
          : ('--port', $self->{port});
        exec $SERVER, @port, '--bind', $self->{host}, '--save', '', '--appendonly', 'no',
          '--dir', $self->{dir}, '--daemonize', 'no', @{ $self->{args} }
          or POSIX::_exit(127);
    }
    $self->{pid} = $pid;
    my $up = wait_until(sub {
        return 1 if ($self->cli('PING') // '') =~ /PONG|NOAUTH/;
        die "redis-server exited: " . slurp("$self->{dir}/redis.log") if waitpid($pid, WNOHANG) == $pid;
        return 0;
    }, timeout => 10, every => 0.05);
    return 1 if $up;
    die "redis-server did not start\n" . slurp("$self->{dir}/redis.log");
}

sub port { $_[0]{port} }
sub pid  { $_[0]{pid} }
sub host { $_[0]{host} }
sub addr { "$_[0]{host}:$_[0]{port}" }
sub tls  { $_[0]{tls} }

# cli_tls_args($tls): the redis-cli options that talk to a server started with tls => $tls
# (none for undef).
sub cli_tls_args {
    my ($t) = @_;
    return () unless $t;
    return ('--tls', '--cacert', $t->{ca}, ($t->{client_cert} ? ('--cert', $t->{client_cert}, '--key', $t->{client_key}) : ()),
        ($t->{verify} ? () : '--insecure'));
}

# cli(@args): runs redis-cli against this server (killed after $CLI_TIMEOUT seconds); returns
# its output without the newline.
sub cli {
    my ($self, @args) = @_;
    my @auth = defined $self->{password} ? ('-a', $self->{password}, '--no-auth-warning') : ();
    my (undef, $out) = run_cmd($CLI_TIMEOUT, $CLI, '-h', $self->{host}, '-p', $self->{port}, cli_tls_args($self->{tls}), @auth, @args);
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
            $c = $self->{conn} = resp_connect($self->{port}, $self->{password}, $self->{host}, $self->{tls})
              or return (0, "cannot connect to $self->{port}");
        }
        my ($ok, $v) = resp_roundtrip($c, @args);
        return (1, $v) if $ok;
        $why = $v;
        close $c->{s};
        delete $self->{conn};
    }
    return (0, $why);
}

# $r->wait_asleep([$timeout]): waits (up to $timeout seconds, 2) until the server stops
# answering a PING within 50 ms, i.e. it is inside a DEBUG SLEEP or the like that was sent
# from elsewhere: a command sent from now on arrives while it sleeps, not in the same
# event-loop turn as the sleep. False if it never did.
sub wait_asleep {
    my ($self, $timeout) = @_;
    my $deadline = time + ($timeout // 2);
    while (time < $deadline) {
        my $s = IO::Socket::INET->new(PeerAddr => $self->{host}, PeerPort => $self->{port}, Timeout => 1) or return 0;
        if ($self->{tls}) {
            # a sleeping server does not answer the handshake either (its event loop does it)
            my $ok = _start_tls($s, $self->{tls}, 0.05);
            if (!$ok) { close $s; return 1 }
        }
        syswrite $s, "PING\r\n";
        my $answered = _pending($s) || IO::Select->new($s)->can_read(0.05);
        close $s;
        return 1 unless $answered;
        sleep 0.01;
    }
    return 0;
}

# The keys of the database (few, in tests).
sub keys_matching {
    my ($self, $pattern) = @_;
    return grep { length } split /\n/, $self->cli('--scan', '--pattern', $pattern);
}

# Sends $sig (KILL) and reaps the server; one that is still there 3 s later is killed.
sub kill_now {
    my ($self, $sig) = @_;
    return unless $self->{pid};
    close $self->{conn}{s} if $self->{conn};
    delete $self->{conn};
    stop_child($self->{pid}, $sig // 'KILL', 3);
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

# ------------------------------------------------------------------ RESP client

# resp_connect($port [, $password [, $host [, $tls]]]) -> a connection (AUTH sent if a
# password is given) to $host (127.0.0.1), over TLS with a tls hash as start_redis's; or undef.
sub resp_connect {
    my ($port, $password, $host, $tls) = @_;
    my $s = IO::Socket::INET->new(PeerAddr => $host // '127.0.0.1', PeerPort => $port, Proto => 'tcp', Timeout => 2) or return undef;
    binmode $s;
    if ($tls) { _start_tls($s, $tls, 2) or return undef }
    my $c = { s => $s, pid => $$ };
    if (defined $password) {
        my ($ok, $v) = resp_roundtrip($c, 'AUTH', $password);
        return undef unless $ok && $v eq 'OK';
    }
    return $c;
}

# resp_roundtrip($conn, @args) -> (1, reply) or (0, reason): the reply decoded (status, error
# text, integer, bulk string or undef, arrayref), bounded by $CLI_TIMEOUT.
sub resp_roundtrip {
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

# TLS on a connected socket (the socket becomes an IO::Socket::SSL), the handshake bounded by
# $timeout seconds. True if it succeeded.
sub _start_tls {
    my ($s, $t, $timeout) = @_;
    require IO::Socket::SSL;
    return IO::Socket::SSL->start_SSL($s,
        SSL_verify_mode => $t->{verify} ? IO::Socket::SSL::SSL_VERIFY_PEER() : IO::Socket::SSL::SSL_VERIFY_NONE(),
        SSL_ca_file => $t->{ca}, SSL_verifycn_scheme => ($t->{verify} ? 'default' : 'none'),
        SSL_hostname => '', Timeout => $timeout,
        ($t->{client_cert} ? (SSL_cert_file => $t->{client_cert}, SSL_key_file => $t->{client_key}) : ()),
    ) ? 1 : 0;
}

# Bytes already decrypted and buffered in a TLS socket (select does not see them).
sub _pending { my ($s) = @_; return ref $s && $s->isa('IO::Socket::SSL') ? $s->pending : 0 }

sub _fill {
    my ($st) = @_;
    my $left = $st->{deadline} - time;
    return 0 if $left <= 0 || (!_pending($st->{s}) && !IO::Select->new($st->{s})->can_read($left));
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

1;
