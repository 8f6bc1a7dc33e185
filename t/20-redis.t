# Redis state: decisions and headers as with shared memory, the key layout, TTLs, prefix,
# database, password and ACL user, mixed shared-memory and Redis limits (all or nothing).
# runs alone: it measures time (2 a second, Retry-After)
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use RLTest;
use Test::More;
use File::Temp ();
use Time::HiRes qw(time sleep);

my $redis = start_redis(args => ['--requirepass', 's3cret-pw', '--databases', '4'], password => 's3cret-pw');
$redis->cli('ACL', 'SETUSER', 'limiter', 'on', '>limiter-pw', '~*', '+@all');
# A user that may not load Functions (as on a Redis before 7): the checks run as a script.
$redis->cli('ACL', 'SETUSER', 'nofn', 'on', '>nofn-pw', '~*', '+@all', '-function');
my $rp = $redis->port;
my @algos = qw(gcra token leaky fixed sliding log);
avoid_window_edge(3600, 10);

my ($zones, $locs) = ('', '');
for my $a (@algos) {
    my $burst = $a =~ /^(gcra|token|leaky)$/ ? ' burst=2' : '';
    $zones .= "    ratelimit_zone z_$a key=\$arg_k requests=3 period=1h$burst algo=$a redis=main;\n";
    $locs  .= "        location /$a { ratelimit zone=z_$a; empty_gif; }\n";
}

my $n = start_nginx(<<"EOF2");
    # (timeout=2s: a loaded machine must not time a call out, which ratelimit_on_error allow admits)
    ratelimit_redis main 127.0.0.1:$rp password=s3cret-pw database=2 prefix=t20: timeout=2s;
    ratelimit_redis acl  127.0.0.1:$rp username=limiter password=limiter-pw timeout=2s;
    ratelimit_redis nofn 127.0.0.1:$rp username=nofn password=nofn-pw timeout=2s;
$zones
    ratelimit_zone viaacl key=\$arg_k requests=1 period=1h redis=acl;
    ratelimit_zone vianofn key=\$arg_k requests=2 period=1h algo=fixed redis=nofn;
    ratelimit_zone fast   key=\$arg_k rate=2r/s redis=main;
    ratelimit_zone big    key=\$arg_k requests=5 period=1h burst=4 redis=main;
    ratelimit_zone local1 key=\$arg_k requests=1 period=1h;
    ratelimit_zone local3 key=\$arg_k requests=3 period=1h burst=2;
    server {
        listen 127.0.0.1:%%PORT%%;
        add_header X-Status \$ratelimit_status always;
        add_header X-Zone \$ratelimit_zone always;
$locs
        location /acl   { ratelimit zone=viaacl; empty_gif; }
        location /nofn  { ratelimit zone=vianofn; empty_gif; }
        location /fast  { ratelimit zone=fast; empty_gif; }
        location /cost  { ratelimit zone=big quantity=\$arg_q; empty_gif; }
        # A shared-memory limit that rejects: Redis is not asked, nothing consumed there.
        location /shm_rejects   { ratelimit zone=local1; ratelimit zone=big; empty_gif; }
        # Redis rejects after shared memory admitted: shared memory gets its unit back.
        location /redis_rejects { ratelimit zone=local3; ratelimit zone=big quantity=\$arg_q; empty_gif; }
        location /local3        { ratelimit zone=local3 quantity=0; empty_gif; }
    }
EOF2

sub seq_of {
    my ($path, $count) = @_;
    my (@st, @r);
    for (1 .. $count) {
        my ($st, $h) = $n->get($path);
        push @st, $st // 'ERR';
        my ($item) = parse_sf_list($h->{ratelimit});
        push @r, $item ? $item->{r} : '-';
    }
    return (join(' ', @st), join(' ', @r));
}

sub rcli { $redis->cli('-n', 2, @_) }

