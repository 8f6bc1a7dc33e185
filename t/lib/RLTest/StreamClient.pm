package RLTest::StreamClient;
# Clients of a test's stream servers, on 127.0.0.1: TCP connections that say what happened to
# them (data, an orderly close, a reset, nothing within the time), and UDP sockets, each from a
# fresh local port (a new session for nginx). Every read is bounded in time.
#
#   tcp_talk($port, %o) -> { data, end => 'eof'|'reset'|'timeout'|'want', ms }
#       connects, sends o{send} if given, reads until the server closes ('eof'), resets
#       ('reset': ECONNRESET), o{want} bytes came ('want') or o{timeout} seconds (3) passed;
#       ms: from the connect to that end. Dies if it cannot connect.
#   tcp_open($port [, $send]) -> a connected socket (what $send says sent): a connection held
#       open by the test
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
use Time::HiRes qw(time);

our @EXPORT_OK = qw(tcp_talk tcp_open read_some udp_socket udp_recv udp_once);

sub tcp_open {
    my ($port, $send) = @_;
    my $s = IO::Socket::INET->new(PeerAddr => '127.0.0.1', PeerPort => $port, Proto => 'tcp', Timeout => 5)
      or die "connect to 127.0.0.1:$port: $!\n";
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
    my ($data, $end) = read_some($s, %o);
    close $s;
    return { data => $data, end => $end, ms => int((time - $t0) * 1000) };
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
