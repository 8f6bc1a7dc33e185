package RLTest::FakeRedis;
# A scripted Redis for the tests that need a server to say what no real one would (a hostile
# Cluster node, Sentinel or TLS node): a forked child listening on a free 127.0.0.1 port that
# reads RESP commands and answers each by the command's name from a table the test gives,
# over TLS too (IO::Socket::SSL, with a certificate of RLTest::TLS). Its defaults pass the
# module's handshake as a server of the chosen mode (INFO, FUNCTION LOAD, SCRIPT LOAD...);
# any other command gets "+OK". One process per connection (blocking I/O, simple with TLS);
# loopback only. The child and its connections end with the test file (stop, or when the
# test is gone), or after `limit` seconds (default 300).
#
#   my $f = start_fake_redis(mode => 'cluster' | 'sentinel' | 'standalone',
#       answers => { CLUSTER => $reply, SENTINEL => sub { ... }, FCALL => ..., ... },
#       close_after => 'CLUSTER',    # a connection is closed once it answered that command
#       tls => { cert => $file, key => $file });
#     A reply is the raw RESP bytes, or a sub ($args, $seq) -> the raw bytes: $args the
#     command's arguments after its name, $seq a number unique to this answer among all the
#     connections (0, 1, ...). Names are upper case.
#   $f->port, $f->addr
#   $f->answered($name)       commands of that name answered so far, on all connections
#   $f->set($key, $value)     a value the answer subs read with RLTest::FakeRedis::get($key)
#                             (a file: read again at each command)
#   $f->stop                  (also done at the end of the test file)
# Helpers for replies (exported on request): resp_bulk($s), resp_array(@raw), resp_int($n),
# resp_error($text).
use strict;
use warnings;
use Exporter 'import';
use Fcntl qw(:flock O_RDWR O_CREAT);
use IO::Select;
use IO::Socket::INET;
use POSIX qw(:sys_wait_h);
use Time::HiRes qw(time sleep);
use RLTest::Util qw(temp_dir slurp spew stop_child);

our @EXPORT_OK = qw(start_fake_redis resp_bulk resp_array resp_int resp_error);

my @ALL;
my $CREATOR = $$;
my $DIR;    # in a connection's process: its fake's directory

sub start_fake_redis { return __PACKAGE__->start(@_) }

sub resp_bulk  { my ($s) = @_; return '$' . length($s) . "\r\n$s\r\n" }
sub resp_array { return '*' . scalar(@_) . "\r\n" . join('', @_) }
sub resp_int   { return ":$_[0]\r\n" }
sub resp_error { return "-$_[0]\r\n" }

my %INFO = (
    cluster    => "# Server\r\nredis_version:7.2.0\r\nredis_mode:cluster\r\n\r\n# Cluster\r\ncluster_enabled:1\r\n",
    sentinel   => "# Server\r\nredis_version:7.2.0\r\nredis_mode:sentinel\r\n",
    standalone => "# Server\r\nredis_version:7.2.0\r\nredis_mode:standalone\r\n",
);