# Every algorithm decides in Redis as it does in shared memory.
for my $a (@algos) {
    my ($st, $r) = seq_of("/$a?k=one", 4);
    is($st, '200 200 200 429', "$a in Redis: 3 admitted, the 4th rejected");
    is($r, '2 1 0 0', "$a in Redis: remaining 2 1 0 0");
    my (undef, $h) = $n->get("/$a?k=one");
    like($h->{'retry-after'} // '', qr/^\d+$/, "$a in Redis: Retry-After on rejection");
    my $max = $a eq 'sliding' ? 7200 : 3600;  # the sliding counter may wait for the next window to pass
    ok($h->{'retry-after'} >= 1 && $h->{'retry-after'} <= $max, "$a: Retry-After within the period")
      or diag("Retry-After $h->{'retry-after'}");
    is($h->{'x-status'}, 'REJECTED', "$a: \$ratelimit_status REJECTED");
}

# The state is in Redis, in database 2, under the prefix, laid out with a hash tag.
{
    my @keys = grep { length } split /\n/, rcli('--scan', '--pattern', 't20:*');
    my @gcra = grep { /^t20:\{z_gcra:[0-9a-f]{32}\}:gcra$/ } @keys;
    is(scalar @gcra, 1, 'gcra state key: prefix{zone:hash}:algo') or diag("@keys");
    ok(scalar(grep { /^t20:\{z_log:[0-9a-f]{32}\}:log$/ } @keys) == 1, 'the log has its own key');
    is(rcli('TYPE', grep { /:log$/ } @keys), 'list', 'the log is a list');
    my $ttl = rcli('PTTL', $gcra[0]);
    # 3 units of 20 minutes each: full again in an hour.
    ok($ttl > 3600 * 1000 - 60000 && $ttl <= 3600 * 1000 + 2, "gcra key expires when the bucket is full again (PTTL $ttl)");
    my $ttl_log = rcli('PTTL', grep { /:log$/ } @keys);
    ok($ttl_log > 3600 * 1000 - 60000 && $ttl_log <= 3600 * 1000 + 2, "log key expires one period after its newest entry ($ttl_log)");
    is($redis->cli('-n', 0, 'DBSIZE'), '0', 'nothing written to database 0');
}

# A second ratelimit_redis authenticating as an ACL user, default prefix "rl:".
{
    my ($st) = seq_of('/acl?k=u', 2);
    is($st, '200 429', 'ACL user: limits apply');
    my @keys = grep { length } split /\n/, $redis->cli('-n', 0, '--scan', '--pattern', 'rl:*');
    is(scalar @keys, 1, 'default prefix rl: in database 0') or diag("@keys");
}

# Timing: 2r/s, Retry-After honoured.
{
    my ($st) = seq_of('/fast?k=t', 2);
    is($st, '200 429', '2r/s: one admitted at once');
    sleep 0.55;
    ($st) = seq_of('/fast?k=t', 2);
    is($st, '200 429', '2r/s: the next admitted 0.5s later');
}

# Costs: quantity from a variable.
{
    my ($st, $r) = seq_of('/cost?k=c&q=3', 1);
    is("$st $r", '200 2', 'quantity=3 consumes 3 of 5');
    ($st, $r) = seq_of('/cost?k=c&q=3', 1);
    is("$st $r", '429 2', 'quantity=3 rejected with 2 left, nothing consumed');
    ($st, $r) = seq_of('/cost?k=c&q=0', 1);
    is("$st $r", '200 2', 'quantity=0 only reports');
    ($st, $r) = seq_of('/cost?k=c&q=2', 1);
    is("$st $r", '200 0', 'quantity=2 takes the rest');
}

# All or nothing across shared memory and Redis.
{
    my ($st) = seq_of('/shm_rejects?k=m', 2);
    is($st, '200 429', 'shm limit of 1: second rejected');
    my ($s, $h) = $n->get('/cost?k=m&q=0');
    my ($item) = parse_sf_list($h->{ratelimit});
    is($item->{r}, 4, 'the rejected request consumed nothing in Redis (5 - 1 = 4 left)');

    ($st) = seq_of('/redis_rejects?k=x&q=5', 1);
    is($st, '200', 'both admit: shm 1 of 3, Redis 5 of 5');
    ($s, $h) = $n->get('/redis_rejects?k=x&q=1');
    is($s, 429, 'Redis rejects');
    is($h->{'x-zone'}, 'big', '... $ratelimit_zone names the Redis zone');
    ($s, $h) = $n->get('/local3?k=x');
    ($item) = parse_sf_list($h->{ratelimit});
    is($item->{r}, 2, 'shared memory got back the unit of the request Redis rejected');
}

# A Redis on a unix socket.
{
    my $dir = File::Temp::tempdir('rlsock-XXXXXX', TMPDIR => 1, CLEANUP => 1);
    chmod 0777, $dir;
    my $sock = "$dir/redis.sock";
    my $ux = start_redis(args => ['--unixsocket', $sock, '--unixsocketperm', '777']);
    my $u = start_nginx(<<"EOF3");
    ratelimit_redis ux unix:$sock timeout=2s;
    ratelimit_zone uz key=\$arg_k requests=2 period=1h burst=1 redis=ux;
    server {
        listen 127.0.0.1:%%PORT%%;
        add_header X-Status \$ratelimit_status always;
        location / { ratelimit zone=uz; empty_gif; }
    }
EOF3
    my @s = map { my ($st, $h) = $u->get('/?k=s'); "$st $h->{'x-status'}" } 1 .. 3;
    is("@s", '200 PASSED 200 PASSED 429 REJECTED', 'unix socket: limits decided in Redis');
    is(scalar(grep { /^rl:\{uz:/ } $ux->keys_matching('*')), 1, 'unix socket: the state is in that Redis');
    $u->stop;
}

# The checks run as a Redis Function (FCALL); where FUNCTION LOAD is refused, as a script.
{
    my %calls = commandstats($redis);
    ok(($calls{fcall} // 0) > 0, "checks are FCALLs ($calls{fcall} calls)");
    my @s = map { my ($st, $h) = $n->get('/nofn?k=f'); "$st $h->{'x-status'}" } 1 .. 3;
    is("@s", '200 PASSED 200 PASSED 429 REJECTED', 'no FUNCTION allowed: decided by the script');
    my %after = commandstats($redis);
    ok(($after{evalsha} // 0) > ($calls{evalsha} // 0), 'no FUNCTION allowed: the checks are EVALSHAs');
}

# A reload: old workers close their Redis connections and exit cleanly; the state stays.
{
    $n->reload;
    my ($st, $r) = seq_of('/gcra?k=one', 1);
    is("$st $r", '429 0', 'after a reload the Redis state is still there');
    unlike($n->error_log, qr/open socket|aborting/, 'exiting workers left no Redis socket open');
}

my @bad = grep { /\[(error|crit|alert|emerg)\]/ && !/limiting request/ } split /\n/, $n->error_log;
is(scalar @bad, 0, 'no errors in the log') or diag(join "\n", @bad);
unlike($n->error_log, qr/s3cret-pw|limiter-pw/, 'passwords never appear in the log');

# Calls per command, from INFO commandstats.
sub commandstats {
    my ($r) = @_;
    my %calls;
    my $info = $r->cli('INFO', 'commandstats');
    $calls{$1} = $2 while $info =~ /cmdstat_(\w+):calls=(\d+)/g;
    return %calls;
}

done_testing;
