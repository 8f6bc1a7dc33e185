package RLTest::KeepAlive;
# One keep-alive HTTP/1.1 connection to 127.0.0.1:
#   my $c = RLTest::KeepAlive->new($port);   (or $nginx->keepalive)
#   $c->get($path, \%headers [, $method]) -> (status, \%headers, body); a connection the
#                                   server closed is opened again once, then undef status
#   $c->close
use strict;
use warnings;
use IO::Select;
use IO::Socket::INET;
use Time::HiRes qw(time);
use RLTest::Http ();

sub new {
    my ($class, $port) = @_;
    my $self = bless { port => $port, buf => '' }, $class;
    return $self;
}

sub _connect {
    my ($self) = @_;
    $self->{sock} = IO::Socket::INET->new(PeerAddr => '127.0.0.1', PeerPort => $self->{port},
        Proto => 'tcp', Timeout => $RLTest::Http::TIMEOUT);
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
    my $deadline = time + $RLTest::Http::TIMEOUT;
    my $s = $self->{sock};
    local $SIG{PIPE} = 'IGNORE';
    print {$s} RLTest::Http::request_text($method, $path, $hdrs, 1) or return (undef);
    my $i;
    while (($i = index($self->{buf}, "\r\n\r\n")) < 0) {
        return (undef) unless $self->_fill($deadline);
    }
    my ($status, $h) = RLTest::Http::parse_head(substr($self->{buf}, 0, $i));
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
        $body = RLTest::Http::dechunk($self->{buf});
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

1;
