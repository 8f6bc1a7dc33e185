package RLTest::RedisCluster;
# A Redis Cluster on loopback for the end-to-end tests: N primaries and R replicas per
# primary, each an RLTest::Redis in its own directory on free ports (client port and cluster
# bus port both chosen free, so no port+10000 clash), created with redis-cli --cluster create,
# with cluster-require-full-coverage no (a dead primary does not take the others down),
# replica validity factor 0, no replica migration, DEBUG allowed. Slot migrations are done by
# hand (SETSLOT IMPORTING/MIGRATING, MIGRATE, SETSLOT NODE), so they can be left half-done, or
# by redis-cli --cluster reshard; failovers by CLUSTER FAILOVER or by killing a primary. Every
# wait is bounded; the nodes are stopped at the end (TERM, then KILL after 3s).
#
#   my $c = start_redis_cluster(primaries => 3, replicas => 1, password => undef, tls => undef);
# tls => {...} (as RLTest::Redis's, e.g. $pki->redis_tls): every node TLS-only (--port 0), the
# cluster bus and replication over TLS too (tls-cluster yes, tls-replication yes; the nodes
# present their server certificate to each other, so it must allow clientAuth as RLTest::TLS's
# does); the cluster is created, resharded, migrated and asked over TLS; CLUSTER NODES and
# MOVED/ASK name the TLS ports. $c->tls is that hash (undef without TLS).
# Nodes and topology
#   $c->nodes, $c->live_nodes         every node (RLTest::Redis: port, addr, pid, restart ...)
#   $c->primaries                     live primaries owning slots, in the order of their first slot
#   $c->seeds                         '127.0.0.1:p1 127.0.0.1:p2 ...' of those primaries
#   $c->replicas_of($primary)         its replicas, as the cluster says
#   $c->id($node)                     CLUSTER MYID
#   $c->view($node)                   CLUSTER NODES parsed (id, port, flags, master_id, slots, migrating, importing)
#   $c->owner($slot [, $via])         the primary owning $slot;  $c->slot_owners: arrayref slot -> node
#   $c->slots_of($primary)            its slots
#   $c->keyslot($key)                 CLUSTER KEYSLOT;  RLTest::RedisCluster::slot_of($key): the same, locally
#   $c->owner_of_key($key)            owner(keyslot($key))
# Commands
#   $c->cli($node, @args)             one command, reply as redis-cli prints it (kept connection)
#   $c->cmd($node, @args)             (1, decoded reply) or (0, reason)
#   $c->cli_all(@args)                on every live node
#   $c->scan($pattern)                [key, primary] for every matching key on every live primary
#   $c->learn($n, $loc, $prefix, @ks) where the state of each client key went (one request each)
#   $c->dbsize($node), $c->countkeysinslot($node, $slot), $c->keys_in_slot($node, $slot)
#   $c->redirections($node)           (MOVED, ASK) replied so far (INFO errorstats)
#   $c->info($node [, $section])      CLUSTER INFO, or INFO $section
# Changes
#   $c->migrate_slot($slot, $to)                  a complete, clean migration (clients get MOVED)
#   $c->begin_migration($slot, $to, @keys)        IMPORTING/MIGRATING, then moves @keys only (ASK)
#   $c->move_keys($slot, @keys)                   moves more keys of a migration under way
#   $c->finish_migration($slot)                   moves the rest, SETSLOT NODE on every primary
#   $c->reshard($from, $to, $count)               redis-cli --cluster reshard; returns the moved slots
#   $c->manual_failover($replica [, FORCE|TAKEOVER])  CLUSTER FAILOVER, waits for the switch
#   $c->wait_synced($replica)                     replica link up, at its primary's offset
#   $c->kill_primary($primary)                    kill -9; returns the time of the kill
#   $c->wait_promoted($old_primary, $timeout)     -> (time ok, new primary): a replica took over
#   $c->revive($node)                             restarts a killed node (it rejoins)
#   $c->wait_ok($timeout)             every live node: cluster_state:ok, 16384 slots ok, same slot
#                                     map, every owner alive; returns the time it became so
#   $c->stop                          stops every node (also done at the end)
use strict;
use warnings;
use Exporter 'import';
use POSIX qw(:sys_wait_h);
use Time::HiRes qw(time sleep);
use RLTest::Util qw(free_port run_cmd);
use RLTest::Redis;