sub start {
    my ($class, %o) = @_;
    my $mode = $o{mode} // 'standalone';
    die "start_fake_redis: mode $mode\n" unless $INFO{$mode};
    my %answers = (
        INFO => resp_bulk($INFO{$mode}), PING => "+PONG\r\n",
        ROLE => resp_array(resp_bulk('master'), resp_int(0), resp_array()),
        FUNCTION => resp_bulk('ratelimit'), SCRIPT => resp_bulk('0' x 40),
        %{ $o{answers} // {} },
    );
    my $listen = IO::Socket::INET->new(LocalAddr => '127.0.0.1', LocalPort => 0, Proto => 'tcp', Listen => 128,
        ReuseAddr => 1) or die "fake redis: cannot listen: $!\n";
    my $dir = temp_dir('rlfake');
    spew("$dir/answered", '');
    spew("$dir/seq", '0');
    spew("$dir/state", '');
    require IO::Socket::SSL if $o{tls};
    pipe(my $r, my $w) or die "pipe: $!";
    my $pid = fork // die "fork: $!";
    if (!$pid) {
        close $w;
        $DIR = $dir;
        eval { _serve($listen, $r, \%answers, $o{close_after} // '', $o{tls}, $o{limit} // 300) };
        POSIX::_exit(0);
    }
    close $r;
    my $self = bless { pid => $pid, port => $listen->sockport, dir => $dir, creator => $$, ctl => $w }, $class;
    close $listen;
    push @ALL, $self;
    return $self;
}

sub port { $_[0]{port} }
sub addr { "127.0.0.1:$_[0]{port}" }
sub pid  { $_[0]{pid} }

sub answered {
    my ($self, $name) = @_;
    return scalar grep { $_ eq uc $name } split /\n/, slurp("$self->{dir}/answered");
}

sub set {
    my ($self, $key, $value) = @_;
    $self->{state}{$key} = $value;
    my $text = join '', map { "$_\t" . unpack('H*', $self->{state}{$_}) . "\n" } sort keys %{ $self->{state} };
    spew("$self->{dir}/state.new", $text);
    rename "$self->{dir}/state.new", "$self->{dir}/state" or die "rename: $!";
}

# In an answer sub: the value the test set, or undef.
sub get {
    my ($key) = @_;
    for my $l (split /\n/, slurp("$DIR/state")) {
        my ($k, $v) = split /\t/, $l, 2;
        return pack('H*', $v // '') if $k eq $key;
    }
    return undef;
}

sub stop {
    my ($self) = @_;
    return unless $self->{pid} && $self->{creator} == $$;
    close $self->{ctl};
    stop_child($self->{pid}, 'TERM', 3);
    delete $self->{pid};
}

sub stop_all { $_->stop for @ALL; @ALL = () }

END {
    my $rc = $?;
    stop_all() if $$ == $CREATOR;
    $? = $rc;
}

# ------------------------------------------------------------------ the child

# The next answer's number, unique across the connections' processes.
sub _next_seq {
    sysopen(my $fh, "$DIR/seq", O_RDWR | O_CREAT) or die "seq: $!";
    flock($fh, LOCK_EX) or die "flock: $!";
    my $n = <$fh> // 0;
    seek($fh, 0, 0);
    truncate($fh, 0);
    print {$fh} $n + 1;
    close $fh;
    return $n + 0;
}

sub _serve {
    my ($listen, $parent, $answers, $close_after, $tls, $limit) = @_;
    $SIG{ALRM} = sub { kill 'TERM', -$$; POSIX::_exit(0) };
    $SIG{TERM} = sub { local $SIG{TERM} = 'IGNORE'; kill 'TERM', -$$; POSIX::_exit(0) };
    $SIG{PIPE} = 'IGNORE';
    $SIG{CHLD} = sub { 1 while waitpid(-1, WNOHANG) > 0 };
    POSIX::setpgid(0, 0);
    alarm $limit;
    my $sel = IO::Select->new($listen, $parent);
    while (1) {
        for my $fh ($sel->can_read(1)) {
            if ($fh == $parent) {    # the test is gone (its end of the pipe closed)
                local $SIG{TERM} = 'IGNORE';
                kill 'TERM', -$$;
                POSIX::_exit(0);
            }
            my $c = $listen->accept or next;
            my $pid = fork;
            if (defined $pid && !$pid) {
                close $listen;
                @SIG{qw(TERM ALRM CHLD)} = ('DEFAULT') x 3;
                alarm $limit;
                eval { _connection($c, $answers, $close_after, $tls) };
                POSIX::_exit(0);
            }
            close $c;
        }
    }
}

sub _connection {
    my ($c, $answers, $close_after, $tls) = @_;
    if ($tls) {
        IO::Socket::SSL->start_SSL($c, SSL_server => 1, SSL_cert_file => $tls->{cert}, SSL_key_file => $tls->{key},
            SSL_verify_mode => 0, Timeout => 5) or return;
    }
    binmode $c;
    my $buf = '';
    while (1) {
        while (defined(my $cmd = _command(\$buf))) {
            my ($name, @args) = @$cmd;
            $name = uc($name // '');
            my $a = $answers->{$name} // "+OK\r\n";
            my $reply = ref $a eq 'CODE' ? $a->(\@args, _next_seq()) : $a;
            if (open my $log, '>>', "$DIR/answered") { print {$log} "$name\n"; close $log }
            while (length $reply) {
                my $n = syswrite($c, $reply);
                return unless $n;
                substr($reply, 0, $n) = '';
            }
            return if $name eq $close_after;
        }
        my $n = sysread($c, $buf, 65536, length $buf);
        return unless $n;
    }
}

# The first complete RESP command (multibulk) in $$buf, removed: [name, args...], or undef.
sub _command {
    my ($buf) = @_;
    return undef unless $$buf =~ /^\*(\d+)\r\n/;
    my ($count, $pos) = ($1, length($&));
    my @out;
    for (1 .. $count) {
        my $e = index($$buf, "\r\n", $pos);
        return undef if $e < 0;
        my $len = substr($$buf, $pos + 1, $e - $pos - 1);
        return undef unless $len =~ /^\d+$/;
        return undef if length($$buf) < $e + 2 + $len + 2;
        push @out, substr($$buf, $e + 2, $len);
        $pos = $e + 2 + $len + 2;
    }
    substr($$buf, 0, $pos) = '';
    return \@out;
}

1;
