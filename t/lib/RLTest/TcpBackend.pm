package RLTest::TcpBackend;
# A TCP server behind a stream server of a test (proxy_pass): it counts what arrives and can
# answer. One forked child (RLTest::Child) on a free loopback port; every connection stays open
# until its peer closes it or the test closes them all.
#
#   my $b = RLTest::TcpBackend->start(greet => "hello\n", echo => 1);
#       greet: sent on each connection as soon as it is accepted; echo: what comes is sent back
#   $b->port, $b->addr ('127.0.0.1:PORT')
#   $b->stats -> { accepted, open, max (most open at once), closed, bytes (received), silent
#                  (connections closed having sent nothing), tags => { tag => n } }
#       a connection's tag is its first line (up to "\n") when it is a short word ([\w.:-],
#       up to 64 bytes), '?' otherwise: a client names its connections by sending "name\n"
#   $b->wait_for(sub { my $s = shift; ... } [, $timeout]) -> the stats that satisfied the
#       condition, or undef after $timeout seconds (5)
#   $b->reset          forgets the counts (max starts again from the connections open now)
#   $b->close_all      closes every open connection (ends what nginx proxies to it)
#   $b->stop
use strict;
use warnings;
use IO::Select;
use IO::Socket::INET;
use RLTest::Child;

our @ISA = ('RLTest::Child');

sub start {
    my ($class, %o) = @_;
    my $listen = IO::Socket::INET->new(LocalAddr => '127.0.0.1', LocalPort => 0, Proto => 'tcp',
        Listen => 1024, ReuseAddr => 1) or die "tcp backend: cannot listen: $!\n";
    my $port = $listen->sockport;
    my $self = RLTest::Child::spawn($class, sub { _serve($listen, $_[0], %o) }, port => $port);
    close $listen;
    $self->ask('ping');
    return $self;
}

sub reset     { $_[0]->ask('reset'); return 1 }
sub close_all { $_[0]->ask('close'); return 1 }

# ------------------------------------------------------------------ the child

sub _serve {
    my ($listen, $ctl, %o) = @_;
    $listen->blocking(0);
    my %n = map { $_ => 0 } qw(accepted open max closed bytes silent);
    my %tags;
    my %conn;    # fileno => { sock, head (until its first line), got, out }
    my $ctl_buf = '';
    my $close = sub {
        my ($c) = @_;
        delete $conn{ fileno $c->{sock} };
        close $c->{sock};
        $n{open}--;
        $n{closed}++;
        $n{silent}++ unless $c->{got};
    };
    my $handler = sub {
        my ($cmd) = @_;
        return 'ok' if $cmd eq 'ping';
        return join ' ', (map { "$_ $n{$_}" } sort keys %n), 'tags', RLTest::Child::counts_text(\%tags)
          if $cmd eq 'stats';
        if ($cmd eq 'reset') {
            $n{$_} = 0 for qw(accepted closed bytes silent);
            $n{max} = $n{open};
            %tags = ();
            return 'ok';
        }
        if ($cmd eq 'close') {
            $close->($_) for values %conn;
            return 'ok';
        }
        return 'unknown';
    };
    while (1) {
        my $rd = IO::Select->new($listen, $ctl, map { $_->{sock} } values %conn);
        my $wr = IO::Select->new(map { $_->{sock} } grep { length $_->{out} } values %conn);
        my ($r, $w) = IO::Select->select($rd, $wr, undef, 1);
        for my $fh (@{ $r || [] }) {
            if ($fh == $ctl) {
                RLTest::Child::control($ctl, \$ctl_buf, $handler);
                next;
            }
            if ($fh == $listen) {
                while (my $s = $listen->accept) {
                    $s->blocking(0);
                    $conn{ fileno $s } = { sock => $s, head => '', got => 0, out => $o{greet} // '' };
                    $n{accepted}++;
                    $n{open}++;
                    $n{max} = $n{open} if $n{open} > $n{max};
                }
                next;
            }
            my $c = $conn{ fileno $fh } or next;
            my $got = sysread($fh, my $buf, 65536);
            next if !defined $got && ($!{EAGAIN} || $!{EINTR});
            if (!$got) { $close->($c); next }
            $c->{got} += $got;
            $n{bytes} += $got;
            $c->{out} .= $buf if $o{echo};
            next if defined $c->{tag};
            $c->{head} .= substr($buf, 0, 256);
            my $i = index($c->{head}, "\n");
            next if $i < 0 && length $c->{head} < 256;
            my $line = $i < 0 ? $c->{head} : substr($c->{head}, 0, $i);
            $c->{tag} = $line =~ /^[\w.:-]{1,64}$/ ? $line : '?';
            $tags{ $c->{tag} }++;
        }
        for my $fh (@{ $w || [] }) {
            my $c = $conn{ fileno $fh } or next;
            my $sent = syswrite($fh, $c->{out});
            if (!defined $sent) { $close->($c) unless $!{EAGAIN} || $!{EINTR}; next }
            substr($c->{out}, 0, $sent) = '';
        }
    }
}

1;
