package RLTest::DNS;
# A small authoritative DNS server for the tests (Net::DNS::Nameserver, UDP and TCP on a free
# loopback port, in a forked child): it answers A queries for the names the test set, from a
# state file the test rewrites at any time (read again at every query), so an answer can
# change, fail or go silent while nginx runs; it counts the queries it gets. Names without an
# answer: NXDOMAIN; other types (AAAA) of a known name: NOERROR, no records; names outside
# the zones of the names set: REFUSED. The child ends with the test file (stop, or when its
# parent is gone). Needs Net::DNS (libnet-dns-perl), loaded by start_dns only.
#
#   my $d = start_dns();                      (dies if it cannot listen within 5 s)
#   $d->port, $d->addr ('127.0.0.1:port')
#   $d->set('redis.test', '127.0.0.2' | ['127.0.0.2', '127.0.0.3'], ttl => 1)
#                                             A records from now on (ttl in seconds, default 1)
#   $d->fail('redis.test' [, 'servfail' | 'timeout' | 'nxdomain' | 'refused'])
#                                             from now on the name fails: SERVFAIL (default), no
#                                             answer at all, NXDOMAIN or REFUSED
#   $d->queries(['redis.test' [, 'A']])       queries received so far (for that name; that type)
#   $d->wait_queries($name, $count [, $timeout])  until at least $count queries for $name (5 s);
#                                             returns the count reached
#   $d->lookup($name)                         asks it (Net::DNS::Resolver): the A addresses, or
#                                             the rcode / 'timeout' as a string
#   $d->stop                                  (also done at the end of the test file)
use strict;
use warnings;
use Exporter 'import';
use IO::Select;
use POSIX qw(:sys_wait_h);
use Time::HiRes qw(time sleep);
use RLTest::Util qw(free_port temp_dir slurp spew stop_child);

our @EXPORT_OK = qw(start_dns);

my @ALL;

sub start_dns { return __PACKAGE__->start(@_) }

sub start {
    my ($class, %o) = @_;
    # loaded here: the files that do not use DNS run without libnet-dns-perl
    require Net::DNS;
    require Net::DNS::Nameserver;
    my $self = bless { dir => temp_dir('rldns'), creator => $$, state => {} }, $class;
    $self->_write_state;
    spew("$self->{dir}/queries.log", '');
    for my $try (1 .. 5) {
        $self->{port} = $o{port} // free_port();
        return $self if $self->_spawn;
        die "RLTest::DNS: cannot listen on port $o{port}\n" if $o{port};
    }
    die "RLTest::DNS: cannot listen\n" . slurp("$self->{dir}/dns.log");
}

sub _spawn {
    my ($self) = @_;
    pipe(my $r, my $w) or die "pipe: $!";
    my $parent = $$;
    my $pid = fork // die "fork: $!";
    if (!$pid) {
        close $r;
        open STDOUT, '>>', "$self->{dir}/dns.log";
        open STDERR, '>&', \*STDOUT;
        $SIG{$_} = 'DEFAULT' for qw(ALRM TERM INT PIPE);
        alarm 0;
        my $ns = eval {
            Net::DNS::Nameserver->new(LocalAddr => ['127.0.0.1'], LocalPort => $self->{port},
                ReplyHandler => sub { $self->_reply(@_) }, Verbose => 0)
        };
        # both sockets or nothing: a UDP port free while its TCP twin is taken is not ours
        my $n = !$ns ? 0 : $ns->{select} ? scalar($ns->{select}->handles) : 2;
        syswrite $w, $n == 2 ? "ok\n" : "no\n";
        close $w;
        POSIX::_exit(1) unless $n == 2;
        while (getppid() == $parent) { $ns->loop_once(0.2) }
        POSIX::_exit(0);
    }
    close $w;
    my $got = '';
    my $sel = IO::Select->new($r);
    sysread($r, $got, 10) if $sel->can_read(5);
    close $r;
    if ($got eq "ok\n") {
        $self->{pid} = $pid;
        push @ALL, $self;
        return 1;
    }
    stop_child($pid, 'KILL', 1);
    return 0;
}

