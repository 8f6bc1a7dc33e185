# stream{} configurations nginx -t refuses, each naming the directive, the file and the line:
# at=datagram where no listen is udp; delay= where a server listens udp (a datagram cannot
# wait); at=datagram with what would make a datagram wait or hold (Redis per request, a lease,
# an in-flight zone, delay); a bad at=; a zone name declared in both http{} and stream{} (one
# shared memory namespace); the stream directives where they are not allowed; bad values. And
# what passes: at=datagram on a server listening tcp and udp; the stream{} level's lines and
# settings inherited by a server without its own (as limit_conn's), not by one with its own.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use RLTest;
use RLTest::StreamClient qw(tcp_outcome);
use Test::More;

my $key = 'key=$binary_remote_addr';
my $udp = 'listen 127.0.0.1:%%PORT%% udp; proxy_pass 127.0.0.1:1;';
my $tcp = 'listen 127.0.0.1:%%PORT%%; return x;';

# [name, stream body (the line to name carries the marker #HERE), what nginx -t must say]
my @bad = (
    ['at=datagram without udp', "ratelimit_zone z $key rate=1r/s;\n    server { $tcp\n        ratelimit zone=z at=datagram; #HERE\n    }",
     qr/at=datagram needs a server that listens udp \(zone "z"\) in "ratelimit" directive/],
    ['delay= on a udp server', "ratelimit_zone z $key rate=1r/s burst=5;\n    server { $udp\n        ratelimit zone=z delay=2; #HERE\n    }",
     qr/"delay" cannot be used where a server listens udp \(zone "z"\): a datagram cannot wait in "ratelimit" directive/],
    ['delay= on a server listening tcp and udp',
     "ratelimit_zone z $key rate=1r/s burst=5;\n    server { $udp listen 127.0.0.1:%%PORT1%%;\n        ratelimit zone=z delay=2; #HERE\n    }",
     qr/"delay" cannot be used where a server listens udp/],
    ['at=datagram, Redis per request',
     "ratelimit_redis r 127.0.0.1:1;\n    ratelimit_zone z $key rate=1r/s redis=r;\n    server { $udp\n        ratelimit zone=z at=datagram; #HERE\n    }",
     qr/at=datagram cannot take a zone decided in Redis per request \(zone "z"\): a datagram is decided at once, in shared memory or an optimistic sync zone in "ratelimit" directive/],
    ['at=datagram, a lease zone',
     "ratelimit_redis r 127.0.0.1:1;\n    ratelimit_zone z $key rate=1r/s redis=r sync=1s sync_mode=lease;\n    server { $udp\n        ratelimit zone=z at=datagram; #HERE\n    }",
     qr/at=datagram cannot take a lease zone \(zone "z"\)/],
    ['at=datagram, an in-flight zone', "ratelimit_zone z $key concurrency=3;\n    server { $udp\n        ratelimit zone=z at=datagram; #HERE\n    }",
     qr/at=datagram cannot take an in-flight zone \(zone "z"\)/],
    ['at=datagram, delay=', "ratelimit_zone z $key rate=1r/s burst=4;\n    server { $udp\n        ratelimit zone=z at=datagram delay=2; #HERE\n    }",
     qr/at=datagram cannot take delay \(zone "z"\)/],
    ['a bad at=', "ratelimit_zone z $key rate=1r/s;\n    server { $tcp\n        ratelimit zone=z at=connect; #HERE\n    }",
     qr/invalid at "connect", it must be "accept", "preread" or "datagram" in "ratelimit" directive/],
    ['an unknown zone', "server { $tcp\n        ratelimit zone=nope; #HERE\n    }", qr/unknown ratelimit zone "nope" in "ratelimit" directive/],
    ['ratelimit_zone in a server', "server { $tcp\n        ratelimit_zone z $key rate=1r/s; #HERE\n    }",
     qr/"ratelimit_zone" directive is not allowed here/],
    ['ratelimit_redis in a server', "server { $tcp\n        ratelimit_redis r 127.0.0.1:1; #HERE\n    }",
     qr/"ratelimit_redis" directive is not allowed here/],
    ['ratelimit_reject drop', "server { $tcp\n        ratelimit_reject drop; #HERE\n    }",
     qr/invalid value "drop", it must be one of "close", "reset" in "ratelimit_reject" directive/],
    ['ratelimit_status 200', "server { $tcp\n        ratelimit_status 200; #HERE\n    }",
     qr/value must be between 400 and 599 in "ratelimit_status" directive/],
    ['ratelimit_on_error maybe', "server { $tcp\n        ratelimit_on_error maybe; #HERE\n    }",
     qr/"ratelimit_on_error" directive/],
    ['a duplicate parameter', "ratelimit_zone z $key rate=1r/s;\n    server { $tcp\n        ratelimit zone=z at=accept at=preread; #HERE\n    }",
     qr/duplicate parameter "at=" in "ratelimit" directive/],
);

