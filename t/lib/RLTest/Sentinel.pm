package RLTest::Sentinel;
# Redis Sentinel on loopback for the end-to-end tests: a master and its replicas (each an
# RLTest::Redis on a free port, own directory) and N redis-sentinel processes (redis-server
# sentinel.conf --sentinel, each on a free port in its own directory with its own
# sentinel.conf, which Sentinel rewrites), set up for fast failovers: down-after 1000 ms,
# failover-timeout 2000 ms, diskless replication without delay. Every wait is bounded; the
# Sentinels, then the Redis servers, are stopped at the end of the test file (TERM, then
# KILL after 3 s).
#
#   my $s = start_sentinel_set(master_name => 'mymaster', replicas => 1, sentinels => 3,
#             password => undef|P (requirepass and masterauth of the servers, auth-pass of the
#             Sentinels), sentinel_password => undef|P (requirepass of the Sentinels),
#             quorum => 2, down_after_ms => 1000, failover_timeout => 2000);
#     (returns once every Sentinel names the master, sees every replica and the other
#     Sentinels, and SENTINEL CKQUORUM is OK: within 20 s, else it dies)
#   $s->name                       the master name
#   $s->sentinels                  the Sentinels (RLTest::SentinelNode: port, addr, pid, dir, cmd, cli, log_text,
#                                  kill_now, stop)
#   $s->sentinel_addrs             '127.0.0.1:p1 127.0.0.1:p2 127.0.0.1:p3'
#   $s->servers                    the master and replicas (RLTest::Redis), in start order
#   $s->master_addr([$sentinel])   SENTINEL get-master-addr-by-name, asked of a Sentinel (the
#                                  first one that answers): '127.0.0.1:port', or undef
#   $s->master_addrs               what each Sentinel says ('-' for no answer), in order
#   $s->master                     the RLTest::Redis that the Sentinels name master
#   $s->replicas                   the others, live ones only
#   $s->kill_master                SIGKILL to the current master; returns (time of the kill, its addr)
#   $s->wait_switch($old_addr [, $timeout])
#                                  polls every Sentinel every 50 ms (for up to $timeout s, 15)
#                                  until they name a master other than $old_addr; returns
#                                  ($new_addr, $t_first, $t_all): the time the first Sentinel
#                                  named it and the time every live Sentinel did ($t_all undef
#                                  if they never all agreed in time); () on timeout
#   $s->wait_role_master($addr [, $timeout])  until that server says ROLE master (5 s)
#   $s->demote($addr)              REPLICAOF the master Sentinel names, sent to the server at $addr
#                                  (Sentinel converts an old master only ~10 s after a failover)
#   $s->wait_ready([$timeout])     until a failover can happen (as at the start; 20 s): false
#                                  if not in time, $s->{why} says what was missing
#   $s->cmd($sentinel, @args)      (1, reply) or (0, reason), authenticated with sentinel_password
#   $s->extra_sentinel(name => N, port => P [, quorum => 1, down_after_ms => 60000])
#                                  one more Sentinel, alone, monitoring the server at
#                                  127.0.0.1:P as master N (e.g. a replica of this set: a
#                                  Sentinel that names a replica as a master); plain or TLS as
#                                  the set; returns its Node once it answers PING (it is not
#                                  one of $s->sentinels, it is stopped with the set)
#   $s->tls                        the tls hash (undef for a plain set)
#   $s->stop                       everything (also done at the end of the test file)
#
# tls => {...} (as start_redis's; RLTest::TLS's $pki->redis_tls(...) makes one): the master and
# replicas are TLS-only (--port 0 --tls-port N, tls-replication yes: replication over TLS),
# the Sentinels too (port 0, tls-port N, tls-cert-file/tls-key-file/tls-ca-cert-file of the
# hash, tls-auth-clients as its auth_clients: no unless asked, tls-replication yes: they talk
# TLS to the servers and to each other). Every address and port above is then a TLS one, and
# the harness's own commands (cmd, cli, master_addr, wait_switch, demote, wait_ready...)
# speak TLS to the servers and the Sentinels (the server's certificate is not checked, as in
# start_redis). Without tls the set is plain, as before.
use strict;
use warnings;
use Exporter 'import';
use Time::HiRes qw(time sleep);
use RLTest::Redis;
use RLTest::SentinelNode;

our @EXPORT_OK = qw(start_sentinel_set);

my @SETS;

sub start_sentinel_set { return __PACKAGE__->start(@_) }