# In the child: one query.
sub _reply {
    my ($self, $qname, $qclass, $qtype, $peer) = @_;
    $qname = lc $qname;
    $qname =~ s/\.\z//;
    if (open my $fh, '>>', "$self->{dir}/queries.log") {
        syswrite $fh, "$qname $qtype\n";
        close $fh;
    }
    my %st;
    for my $l (split /\n/, slurp("$self->{dir}/state")) {
        my ($name, $mode, $ttl, $addrs) = split ' ', $l;
        $st{$name} = { mode => $mode, ttl => $ttl, addrs => [split /,/, $addrs // ''] };
    }
    my $e = $st{$qname};
    if (!$e) {
        my $in_zone = grep { my ($zone) = /^[^.]+\.(.+)$/; $zone && ($qname eq $zone || $qname =~ /\.\Q$zone\E\z/) } keys %st;
        return ($in_zone ? 'NXDOMAIN' : 'REFUSED', [], [], [], { aa => 1 });
    }
    return undef if $e->{mode} eq 'timeout';    # stays silent
    return ('SERVFAIL', [], [], []) if $e->{mode} eq 'servfail';
    return ('NXDOMAIN', [], [], [], { aa => 1 }) if $e->{mode} eq 'nxdomain';
    return ('REFUSED', [], [], []) if $e->{mode} eq 'refused';
    return ('NOERROR', [], [], [], { aa => 1 }) unless $qtype eq 'A' && $qclass eq 'IN';
    my @ans = map { Net::DNS::RR->new(name => $qname, type => 'A', ttl => $e->{ttl}, address => $_) } @{ $e->{addrs} };
    return ('NOERROR', \@ans, [], [], { aa => 1 });
}

sub _write_state {
    my ($self) = @_;
    my $text = join '', map {
        my $e = $self->{state}{$_};
        "$_ $e->{mode} $e->{ttl} " . join(',', @{ $e->{addrs} }) . "\n"
    } sort keys %{ $self->{state} };
    spew("$self->{dir}/state.new", $text);
    rename "$self->{dir}/state.new", "$self->{dir}/state" or die "rename: $!";
}

sub port { $_[0]{port} }
sub pid  { $_[0]{pid} }
sub addr { "127.0.0.1:$_[0]{port}" }

sub set {
    my ($self, $name, $addrs, %o) = @_;
    $self->{state}{ lc $name } = { mode => 'ok', ttl => $o{ttl} // 1, addrs => ref $addrs ? [@$addrs] : [$addrs] };
    $self->_write_state;
}

sub fail {
    my ($self, $name, $mode) = @_;
    $mode //= 'servfail';
    die "RLTest::DNS: unknown failure mode $mode\n" unless $mode =~ /^(servfail|timeout|nxdomain|refused)$/;
    my $e = $self->{state}{ lc $name } // { ttl => 1, addrs => [] };
    $self->{state}{ lc $name } = { %$e, mode => $mode };
    $self->_write_state;
}

sub queries {
    my ($self, $name, $type) = @_;
    my @l = split /\n/, slurp("$self->{dir}/queries.log");
    return scalar @l unless defined $name;
    $name = lc $name;
    return scalar grep { my ($n, $t) = split / /; $n eq $name && (!defined $type || $t eq $type) } @l;
}

sub wait_queries {
    my ($self, $name, $count, $timeout) = @_;
    my $deadline = time + ($timeout // 5);
    my $got;
    while (($got = $self->queries($name)) < $count && time < $deadline) { sleep 0.05 }
    return $got;
}

sub lookup {
    my ($self, $name) = @_;
    my $res = Net::DNS::Resolver->new(nameservers => ['127.0.0.1'], port => $self->{port}, recurse => 0,
        udp_timeout => 1, tcp_timeout => 1, retry => 1, retrans => 1, searchlist => [], defnames => 0);
    my $p = $res->send($name, 'A');
    return 'timeout' unless $p;
    return $p->header->rcode unless $p->header->rcode eq 'NOERROR';
    return map { $_->address } grep { $_->type eq 'A' } $p->answer;
}

sub stop {
    my ($self) = @_;
    return if $self->{creator} != $$ || !$self->{pid};
    stop_child(delete $self->{pid}, 'TERM', 2);
}

sub stop_all { $_->stop for @ALL; @ALL = (); }

1;
