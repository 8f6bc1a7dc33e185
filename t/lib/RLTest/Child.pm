package RLTest::Child;
# A counting server of a test in a forked child, asked over a control socket (one line each
# way): what RLTest::TcpBackend and RLTest::UdpBackend are made of. The child stops with the
# test file (its control socket closes, or END below), or after RLTEST_TIMEOUT + 30 seconds.
#
#   my $self = RLTest::Child::spawn($class, $serve, port => $port, %fields)
#       forks; the child runs $serve->($ctl) (it answers each line read from $ctl with one line:
#       see control); the parent gets an object of $class holding the fields, pid and ctl
#   $self->port, $self->addr ('127.0.0.1:PORT')
#   $self->ask($line)            the child's one-line answer (dies after 5 s without one)
#   $self->stats                 its answer to 'stats' ("name value ..." with 'tags' a list of
#                                counts, see counts_text) as a hash, tags => { tag => n }
#   $self->wait_for(sub { my $s = shift; ... } [, $timeout]) -> the stats that satisfied the
#                                condition, polled every 20 ms; undef after $timeout seconds (5)
#   $self->stop                  ends the child (also done at the end of the test file)
# In the child: control($ctl, \$buf, $handler) reads what came on $ctl and answers each
# complete line with $handler->(command, args...); the child exits when the test is gone.
use strict;
use warnings;
use IO::Select;
use Socket qw(AF_UNIX SOCK_STREAM PF_UNSPEC);
use POSIX ();
use Time::HiRes qw(time sleep);
use RLTest::Util qw(stop_child);

my @ALL;
my $CREATOR = $$;

sub spawn {
    my ($class, $serve, %fields) = @_;
    socketpair(my $parent, my $child, AF_UNIX, SOCK_STREAM, PF_UNSPEC) or die "socketpair: $!";
    my $pid = fork // die "fork: $!";
    if (!$pid) {
        close $parent;
        $SIG{$_} = 'DEFAULT' for qw(INT TERM);
        $SIG{PIPE} = 'IGNORE';
        $SIG{ALRM} = sub { POSIX::_exit(0) };
        alarm(($ENV{RLTEST_TIMEOUT} || 150) + 30);
        eval { $serve->($child) };
        POSIX::_exit(0);
    }
    close $child;
    $parent->autoflush(1);
    my $self = bless { %fields, pid => $pid, ctl => $parent, creator => $$ }, $class;
    push @ALL, $self;
    return $self;
}

sub ask {
    my ($self, $line) = @_;
    die ref($self) . " stopped\n" unless $self->{pid};
    my $s = $self->{ctl};
    local $SIG{PIPE} = 'IGNORE';
    print {$s} "$line\n" or die ref($self) . ": control: $!\n";
    my $sel = IO::Select->new($s);
    my $buf = '';
    my $deadline = time + 5;
    while (index($buf, "\n") < 0) {
        my $left = $deadline - time;
        die ref($self) . ": no answer to '$line'\n" if $left <= 0 || !$sel->can_read($left);
        sysread($s, $buf, 65536, length $buf) or die ref($self) . ": control closed\n";
    }
    chomp $buf;
    return $buf;
}

sub port { $_[0]{port} }
sub addr { "127.0.0.1:$_[0]{port}" }

sub stats {
    my ($self) = @_;
    my %s = split / /, $self->ask('stats');
    $s{tags} = parse_counts($s{tags});
    return \%s;
}

sub wait_for {
    my ($self, $cond, $timeout) = @_;
    my $deadline = time + ($timeout // 5);
    while (1) {
        my $s = $self->stats;
        return $s if $cond->($s);
        return undef if time > $deadline;
        sleep 0.02;
    }
}

sub stop {
    my ($self) = @_;
    local $?;    # this runs from END too: the test file's exit code stays
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

# ------------------------------------------------------------------ in the child

sub control {
    my ($ctl, $buf, $handler) = @_;
    my $n = sysread($ctl, $$buf, 4096, length $$buf);
    POSIX::_exit(0) unless $n;    # the test is gone
    while ((my $i = index($$buf, "\n")) >= 0) {
        my $line = substr($$buf, 0, $i + 1, '');
        chomp $line;
        syswrite($ctl, $handler->(split / /, $line) . "\n");
    }
}

# 'name:count,...' of a hash of counts ('-' when empty: one word on a control line), and back.
sub counts_text { my ($h) = @_; return join(',', map { "$_:$h->{$_}" } sort keys %$h) || '-' }
sub parse_counts { my ($t) = @_; return { map { split /:/, $_, 2 } grep { length && $_ ne '-' } split /,/, $t // '' } }

1;