sub start {
    my ($class, %o) = @_;
    my $self = bless {
        name             => $o{master_name} // 'mymaster',
        nrep             => $o{replicas} // 1,
        nsent            => $o{sentinels} // 3,
        password         => $o{password},
        tls              => $o{tls} ? { auth_clients => 'no', %{ $o{tls} } } : undef,
        sentinel_password => $o{sentinel_password},
        quorum           => $o{quorum} // 2,
        down_after_ms    => $o{down_after_ms} // 1000,
        failover_timeout => $o{failover_timeout} // 2000,
        creator          => $$,
        sentinels        => [],
        servers          => [],
    }, $class;
    push @SETS, $self;
    my $pw = $self->{password};
    my $tls = $self->{tls};
    my @common = ('--repl-diskless-sync', 'yes', '--repl-diskless-sync-delay', '0', '--repl-ping-replica-period', '1',
        defined $pw ? ('--requirepass', $pw, '--masterauth', $pw) : (), $tls ? ('--tls-replication', 'yes') : ());
    my $master = RLTest::Redis->start(password => $pw, tls => $tls, args => [@common]);
    push @{ $self->{servers} }, $master;
    for (1 .. $self->{nrep}) {
        push @{ $self->{servers} },
          RLTest::Redis->start(password => $pw, tls => $tls, args => [@common, '--replicaof', '127.0.0.1', $master->port]);
    }
    for my $i (1 .. $self->{nsent}) {
        push @{ $self->{sentinels} }, RLTest::SentinelNode->start($self, $master->port);
    }
    $self->wait_ready(20) or die "RLTest::Sentinel: not ready within 20s: $self->{why}\n" . join('',
        map { "--- sentinel " . $_->addr . ":\n" . substr($_->log_text, -3000) } $self->sentinels);
    return $self;
}

sub name            { $_[0]{name} }
sub tls             { $_[0]{tls} }
sub sentinels       { @{ $_[0]{sentinels} } }
sub servers         { @{ $_[0]{servers} } }
sub sentinel_addrs  { join ' ', map { $_->addr } @{ $_[0]{sentinels} } }

sub cmd {
    my ($self, $sent, @args) = @_;
    return $sent->cmd(@args);
}

