# A decide reply is read straight from the socket as integers (issue 33, step 4); any other
# reply goes through hiredis. When both come in one read, hiredis takes the other one and hands
# the bytes after it back (issue 33, the lease zones' replies): the integer reply that follows
# is still read as integers, and both requests get what their own reply says.
# A scripted Redis holds the reply to a first check (an error) and sends it together with the
# reply to a second check, in one write.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use RLTest;
use RLTest::FakeRedis qw(start_fake_redis resp_array resp_int resp_error);
use IO::Socket::INET;
use Test::More;

# The first check's reply waits for the second's: [error, then 1 allowed check: remaining 7].
my $reply2 = resp_array(map { resp_int($_) } 1, 1000, 1, 7, 3_600_000_000, 0);
my $held;
my $f = start_fake_redis(mode => 'standalone', answers => {
    FCALL => sub {
        if (!defined $held) { $held = resp_error('ERR held back by the test'); return '' }
        my $out = $held . $reply2;
        $held = '';
        return $out;
    },
});
my $addr = $f->addr;
my $n = start_nginx(<<"EOF2", workers => 1, log_level => 'debug');
    ratelimit_redis r $addr timeout=5s;
    ratelimit_zone z key=\$arg_k requests=10 period=1h redis=r;
    server {
        listen 127.0.0.1:%%PORT%%;
        add_header X-Status \$ratelimit_status always;
        location / { ratelimit_on_error deny; ratelimit zone=z; empty_gif; }
    }
EOF2

SKIP: {
    skip 'this nginx is not built --with-debug', 6 unless `${\ nginx_bin()} -V 2>&1` =~ /--with-debug/;
    # The first request's check reaches Redis, which holds its reply.
    my $first = IO::Socket::INET->new(PeerAddr => '127.0.0.1', PeerPort => $n->port, Timeout => 10)
        or die "connect: $!";
    print {$first} "GET /?k=first HTTP/1.0\r\nHost: x\r\n\r\n";
    ok(wait_until(sub { $f->answered('FCALL') >= 1 }, timeout => 10), 'the first check reached Redis');
    # The second's check goes as another batch; its reply comes right after the first's.
    my ($st, $h) = $n->get('/?k=second');
    is($st, 200, 'the second request: admitted by its own reply');
    like($h->{ratelimit} // '', qr/;r=7;/, '... with its remaining (7)');
    local $/;
    my $resp = <$first> // '';
    like($resp, qr{^HTTP/1\.[01] 503}, 'the first request: its error reply, on_error deny');
    my $at = qr/ratelimit redis "r" at \Q$addr\E: /;
    ok($n->wait_log(qr/\[debug\][^\n]*${at}reply type 6/, 3), 'the error went through hiredis');
    my @ints = grep { /${at}6 integers/ } split /\n/, $n->error_log;
    is(scalar(@ints), 1, 'the reply after it, in the same read, was read as integers')
        or diag(join("\n", grep { /$at/ } split /\n/, $n->error_log));
}

done_testing;
