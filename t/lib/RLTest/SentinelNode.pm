package RLTest::SentinelNode;
# One redis-sentinel process of a test (RLTest::Sentinel starts them: the Sentinels of a set
# and its extra ones): on a free loopback port, in its own directory with its own
# sentinel.conf (which Sentinel rewrites) and log, monitoring one master, plain or TLS-only.
#
#   RLTest::SentinelNode->start($set, $master_port): $set (the set, or a hash like it) holds
#       name, quorum, down_after_ms, failover_timeout, password (auth-pass), sentinel_password
#       (requirepass), tls (as start_redis's, or undef); returns once it answers PING (10 s),
#       else dies
#   $node->port, addr, pid, dir, tls, log_text
#   $node->cmd(@args)     (1, reply) or (0, reason) over a kept connection, authenticated with
#                         the sentinel password
#   $node->cli(@args)     redis-cli's output
#   $node->kill_now([$sig]), $node->stop
# $REDIS_SERVER names another redis-server binary (run with --sentinel).
use strict;
use warnings;
use POSIX qw(:sys_wait_h);
use Time::HiRes qw(time sleep);
use RLTest::Util qw(free_port temp_dir slurp spew wait_until);
use RLTest::Redis;

our $SERVER = $ENV{REDIS_SERVER} || '/usr/bin/redis-server';

sub start {
    my ($class, $set, $mport) = @_;
    my $t = $set->{tls};
    my $self = bless { port => free_port(), host => '127.0.0.1', dir => temp_dir('rlsentinel'),
        password => $set->{sentinel_password}, tls => $t, creator => $$ }, $class;
    my $name = $set->{name};
    my $conf = join '', map { "$_\n" }
      ($t ? ("port 0", "tls-port $self->{port}", "tls-cert-file $t->{cert}", "tls-key-file $t->{key}",
          "tls-ca-cert-file $t->{ca}", "tls-auth-clients $t->{auth_clients}", "tls-replication yes")
        : ("port $self->{port}")),
      "bind 127.0.0.1",
      "daemonize no",
      "dir $self->{dir}",
      "logfile \"\"",
      "sentinel resolve-hostnames no",
      "sentinel announce-ip 127.0.0.1",
      "sentinel monitor $name 127.0.0.1 $mport $set->{quorum}",
      "sentinel down-after-milliseconds $name $set->{down_after_ms}",
      "sentinel failover-timeout $name $set->{failover_timeout}",
      "sentinel parallel-syncs $name 1",
      (defined $set->{password} ? ("sentinel auth-pass $name $set->{password}") : ()),
      (defined $set->{sentinel_password} ? ("requirepass $set->{sentinel_password}") : ());
    spew("$self->{dir}/sentinel.conf", $conf);
    my $pid = fork // die "fork: $!";
    if (!$pid) {
        open STDOUT, '>', "$self->{dir}/sentinel.log";
        open STDERR, '>&', \*STDOUT;
        exec $SERVER, "$self->{dir}/sentinel.conf", '--sentinel' or POSIX::_exit(127);
    }
    $self->{pid} = $pid;
    my $up = wait_until(sub {
        my ($ok, $v) = $self->cmd('PING');
        return 1 if $ok && $v eq 'PONG';
        die "redis-sentinel exited: " . slurp("$self->{dir}/sentinel.log") if waitpid($pid, WNOHANG) == $pid;
        return 0;
    }, timeout => 10, every => 0.05);
    return $self if $up;
    die "redis-sentinel did not start\n" . slurp("$self->{dir}/sentinel.log");
}

sub port { $_[0]{port} }
sub pid  { $_[0]{pid} }
sub dir  { $_[0]{dir} }
sub addr { "127.0.0.1:$_[0]{port}" }
sub tls  { $_[0]{tls} }
sub log_text { slurp("$_[0]{dir}/sentinel.log") }

# cmd, cli, kill_now and stop are RLTest::Redis's: a Sentinel holds what they use as a
# redis-server does (host, port, password, tls, pid, the kept connection, its creator); they
# authenticate with the sentinel password.
sub cmd      { return RLTest::Redis::cmd(@_) }
sub cli      { return RLTest::Redis::cli(@_) }
sub kill_now { return RLTest::Redis::kill_now(@_) }
sub stop     { return RLTest::Redis::stop(@_) }

1;
