package RLTest::UdpBackend;
# A UDP server behind a stream server of a test (proxy_pass ... udp): it counts the datagrams
# that arrive and can answer them. One forked child (RLTest::Child) on a free loopback port.
#
#   my $u = RLTest::UdpBackend->start(replies => 1);
#       replies: how many times each datagram is sent back to where it came from (1; 0: none)
#   $u->port, $u->addr ('127.0.0.1:PORT')
#   $u->stats -> { datagrams, bytes, peers (distinct source addresses and ports: nginx's
#                  sessions, each with a socket of its own), tags => { tag => n } }
#       a datagram's tag is its text up to the first space when that is a short word
#       ([\w.:-], up to 64 bytes), '?' otherwise
#   $u->wait_for(sub { my $s = shift; ... } [, $timeout]) -> the stats that satisfied the
#       condition, or undef after $timeout seconds (5)
#   $u->settled($count [, $timeout]) -> the datagrams counted once they reached $count and
#       stayed there 0.3 s more (what a test would otherwise sleep for), or the count when
#       $timeout (5) passed
#   $u->reset, $u->replies($n), $u->stop
use strict;
use warnings;
use IO::Select;
use IO::Socket::INET;
use Time::HiRes qw(sleep);
use RLTest::Child;

our @ISA = ('RLTest::Child');

sub start {
    my ($class, %o) = @_;
    my $sock = IO::Socket::INET->new(LocalAddr => '127.0.0.1', LocalPort => 0, Proto => 'udp')
      or die "udp backend: cannot bind: $!\n";
    my $port = $sock->sockport;
    my $self = RLTest::Child::spawn($class, sub { _serve($sock, $_[0], $o{replies} // 1) }, port => $port);
    close $sock;
    $self->ask('ping');
    return $self;
}

sub settled {
    my ($self, $count, $timeout) = @_;
    my $s = $self->wait_for(sub { $_[0]{datagrams} >= $count }, $timeout);
    return $self->stats->{datagrams} unless $s;
    sleep 0.3;
    return $self->stats->{datagrams};
}

sub reset   { $_[0]->ask('reset'); return 1 }
sub replies { $_[0]->ask("replies $_[1]"); return 1 }

# ------------------------------------------------------------------ the child

sub _serve {
    my ($sock, $ctl, $replies) = @_;
    my %n = (datagrams => 0, bytes => 0);
    my (%peers, %tags);
    my $ctl_buf = '';
    my $handler = sub {
        my ($cmd, $arg) = @_;
        return 'ok' if $cmd eq 'ping';
        if ($cmd eq 'stats') {
            return join ' ', (map { "$_ $n{$_}" } sort keys %n), 'peers', scalar(keys %peers), 'tags',
              RLTest::Child::counts_text(\%tags);
        }
        if ($cmd eq 'reset') {
            $n{$_} = 0 for keys %n;
            %peers = %tags = ();
            return 'ok';
        }
        if ($cmd eq 'replies' && ($arg // '') =~ /^\d+$/) {
            $replies = $arg;
            return 'ok';
        }
        return 'unknown';
    };
    $sock->blocking(0);
    my $sel = IO::Select->new($sock, $ctl);
    while (1) {
        my @ready = $sel->can_read(1);
        # Every datagram waiting is counted before a control line is answered.
        while (defined(my $peer = recv($sock, my $buf, 65536, 0))) {
            $n{datagrams}++;
            $n{bytes} += length $buf;
            $peers{$peer}++;
            my ($word) = $buf =~ /^([^ \n]*)/;
            $tags{ $word =~ /^[\w.:-]{1,64}$/ ? $word : '?' }++;
            send($sock, $buf, 0, $peer) for 1 .. $replies;
        }
        RLTest::Child::control($ctl, \$ctl_buf, $handler) if grep { $_ == $ctl } @ready;
    }
}

1;