# wait_ready([$timeout]): until (for up to $timeout s, 20) every live Sentinel names the same
# master, that master says ROLE master, every other live server replicates from it (link up)
# and every Sentinel sees it as a replica that is not down, sees the other live Sentinels, and
# CKQUORUM passes: a failover can happen now. False on timeout ($s->{why} says what was missing).
sub wait_ready {
    my ($self, $timeout) = @_;
    my $deadline = time + ($timeout // 20);
    while (time < $deadline) {
        my $why = $self->_not_ready;
        if (!defined $why) { delete $self->{why}; return 1 }
        $self->{why} = $why;
        sleep 0.1;
    }
    return 0;
}

sub _not_ready {
    my ($self) = @_;
    my @sents = grep { $_->{pid} } $self->sentinels;
    my $maddr = $self->master_addr // return 'no master named';
    my $m = $self->_server_at($maddr) or return "unknown master $maddr";
    my ($okr, $role) = $m->cmd('ROLE');
    return "$maddr is not master" unless $okr && ref $role && $role->[0] eq 'master';
    my @reps = $self->replicas;
    for my $r (@reps) {
        my $info = $r->cli('INFO', 'replication');
        return "replica " . $r->addr . " link not up" unless $info =~ /master_link_status:up/ && $info =~ /master_port:${\ $m->port }\b/;
    }
    for my $s (@sents) {
        my $a = $self->master_addr($s) // '';
        return "sentinel " . $s->addr . " names '$a'" unless $a eq $maddr;
        my ($ok, $list) = $s->cmd('SENTINEL', 'REPLICAS', $self->{name});
        return "sentinel " . $s->addr . ": REPLICAS failed" unless $ok && ref $list;
        my %up = map { my %h = @$_; (($h{flags} // '') !~ /down|disconnected/ ? ("$h{ip}:$h{port}" => 1) : ()) } grep { ref } @$list;
        my @missing = grep { !$up{ $_->addr } } @reps;
        return "sentinel " . $s->addr . " does not see replica " . $missing[0]->addr if @missing;
        my ($ok2, $others) = $s->cmd('SENTINEL', 'SENTINELS', $self->{name});
        my $n = $ok2 && ref $others ? grep { my %h = @$_; ($h{flags} // '') !~ /down|disconnected/ } grep { ref } @$others : 0;
        return "sentinel " . $s->addr . " sees $n other sentinels" unless $n >= @sents - 1;
        my ($ok3, $q) = $s->cmd('SENTINEL', 'CKQUORUM', $self->{name});
        return "sentinel " . $s->addr . " CKQUORUM: " . ($q // '') unless $ok3 && ($q // '') =~ /^OK/;
    }
    return undef;
}

# SENTINEL get-master-addr-by-name of one Sentinel (or the first that answers).
sub master_addr {
    my ($self, $sent) = @_;
    for my $s ($sent ? ($sent) : grep { $_->{pid} } $self->sentinels) {
        my ($ok, $v) = $s->cmd('SENTINEL', 'GET-MASTER-ADDR-BY-NAME', $self->{name});
        return "$v->[0]:$v->[1]" if $ok && ref $v && @$v == 2;
        return undef if $sent;
    }
    return undef;
}

sub master_addrs {
    my ($self) = @_;
    return map { $_->{pid} ? $self->master_addr($_) // '-' : '-' } $self->sentinels;
}

sub _server_at {
    my ($self, $addr) = @_;
    return undef unless defined $addr;
    my ($s) = grep { $_->addr eq $addr } @{ $self->{servers} };
    return $s;
}

sub master { my ($self) = @_; return $self->_server_at($self->master_addr) }

sub replicas {
    my ($self) = @_;
    my $m = $self->master_addr // '';
    return grep { $_->pid && $_->addr ne $m } @{ $self->{servers} };
}

# SIGKILL to the master the Sentinels name; (time of the kill, its address).
sub kill_master {
    my ($self) = @_;
    my $m = $self->master or die "RLTest::Sentinel: no master named\n";
    my $addr = $m->addr;
    $m->kill_now('KILL');
    return (time, $addr);
}

sub wait_switch {
    my ($self, $old, $timeout) = @_;
    my $deadline = time + ($timeout // 15);
    my ($new, $t_first);
    while (time < $deadline) {
        my @live = grep { $_->{pid} } $self->sentinels;
        my @said = map { $self->master_addr($_) // '-' } @live;
        my @other = grep { $_ ne '-' && $_ ne $old } @said;
        if (@other) {
            $new //= $other[0];
            $t_first //= time;
            return ($new, $t_first, time) if @other == @live && !grep { $_ ne $new } @other;
        }
        sleep 0.05;
    }
    return $new ? ($new, $t_first, undef) : ();
}

# demote($addr): REPLICAOF the current master, as Sentinel itself does only some 10 s after a
# failover (the old master of a graceful failover stays a master until then).
sub demote {
    my ($self, $addr) = @_;
    my $r = $self->_server_at($addr) or die "RLTest::Sentinel: no server at $addr\n";
    my $m = $self->_server_at($self->master_addr) or die "RLTest::Sentinel: no master named\n";
    my ($ok, $v) = $r->cmd('REPLICAOF', '127.0.0.1', $m->port);
    return $ok && $v eq 'OK';
}

sub wait_role_master {
    my ($self, $addr, $timeout) = @_;
    my $r = $self->_server_at($addr) or return 0;
    my $deadline = time + ($timeout // 5);
    while (time < $deadline) {
        my ($ok, $v) = $r->cmd('ROLE');
        return 1 if $ok && ref $v && $v->[0] eq 'master';
        sleep 0.05;
    }
    return 0;
}

# A lone Sentinel monitoring 127.0.0.1:$o{port} as master $o{name}; stopped with the set.
# down_after_ms (60000) keeps it from declaring that server down (and trying a failover) while
# a test runs.
sub extra_sentinel {
    my ($self, %o) = @_;
    my $conf = { name => $o{name} // die("extra_sentinel: name\n"), quorum => $o{quorum} // 1,
        down_after_ms => $o{down_after_ms} // 60000, failover_timeout => $o{failover_timeout} // 60000,
        password => $o{password} // $self->{password}, sentinel_password => $o{sentinel_password},
        tls => $self->{tls} };
    my $node = RLTest::SentinelNode->start($conf, $o{port} // die("extra_sentinel: port\n"));
    push @{ $self->{extra} }, $node;
    return $node;
}

sub stop {
    my ($self) = @_;
    return if $self->{creator} != $$;
    $_->stop for $self->sentinels, @{ $self->{extra} || [] };
    $_->stop for $self->servers;
}

sub stop_all { $_->stop for @SETS; @SETS = (); }

1;