our @EXPORT_OK = qw(start_redis_cluster);

my @CLUSTERS;

sub start_redis_cluster { return __PACKAGE__->start(@_) }

# start(primaries => 3, replicas => 0, password => undef, node_timeout => 1000 (ms),
#       full_coverage => 0 (cluster-require-full-coverage), args => [extra redis-server args],
#       ports => [client ports for the first nodes, e.g. where nginx already looks])
sub start {
    my ($class, %o) = @_;
    my $np = $o{primaries} // 3;
    my $nr = $o{replicas}  // 0;
    die "a cluster needs at least 3 primaries\n" if $np < 3;
    my $tls = $o{tls} ? { auth_clients => 'no', %{ $o{tls} } } : undef;
    my $self = bless { password => $o{password}, creator => $$, nodes => [], ids => {},
        node_timeout => $o{node_timeout} // 1000, tls => $tls }, $class;
    push @CLUSTERS, $self;
    my @args = ('--cluster-enabled', 'yes', '--cluster-config-file', 'nodes.conf',
        '--cluster-node-timeout', $self->{node_timeout}, '--cluster-replica-validity-factor', '0',
        '--cluster-allow-replica-migration', 'no',
        '--cluster-require-full-coverage', ($o{full_coverage} ? 'yes' : 'no'),
        '--enable-debug-command', 'local', '--repl-diskless-sync-delay', '0', @{ $o{args} || [] });
    push @args, '--requirepass', $o{password}, '--masterauth', $o{password} if defined $o{password};
    push @args, '--tls-cluster', 'yes', '--tls-replication', 'yes' if $tls;
    my %used = map { $_ => 1 } @{ $o{ports} || [] };
    my @given = @{ $o{ports} || [] };
    my $port = sub {
        for (1 .. 50) { my $p = free_port(); next if $used{$p}++ || $p > 65535; return $p }
        die "no free port\n";
    };
    for (1 .. $np * (1 + $nr)) {
        my $p = @given ? shift @given : $port->();
        my $bus = $port->();
        push @{ $self->{nodes} }, RLTest::Redis->start(port => $p, password => $o{password}, tls => $tls,
            args => [@args, '--cluster-port', $bus]);
    }
    my @auth = defined $o{password} ? ('-a', $o{password}, '--no-auth-warning') : ();
    my ($rc, $out) = run_cmd(60, $RLTest::Redis::CLI, RLTest::Redis::cli_tls_args($tls), @auth, '--cluster', 'create',
        (map { $_->addr } @{ $self->{nodes} }), '--cluster-replicas', $nr, '--cluster-yes');
    die "redis-cli --cluster create failed (rc $rc):\n$out\n" if $rc != 0 || $out !~ /All 16384 slots covered/;
    $self->wait_ok(20);
    # every replica attached and in sync with its primary, and every node knows it
    my $deadline = time + 20;
    while (1) {
        my @p = $self->primaries;
        my $replicas = grep { $self->_role($_) eq 'slave' } $self->live_nodes;
        my $synced = grep { ($self->info($_, 'replication') =~ /master_link_status:up/) } grep { $self->_role($_) eq 'slave' } $self->live_nodes;
        my %sigs = map { _roles_of($self->view($_)) => 1 } $self->live_nodes;
        my ($sig) = keys %sigs;
        my $nrep = () = ($sig // '') =~ /<\d+/g;
        last if @p == $np && $replicas == $np * $nr && $synced == $replicas && keys %sigs == 1 && $nrep == $np * $nr;
        die "cluster: primaries/replicas not settled within 20s\n" . $self->cli($self->{nodes}[0], 'CLUSTER', 'NODES') if time > $deadline;
        sleep 0.1;
    }
    return $self;
}

# cli($node, @args): one command to one node, as redis-cli would print its reply: errors
# (MOVED, ASK, ERR ...) as their text, nil as '', arrays one element a line, CRLF as LF, no
# final newline. Commands go over a kept connection per node (fork/exec of redis-cli is too
# slow on a loaded machine); arguments starting with '-' (redis-cli options) run redis-cli.
sub cli {
    my ($self, $node, @args) = @_;
    if (@args && $args[0] =~ /^-/) {
        my @auth = defined $self->{password} ? ('-a', $self->{password}, '--no-auth-warning') : ();
        my (undef, $out) = run_cmd($RLTest::Redis::CLI_TIMEOUT, $RLTest::Redis::CLI, '-h', '127.0.0.1', '-p', $node->port,
            RLTest::Redis::cli_tls_args($self->{tls}), @auth, @args);
        $out =~ s/\n\z//;
        return $out;
    }
    my ($ok, $v) = $self->cmd($node, @args);
    return "connection failed: $v" unless $ok;
    my $out = join "\n", _flat($v);
    $out =~ s/\r\n/\n/g;
    $out =~ s/\n\z//;
    return $out;
}

# cmd($node, @args) -> (1, reply) or (0, reason): the reply decoded (status, error text,
# integer, bulk string or undef, arrayref), bounded by $RLTest::Redis::CLI_TIMEOUT; binary safe.
sub cmd {
    my ($self, $node, @args) = @_;
    my $why = 'no connection';
    for my $attempt (1, 2) {
        my $c = $self->{conns}{ $node->port };
        if (!$c || $c->{pid} != $$) {
            $c = $self->{conns}{ $node->port } = RLTest::Redis::resp_connect($node->port, $self->{password}, $node->host, $self->{tls}) or return (0, "cannot connect to " . $node->port);
        }
        my ($ok, $v) = RLTest::Redis::resp_roundtrip($c, @args);
        return (1, $v) if $ok;
        $why = $v;
        close $c->{s};
        delete $self->{conns}{ $node->port };
    }
    return (0, $why);
}

sub _flat { return map { ref $_ eq 'ARRAY' ? _flat(@$_) : $_ // '' } @_ }

sub tls { $_[0]{tls} }
sub nodes { @{ $_[0]{nodes} } }
sub live_nodes { grep { $_->{pid} } @{ $_[0]{nodes} } }
sub node_by_port { my ($self, $port) = @_; my ($n) = grep { $_->port == $port } $self->nodes; return $n }

# The node's cluster id (cached: ids do not change).
sub id {
    my ($self, $node) = @_;
    return $self->{ids}{ $node->port } //= do {
        my $id = $self->cli($node, 'CLUSTER', 'MYID');
        die "CLUSTER MYID on " . $node->port . ": $id\n" unless $id =~ /^[0-9a-f]{40}$/;
        $id;
    };
}

sub info {
    my ($self, $node, $section) = @_;
    return $self->cli($node, $section ? ('INFO', $section) : ('CLUSTER', 'INFO'));
}

# CLUSTER NODES as seen by $node (default: the first live node): a list of hashrefs
# { id, port, flags => {myself, master, slave, fail, 'fail?', ...}, master_id, slots => [[a, b], ...],
#   migrating => {slot => id}, importing => {slot => id} }.
sub view {
    my ($self, $node) = @_;
    $node //= ($self->live_nodes)[0] // die "no live node\n";
    my @v;
    for my $line (split /\n/, $self->cli($node, 'CLUSTER', 'NODES')) {
        my ($id, $addr, $flags, $master, undef, undef, undef, undef, @slots) = split ' ', $line;
        next unless defined $addr && $id =~ /^[0-9a-f]{40}$/;
        my ($port) = $addr =~ /:(\d+)@/;
        my %n = (id => $id, port => $port // 0, flags => { map { $_ => 1 } split /,/, $flags },
            master_id => ($master eq '-' ? undef : $master), slots => [], migrating => {}, importing => {});
        for my $s (@slots) {
            if ($s =~ /^\[(\d+)->-([0-9a-f]+)\]$/) { $n{migrating}{$1} = $2 }
            elsif ($s =~ /^\[(\d+)-<-([0-9a-f]+)\]$/) { $n{importing}{$1} = $2 }
            elsif ($s =~ /^(\d+)-(\d+)$/) { push @{ $n{slots} }, [$1, $2] }
            elsif ($s =~ /^(\d+)$/) { push @{ $n{slots} }, [$1, $1] }
        }
        push @v, \%n;
    }
    return @v;
}

sub _role {
    my ($self, $node) = @_;
    my ($me) = grep { $_->{flags}{myself} } $self->view($node);
    return '' unless $me;
    return $me->{flags}{master} ? 'master' : $me->{flags}{slave} ? 'slave' : '';
}

# Roles in a view: "port port<master_port ..." sorted by port.
sub _roles_of {
    my (@view) = @_;
    my %port_of = map { $_->{id} => $_->{port} } @view;
    return join ' ', map { $_->{port} . ($_->{flags}{slave} ? '<' . ($port_of{ $_->{master_id} // '' } // '?') : '') }
      sort { $a->{port} <=> $b->{port} } @view;
}

# Owner map of a view: "a-b:port a-b:port ..." sorted by slot.
sub _map_of {
    my (@view) = @_;
    my @r;
    for my $n (@view) {
        next unless $n->{flags}{master};
        push @r, [$_->[0], $_->[1], $n->{port}] for @{ $n->{slots} };
    }
    return join ' ', map { "$_->[0]-$_->[1]:$_->[2]" } sort { $a->[0] <=> $b->[0] } @r;
}

# The live primaries (owning slots), ordered by their first slot.
sub primaries {
    my ($self) = @_;
    my %live = map { $_->port => $_ } $self->live_nodes;
    my @m = grep { $_->{flags}{master} && !$_->{flags}{fail} && @{ $_->{slots} } && $live{ $_->{port} } } $self->view;
    @m = sort { $a->{slots}[0][0] <=> $b->{slots}[0][0] } @m;
    return map { $live{ $_->{port} } } @m;
}

sub seeds { join ' ', map { $_->addr } $_[0]->primaries }

# The replicas (live or not) whose primary is $primary, as the cluster says.
sub replicas_of {
    my ($self, $primary) = @_;
    my $id = $self->id($primary);
    return grep { defined } map { $self->node_by_port($_->{port}) } grep { ($_->{master_id} // '') eq $id } $self->view;
}

# The primary that owns $slot according to $via (default: the first live node).
sub owner {
    my ($self, $slot, $via) = @_;
    for my $n ($self->view($via)) {
        next unless $n->{flags}{master};
        for my $r (@{ $n->{slots} }) {
            return $self->node_by_port($n->{port}) if $slot >= $r->[0] && $slot <= $r->[1];
        }
    }
    return undef;
}

# The whole slot map at once: an arrayref, slot -> the owning node (undef if unassigned).
sub slot_owners {
    my ($self, $via) = @_;
    my @map;
    for my $n ($self->view($via)) {
        next unless $n->{flags}{master};
        my $node = $self->node_by_port($n->{port});
        @map[ $_->[0] .. $_->[1] ] = ($node) x ($_->[1] - $_->[0] + 1) for @{ $n->{slots} };
    }
    return \@map;
}

# The primary holding a key (CLUSTER KEYSLOT, then the slot map).
sub owner_of_key { my ($self, $key) = @_; return $self->owner($self->keyslot($key)) }

# All slots owned by $primary.
sub slots_of {
    my ($self, $primary) = @_;
    my ($me) = grep { $_->{port} == $primary->port } $self->view;
    return () unless $me;
    return map { $_->[0] .. $_->[1] } @{ $me->{slots} };
}

sub keyslot {
    my ($self, $key) = @_;
    my $s = $self->cli(($self->live_nodes)[0], 'CLUSTER', 'KEYSLOT', $key);
    die "CLUSTER KEYSLOT: $s\n" unless $s =~ /^\d+$/;
    return $s + 0;
}

# The slot of a key, computed here (CRC16/XMODEM of the hash tag, mod 16384).
sub slot_of {
    my ($key) = @_;
    if ($key =~ /^[^{]*\{([^}]+)\}/s) { $key = $1 }
    my $crc = 0;
    for my $c (unpack 'C*', $key) {
        $crc ^= $c << 8;
        for (1 .. 8) { $crc = $crc & 0x8000 ? (($crc << 1) ^ 0x1021) & 0xffff : ($crc << 1) & 0xffff }
    }
    return $crc % 16384;
}

# Keys matching $pattern on every live primary: list of [key, primary].
sub scan {
    my ($self, $pattern) = @_;
    my @r;
    for my $p ($self->primaries) {
        my $cursor = 0;
        do {
            my ($ok, $v) = $self->cmd($p, 'SCAN', $cursor, 'MATCH', $pattern, 'COUNT', 1000);
            die "SCAN on " . $p->port . ": " . ($ok ? $v : 'failed') . "\n" unless $ok && ref $v eq 'ARRAY';
            $cursor = $v->[0];
            push @r, map { [$_, $p] } @{ $v->[1] };
        } while ($cursor ne '0');
    }
    return @r;
}

# learn($n, $location, $key_prefix, @client_keys): one request per client key through nginx
# $n; returns { client key => { key => Redis key, slot, node } } for the keys whose single new
# state key (a key starting with $key_prefix, e.g. 'rl:{zone:') was found.
sub learn {
    my ($self, $n, $loc, $prefix, @ks) = @_;
    my %seen = map { $_->[0] => 1 } $self->scan("$prefix*");
    my %r;
    for my $k (@ks) {
        $n->get("$loc?k=$k");
        my @new = grep { !$seen{ $_->[0] } } $self->scan("$prefix*");
        $seen{ $_->[0] } = 1 for @new;
        next unless @new == 1;
        $r{$k} = { key => $new[0][0], node => $new[0][1], slot => $self->keyslot($new[0][0]) };
    }
    return \%r;
}

sub dbsize { my ($self, $node) = @_; my $n = $self->cli($node, 'DBSIZE'); return $n =~ /^\d+$/ ? $n : -1 }

sub countkeysinslot {
    my ($self, $node, $slot) = @_;
    my $n = $self->cli($node, 'CLUSTER', 'COUNTKEYSINSLOT', $slot);
    return $n =~ /^\d+$/ ? $n : -1;
}

# Waits until every live node says cluster_state:ok with all 16384 slots assigned and ok, all
# live nodes agree on the owner of every slot, and every owner is a live process.
# Returns the time it became so; dies after $timeout seconds (default 10) saying what is not.
sub wait_ok {
    my ($self, $timeout) = @_;
    my $deadline = time + ($timeout // 10);
    my %live = map { $_->port => 1 } $self->live_nodes;
    my $why;
    while (1) {
        $why = $self->_not_ok(\%live);
        return time unless defined $why;
        die "cluster not ok within ${\($timeout // 10)}s: $why\n" if time > $deadline;
        sleep 0.05;
    }
}

sub _not_ok {
    my ($self, $live) = @_;
    my $map;
    for my $n ($self->live_nodes) {
        my $info = $self->info($n);
        return "$n->{port}: " . ($info =~ /(cluster_state:\w+)/ ? $1 : $info) unless $info =~ /cluster_state:ok/;
        for my $f (qw(cluster_slots_assigned cluster_slots_ok)) {
            return "$n->{port}: $f not 16384" unless $info =~ /$f:16384\b/;
        }
        my $m = _map_of($self->view($n));
        return "$n->{port} disagrees on the slot map" if defined $map && $m ne $map;
        $map = $m;
    }
    for my $owner ($map =~ /:(\d+)/g) {
        return "slots owned by $owner, which is not running" unless $live->{$owner};
    }
    return undef;
}

sub _wait_until {
    my ($timeout, $what, $cond) = @_;
    my $deadline = time + $timeout;
    while (1) {
        return time if $cond->();
        die "cluster: $what not reached within ${timeout}s\n" if time > $deadline;
        sleep 0.02;
    }
}

# --------------------------------------------------------------------- resharding

sub _ok {
    my ($what, $out) = @_;
    die "$what: $out\n" unless $out eq 'OK';
}

# Starts moving $slot from its owner to primary $to, and moves @keys (keys of that slot) only:
# clients then get ASK for those keys and for keys that do not exist on the source.
sub begin_migration {
    my ($self, $slot, $to, @keys) = @_;
    my $from = $self->owner($slot) // die "slot $slot has no owner\n";
    die "slot $slot is already on " . $to->port . "\n" if $from->port == $to->port;
    $self->{migration}{$slot} = [$from, $to];
    _ok("SETSLOT IMPORTING", $self->cli($to, 'CLUSTER', 'SETSLOT', $slot, 'IMPORTING', $self->id($from)));
    _ok("SETSLOT MIGRATING", $self->cli($from, 'CLUSTER', 'SETSLOT', $slot, 'MIGRATING', $self->id($to)));
    $self->move_keys($slot, @keys) if @keys;
    return $from;
}

# MIGRATE the given keys of a slot under migration from its source to its target.
sub move_keys {
    my ($self, $slot, @keys) = @_;
    my ($from, $to) = @{ $self->{migration}{$slot} || die "slot $slot is not being migrated\n" };
    while (my @batch = splice @keys, 0, 100) {
        my @auth = defined $self->{password} ? ('AUTH', $self->{password}) : ();
        my $out = $self->cli($from, 'MIGRATE', '127.0.0.1', $to->port, '', 0, 5000, @auth, 'KEYS', @batch);
        die "MIGRATE: $out\n" unless $out eq 'OK' || $out eq 'NOKEY';
    }
}

# Up to 1000 keys of $slot on $node (binary safe).
sub keys_in_slot {
    my ($self, $node, $slot) = @_;
    my ($ok, $v) = $self->cmd($node, 'CLUSTER', 'GETKEYSINSLOT', $slot, 1000);
    die "CLUSTER GETKEYSINSLOT on " . $node->port . ": " . ($ok ? $v : 'failed') . "\n" unless $ok && ref $v eq 'ARRAY';
    return @$v;
}

# Moves what is left of $slot and assigns it to the target on the target, the source and every
# other primary; waits (bounded) until every primary says so (replicas follow by gossip).
sub finish_migration {
    my ($self, $slot) = @_;
    my ($from, $to) = @{ $self->{migration}{$slot} || die "slot $slot is not being migrated\n" };
    while (my @k = $self->keys_in_slot($from, $slot)) { $self->move_keys($slot, @k) }
    my $to_id = $self->id($to);
    _ok("SETSLOT NODE on the target", $self->cli($to, 'CLUSTER', 'SETSLOT', $slot, 'NODE', $to_id));
    _ok("SETSLOT NODE on the source", $self->cli($from, 'CLUSTER', 'SETSLOT', $slot, 'NODE', $to_id));
    for my $p ($self->primaries) {
        next if $p->port == $from->port || $p->port == $to->port;
        _ok("SETSLOT NODE on " . $p->port, $self->cli($p, 'CLUSTER', 'SETSLOT', $slot, 'NODE', $to_id));
    }
    delete $self->{migration}{$slot};
    _wait_until(10, "slot $slot owned by " . $to->port . " on every primary", sub {
        !grep { my $o = $self->owner($slot, $_); !$o || $o->port != $to->port } $self->primaries;
    });
    return $from;
}

# A complete migration of $slot to $to (clients get MOVED afterwards). Returns the source.
sub migrate_slot {
    my ($self, $slot, $to) = @_;
    $self->begin_migration($slot, $to);
    return $self->finish_migration($slot);
}

# redis-cli --cluster reshard, non-interactive: moves $count slots (the first ones redis-cli
# picks: the lowest of $from) with their keys from primary $from to primary $to. Returns the
# slots that changed owner; dies if redis-cli fails or the cluster is not ok afterwards.
sub reshard {
    my ($self, $from, $to, $count) = @_;
    my %before = map { $_ => 1 } $self->slots_of($from);
    my @auth = defined $self->{password} ? ('-a', $self->{password}, '--no-auth-warning') : ();
    my ($rc, $out) = run_cmd(120, $RLTest::Redis::CLI, RLTest::Redis::cli_tls_args($self->{tls}), @auth, '--cluster', 'reshard', $from->addr,
        '--cluster-from', $self->id($from), '--cluster-to', $self->id($to), '--cluster-slots', $count,
        '--cluster-yes', '--cluster-pipeline', 100);
    die "redis-cli --cluster reshard failed (rc $rc):\n" . substr($out, -2000) . "\n" if $rc != 0;
    $self->wait_ok(20);
    my %after = map { $_ => 1 } $self->slots_of($from);
    return sort { $a <=> $b } grep { !$after{$_} } keys %before;
}

# Counts of the cluster redirections a node replied: (MOVED, ASK), from INFO errorstats.
sub redirections {
    my ($self, $node) = @_;
    my $s = $self->cli($node, 'INFO', 'errorstats');
    my ($moved) = $s =~ /errorstat_MOVED:count=(\d+)/;
    my ($ask)   = $s =~ /errorstat_ASK:count=(\d+)/;
    return ($moved // 0, $ask // 0);
}

# Runs a command on every live node (e.g. ACL SETUSER, which is not propagated); returns the
# replies.
sub cli_all {
    my ($self, @args) = @_;
    return map { $self->cli($_, @args) } $self->live_nodes;
}

# ---------------------------------------------------------------------- failover

# CLUSTER FAILOVER [FORCE|TAKEOVER] on $replica; waits until it is a primary and the cluster
# is ok again. Returns the time of completion.
sub manual_failover {
    my ($self, $replica, @opt) = @_;
    $self->wait_synced($replica, 10) unless @opt;
    _ok("CLUSTER FAILOVER", $self->cli($replica, 'CLUSTER', 'FAILOVER', @opt));
    _wait_until(10, $replica->port . " promoted", sub { $self->_role($replica) eq 'master' });
    return $self->wait_ok(10);
}

# Waits until $replica's link to its primary is up, not syncing, at the primary's offset.
sub wait_synced {
    my ($self, $replica, $timeout) = @_;
    _wait_until($timeout // 10, $replica->port . " in sync with its primary", sub {
        my $r = $self->info($replica, 'replication');
        return 0 unless $r =~ /role:slave/ && $r =~ /master_link_status:up/ && $r =~ /master_sync_in_progress:0/;
        my ($mport) = $r =~ /master_port:(\d+)/;
        my ($off) = $r =~ /slave_repl_offset:(\d+)/;
        my $m = $self->node_by_port($mport // 0) or return 0;
        my ($moff) = $self->info($m, 'replication') =~ /master_repl_offset:(\d+)/;
        return defined $off && defined $moff && $off >= $moff;
    });
}

# kill -9 of a node (its id is remembered first). Returns the time of the kill.
sub kill_primary {
    my ($self, $node) = @_;
    $self->id($node);
    $self->{replicas_before}{ $node->port } = [map { $_->port } $self->replicas_of($node)];
    $node->kill_now('KILL');
    return time;
}

# Waits until a replica of the killed $old primary serves its slots and the cluster is ok.
# Returns (time when ok, the new primary).
sub wait_promoted {
    my ($self, $old, $timeout) = @_;
    my @cands = map { $self->node_by_port($_) } @{ $self->{replicas_before}{ $old->port } || [] };
    die "no replica of " . $old->port . " to promote\n" unless @cands;
    my $new;
    _wait_until($timeout // 15, "a replica of " . $old->port . " promoted", sub {
        ($new) = grep { $_->{pid} && $self->_role($_) eq 'master' } @cands;
        return $new;
    });
    my $t = $self->wait_ok($timeout // 15);
    return ($t, $new);
}

# Restarts a node that was killed: it rejoins with its nodes.conf (a former primary comes back
# as a replica of the one that replaced it).
sub revive {
    my ($self, $node) = @_;
    $node->restart;
}

# ---------------------------------------------------------------------- stopping

sub stop {
    my ($self) = @_;
    return if $self->{creator} != $$;
    close $_->{s} for values %{ $self->{conns} || {} };
    $self->{conns} = {};
    my @n = grep { $_->{pid} } @{ $self->{nodes} };
    kill 'TERM', $_->{pid} for @n;
    my $deadline = time + 3;
    while (@n && time < $deadline) {
        @n = grep { waitpid($_->{pid}, WNOHANG) == 0 or do { delete $_->{pid}; 0 } } @n;
        sleep 0.02 if @n;
    }
    for my $n (@n) {
        kill 'KILL', $n->{pid};
        waitpid $n->{pid}, 0;
        delete $n->{pid};
    }
}

# Every cluster this process started.
sub stop_all { $_->stop for @CLUSTERS; @CLUSTERS = () }

1;