for my $case (@bad) {
    my ($name, $stream, $says) = @$case;
    my ($rc, $out, $file) = nginx_t(undef, stream => $stream);
    my $line = conf_line_of($file, '#HERE');
    isnt($rc, 0, "$name: nginx -t fails");
    like($out, qr/\[emerg\] .*$says.* in \Q$file\E:$line$/m, "$name: says so, with the file and line") or diag($out);
}

# One shared-memory namespace: a zone name in http{} and in stream{} fails, at the second.
{
    my ($rc, $out, $file) = nginx_t("    ratelimit_zone z key=\$remote_addr rate=1r/s;\n",
        stream => "ratelimit_zone z $key rate=1r/s; #HERE\n    server { $tcp ratelimit zone=z; }");
    my $line = conf_line_of($file, '#HERE');
    isnt($rc, 0, 'a zone name in http{} and stream{}: nginx -t fails');
    like($out, qr/\[emerg\] the shared memory zone "z" is already declared for a different use in \Q$file\E:$line$/m,
         '... at the stream{} zone, named') or diag($out);
    ($rc, $out, $file) = nginx_t("    ratelimit_zone z key=\$remote_addr rate=1r/s;\n",
        stream => "server { $tcp\n        ratelimit zone=z; #HERE\n    }");
    $line = conf_line_of($file, '#HERE');
    isnt($rc, 0, 'an http{} zone applied in stream{}: nginx -t fails');
    like($out, qr/\[emerg\] the shared memory zone "z" is already declared for a different use in \Q$file\E:$line$/m,
         '... at the line that applies it') or diag($out);
}

# What passes: at=datagram where a server listens tcp and udp (its datagrams are limited).
{
    my ($rc, $out) = nginx_t(undef, stream => "ratelimit_zone z $key rate=1r/s;\n    server { $udp listen 127.0.0.1:%%PORT1%%;\n"
        . "        ratelimit zone=z at=datagram; }");
    is($rc, 0, 'at=datagram on a server listening tcp and udp: nginx -t passes') or diag($out);
}

# Inherited from stream{} (lines and settings), as limit_conn: a server without lines of its
# own takes them; one with its own does not.
{
    my $n = start_nginx(undef, stream => <<"EOF");
    log_format rl '\$server_port \$status \$ratelimit_status';
    access_log %%DIR%%/stream.log rl;
    ratelimit_zone top $key rate=1r/m;
    ratelimit_zone own $key rate=1r/m burst=2;
    ratelimit zone=top;
    ratelimit_status 502;
    server { listen 127.0.0.1:%%PORT%%;  return "ok\\n"; }
    server { listen 127.0.0.1:%%PORT1%%; ratelimit zone=own; return "ok\\n"; }
EOF
    my @p = $n->ports;
    is(join(' ', map { tcp_outcome($p[0]) } 1 .. 2), 'ok closed', 'a server without lines takes stream{}\'s');
    is(join(' ', map { tcp_outcome($p[1]) } 1 .. 4), 'ok ok ok closed', 'a server with its own lines: only those');
    my @l = $n->log_lines('stream.log', qr/ 502 /, 2);
    is(scalar @l, 2, 'ratelimit_status inherited by both: $status 502');
}

done_testing;
