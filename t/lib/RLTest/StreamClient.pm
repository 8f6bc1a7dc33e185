package RLTest::StreamClient;
# Clients of a test's stream servers, on 127.0.0.1: TCP connections that say what happened to
# them (data, an orderly close, a reset, nothing within the time), and UDP sockets, each from a
# fresh local port (a new session for nginx). Every read is bounded in time.
#
#   tcp_talk($port, %o) -> { data, end => 'eof'|'reset'|'timeout'|'want', ms }
#       connects, sends o{send} if given, reads until the server closes ('eof'), resets
#       ('reset': ECONNRESET), o{want} bytes came ('want') or o{timeout} seconds (3) passed;
#       ms: from the connect to that end. Dies if it cannot connect.
#   tcp_outcome($port, %o) -> what tcp_talk($port, %o) came to, in a word: the data without its
#       final newline when some came, else 'closed' (an orderly close), 'reset' or 'timeout'
#   tcp_storm(\@ports, $clients, $each, %o) -> { outcome => count }: $clients processes at once,
#       each making $each connections one after the other (tcp_outcome with %o), over @ports in
#       turn; bounded by o{deadline} seconds (30), after which what did not report is 'lost'
#   tcp_open($port [, $send]) -> a connected socket (what $send says sent): a connection held
#       open by the test; undef if it was reset before its connect was seen done
#   read_some($sock, %o) -> ($data, $end): as tcp_talk's reading, on a socket of the test
#   udp_socket($port) -> a UDP socket connected to nginx's port, from a fresh local port
#   udp_recv($sock [, $timeout]) -> the next datagram, or undef after $timeout seconds (1)
#   udp_once($port, $payload [, $timeout]) -> the reply to one datagram sent from a fresh
#       port, or undef after $timeout seconds (0: nothing awaited)
use strict;
use warnings;
use Exporter 'import';
use IO::Select;
use IO::Socket::INET;
use POSIX ();
use Time::HiRes qw(time);

our @EXPORT_OK = qw(tcp_talk tcp_outcome tcp_storm tcp_open read_some udp_socket udp_recv udp_once);

sub tcp_open {
    my ($port, $send) = @_;
    my $s = IO::Socket::INET->new(PeerAddr => '127.0.0.1', PeerPort => $port, Proto => 'tcp', Timeout => 5);
    # A reset that comes before the connect is seen done (an RST right after the accept)
    return undef if !$s && $!{ECONNRESET};
    die "connect to 127.0.0.1:$port: $!\n" unless $s;
    $s->autoflush(1);
    if (defined $send && length $send) {
        local $SIG{PIPE} = 'IGNORE';
        syswrite($s, $send);    # a connection closed meanwhile says so when it is read
    }
    return $s;
}

sub read_some {
    my ($s, %o) = @_;
    my $deadline = time + ($o{timeout} // 3);
    my $sel = IO::Select->new($s);
    my $data = '';
    while (1) {
        return ($data, 'want') if defined $o{want} && length $data >= $o{want};
        my $left = $deadline - time;
        return ($data, 'timeout') if $left <= 0 || !$sel->can_read($left);
        my $n = sysread($s, $data, 65536, length $data);
        next if !defined $n && $!{EINTR};
        return ($data, 'reset') if !defined $n && $!{ECONNRESET};
        return ($data, 'eof') if defined $n && $n == 0;
        return ($data, "error: $!") unless defined $n;
    }
}

sub tcp_talk {
    my ($port, %o) = @_;
    my $t0 = time;
    my $s = tcp_open($port, $o{send});
    return { data => '', end => 'reset', ms => int((time - $t0) * 1000) } unless $s;
    my ($data, $end) = read_some($s, %o);
    close $s;
    return { data => $data, end => $end, ms => int((time - $t0) * 1000) };
}

sub tcp_outcome {
    my ($port, %o) = @_;
    my $r = tcp_talk($port, %o);
    return $r->{data} ne '' ? ($r->{data} =~ s/\n\z//r) : $r->{end} eq 'eof' ? 'closed' : $r->{end};
}

sub tcp_storm {
    my ($ports, $clients, $each, %o) = @_;
    pipe(my $r, my $w) or die "pipe: $!";
    my @pids;
    for my $c (0 .. $clients - 1) {
        my $pid = fork // die "fork: $!";
        if (!$pid) {
            close $r;
            $SIG{ALRM} = sub { POSIX::_exit(1) };
            alarm($o{deadline} // 30);
            my $out = '';
            $out .= tcp_outcome($ports->[($c + $_) % @$ports], %o) . "\n" for 0 .. $each - 1;
            syswrite($w, $out);    # one write (under PIPE_BUF for the tests' sizes)
            POSIX::_exit(0);
        }
        push @pids, $pid;
    }
    close $w;
    my $sel = IO::Select->new($r);
    my $deadline = time + ($o{deadline} // 30) + 2;
    my $all = '';
    while (1) {
        my $left = $deadline - time;
        last if $left <= 0 || !$sel->can_read($left);
        last unless sysread($r, $all, 65536, length $all);
    }
    close $r;
    waitpid($_, 0) for @pids;
    my %count;
    $count{$_}++ for split /\n/, $all;
    my $lost = $clients * $each - scalar(split /\n/, $all);
    $count{lost} = $lost if $lost;
    return \%count;
}

sub udp_socket {
    my ($port) = @_;
    my $s = IO::Socket::INET->new(PeerAddr => '127.0.0.1', PeerPort => $port, Proto => 'udp')
      or die "udp socket to 127.0.0.1:$port: $!\n";
    return $s;
}

sub udp_recv {
    my ($s, $timeout) = @_;
    return undef unless IO::Select->new($s)->can_read($timeout // 1);
    my $buf;
    return defined recv($s, $buf, 65536, 0) ? $buf : undef;
}

sub udp_once {
    my ($port, $payload, $timeout) = @_;
    my $s = udp_socket($port);
    send($s, $payload, 0);
    my $reply = $timeout ? udp_recv($s, $timeout) : undef;
    close $s;
    return $reply;
}

1;
