# nginx -t refuses bad configurations with a clear message naming the file and line.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use RLTest;
use Test::More;

# Each case: [name, http body with the offending line marked "# BAD", expected message regex]
my $ok_zone = 'ratelimit_zone z key=$arg_k rate=1r/s;';
my @cases = (
    ['unknown zone', <<'C', qr/unknown ratelimit zone "nope"/],
    ratelimit_zone z key=$arg_k rate=1r/s;
    server { listen 127.0.0.1:%%PORT%%;
        location / {
            ratelimit zone=nope;   # BAD
            empty_gif;
        }
    }
C
    ['bad rate unit', <<'C', qr/invalid rate "[^"]*10r\/x"/],
    ratelimit_zone z key=$arg_k rate=10r/x;   # BAD
C
    ['bad rate text', <<'C', qr/invalid rate "[^"]*abc"/],
    ratelimit_zone z key=$arg_k rate=abc;   # BAD
C
    ['zero rate', <<'C', qr/invalid rate "[^"]*0r\/s"/],
    ratelimit_zone z key=$arg_k rate=0r/s;   # BAD
C
    ['no rate', <<'C', qr/"rate" or "requests" and "period" are required/],
    ratelimit_zone z key=$arg_k burst=3;   # BAD
C
    ['requests without period', <<'C', qr/"rate" or "requests" and "period" are required/],
    ratelimit_zone z key=$arg_k requests=5;   # BAD
C
    ['period without requests', <<'C', qr/"rate" or "requests" and "period" are required/],
    ratelimit_zone z key=$arg_k period=1m;   # BAD
C
    ['missing key', <<'C', qr/"key" is required/],
    ratelimit_zone z rate=1r/s;   # BAD
C
    ['burst with zone algo=fixed', <<'C', qr/"burst" is not supported by the "fixed" algorithm/],
    ratelimit_zone z key=$arg_k requests=5 period=1m algo=fixed burst=5;   # BAD
C
    ['burst with zone algo=sliding', <<'C', qr/"burst" is not supported by the "sliding" algorithm/],
    ratelimit_zone z key=$arg_k requests=5 period=1m algo=sliding burst=1;   # BAD
C
    ['burst with zone algo=log', <<'C', qr/"burst" is not supported by the "log" algorithm/],
    ratelimit_zone z key=$arg_k requests=5 period=1m algo=log burst=2;   # BAD
C
    ['ratelimit burst in a sliding location', <<'C', qr/"burst" is not supported by the "sliding" algorithm/],
    ratelimit_zone z key=$arg_k requests=5 period=1m;
    server { listen 127.0.0.1:%%PORT%%;
        location / {
            ratelimit_algo sliding;
            ratelimit zone=z burst=5;   # BAD
            empty_gif;
        }
    }
C
    ['ratelimit burst, algo fixed set after it at server level', <<'C', qr/"burst" is not supported by the "fixed" algorithm/],
    ratelimit_zone z key=$arg_k requests=5 period=1m;
    server { listen 127.0.0.1:%%PORT%%;
        location / {
            ratelimit zone=z burst=5;   # BAD
            empty_gif;
        }
        ratelimit_algo fixed;
    }
C
    ['ratelimit_status 399', <<'C', qr/value must be between 400 and 599/],
    ratelimit_status 399;   # BAD
C
    ['ratelimit_status 600', <<'C', qr/value must be between 400 and 599/],
    server { listen 127.0.0.1:%%PORT%%;
        ratelimit_status 600;   # BAD
    }
C
    ['duplicate zone', <<'C', qr/duplicate zone "z"/],
    ratelimit_zone z key=$arg_k rate=1r/s;
    ratelimit_zone z key=$arg_k rate=2r/s;   # BAD
C
    ['unknown ratelimit_algo', <<'C', qr/invalid algorithm "foo"/],
    ratelimit_algo foo;   # BAD
C
    ['unknown zone algo', <<'C', qr/invalid algorithm "foo"/],
    ratelimit_zone z key=$arg_k rate=1r/s algo=foo;   # BAD
C
    ['log too big for the zone', <<'C', qr/is too small for the sliding log/],
    ratelimit_zone z key=$arg_k requests=1000000 period=1h size=32k algo=log;   # BAD
C
    ['log too big for the zone via ratelimit_algo', <<'C', qr/is too small for the sliding log/],
    ratelimit_zone z key=$arg_k requests=1000000 period=1h size=32k;
    server { listen 127.0.0.1:%%PORT%%;
        location / {
            ratelimit_algo log;
            ratelimit zone=z;   # BAD
            empty_gif;
        }
    }
C
    ['same zone twice at one level', <<'C', qr/zone "z" is already applied here/],
    ratelimit_zone z key=$arg_k rate=1r/s;
    server { listen 127.0.0.1:%%PORT%%;
        location / {
            ratelimit zone=z;
            ratelimit zone=z quantity=2;   # BAD
            empty_gif;
        }
    }
C
    ['invalid zone name', <<'C', qr/invalid zone name "a\{b\}"/],
    ratelimit_zone "a{b}" key=$arg_k rate=1r/s;   # BAD
C
    ['burst too large for the rate', <<'C', qr/burst is too large for this rate in ratelimit zone "z"/],
    ratelimit_zone z key=$arg_k rate=7r/d;
    server { listen 127.0.0.1:%%PORT%%;
        location / {
            ratelimit zone=z burst=1000000;   # BAD
            empty_gif;
        }
    }
C
    ['unknown zone parameter', <<'C', qr/invalid parameter "foo=bar"/],
    ratelimit_zone z key=$arg_k rate=1r/s foo=bar;   # BAD
C
    ['unknown ratelimit parameter', <<'C', qr/invalid parameter "bogus=1"/],
    ratelimit_zone z key=$arg_k rate=1r/s;
    ratelimit zone=z bogus=1;   # BAD
C
    # Beyond the list in the specification: must fail, message not pinned.
    ['ratelimit without zone', <<'C', qr/zone/],
    ratelimit_zone z key=$arg_k rate=1r/s;
    ratelimit burst=2;   # BAD
C
    ['zone smaller than 32k', <<'C', qr/small|size/],
    ratelimit_zone z key=$arg_k rate=1r/s size=8k;   # BAD
C
    ['bad ratelimit_headers', <<'C', qr/invalid value "sometimes"/],
    ratelimit_headers sometimes;   # BAD
C
    ['bad ratelimit_log_level', <<'C', qr/invalid value "debug"|debug/],
    ratelimit_log_level debug;   # BAD
C
    ['bad ratelimit_dry_run', <<'C', qr/invalid value "maybe"/],
    ratelimit_dry_run maybe;   # BAD
C
    ['bad quantity', <<'C', qr/invalid quantity|quantity/],
    ratelimit_zone z key=$arg_k rate=1r/s;
    ratelimit zone=z quantity=-1;   # BAD
C
    ['bad burst', <<'C', qr/invalid burst|burst/],
    ratelimit_zone z key=$arg_k rate=1r/s burst=x;   # BAD
C
    # A parameter given twice is refused, never one value silently dropped.
    ['zone= twice', <<'C', qr/duplicate parameter "zone=" in "ratelimit" directive/],
    ratelimit_zone z key=$arg_k rate=1r/s;
    ratelimit_zone y key=$arg_k rate=1r/s;
    ratelimit zone=z zone=y;   # BAD
C
    ['rate= twice', <<'C', qr/duplicate parameter "rate=" in "ratelimit_zone" directive/],
    ratelimit_zone z key=$arg_k rate=5r/s rate=500r/s;   # BAD
C
    ['key= twice', <<'C', qr/duplicate parameter "key=" in "ratelimit_zone" directive/],
    ratelimit_zone z key=$arg_k rate=5r/s key=$remote_addr;   # BAD
C
    ['algo= twice', <<'C', qr/duplicate parameter "algo=" in "ratelimit_zone" directive/],
    ratelimit_zone z key=$arg_k rate=5r/s algo=gcra algo=fixed;   # BAD
C
    ['zone burst= twice', <<'C', qr/duplicate parameter "burst=" in "ratelimit_zone" directive/],
    ratelimit_zone z key=$arg_k rate=5r/s burst=1 burst=2;   # BAD
C
    ['ratelimit burst= twice', <<'C', qr/duplicate parameter "burst=" in "ratelimit" directive/],
    ratelimit_zone z key=$arg_k rate=5r/s;
    ratelimit zone=z burst=1 burst=9;   # BAD
C
    ['quantity= twice', <<'C', qr/duplicate parameter "quantity=" in "ratelimit" directive/],
    ratelimit_zone z key=$arg_k rate=5r/s;
    ratelimit zone=z quantity=1 quantity=$arg_q;   # BAD
C
    ['ratelimit_redis timeout= twice', <<'C', qr/duplicate parameter "timeout=" in "ratelimit_redis" directive/],
    ratelimit_redis r 127.0.0.1:6379 timeout=10ms timeout=1s;   # BAD
C
    ['ratelimit_redis password= twice', <<'C', qr/duplicate parameter "password=" in "ratelimit_redis" directive(?!.*secret-[ab])/s],
    ratelimit_redis r 127.0.0.1:6379 password=secret-a password=secret-b;   # BAD
C
    ['ratelimit_redis cluster after an address', <<'C', qr/"cluster" must come right after the name, and only one of "cluster" and "sentinel=" in "ratelimit_redis" directive/],
    ratelimit_redis r sentinel=m 127.0.0.1:26379 cluster;   # BAD
C
    ['ratelimit_redis cluster and sentinel=', <<'C', qr/"sentinel=m" must come right after the name/],
    ratelimit_redis r cluster 127.0.0.1:6379 sentinel=m;   # BAD
C
    ['ratelimit_redis sentinel_password without sentinel=', <<'C', qr/"sentinel_username" and "sentinel_password" need "sentinel=MASTER_NAME" in "ratelimit_redis" directive(?!.*s3cr3t)/s],
    ratelimit_redis r 127.0.0.1:6379 sentinel_password=s3cr3t;   # BAD
C
    ['ratelimit_redis resolve without a resolver', <<'C', qr/"resolve" needs a "resolver" in http\{\} in "ratelimit_redis" directive/],
    ratelimit_redis r redis.invalid:6379 resolve;   # BAD
C
    # Shaping (delay=, max_delay=): bucket algorithms only, checked where the algorithm is known.
    ['delay with zone algo=fixed', <<'C', qr/"delay" is not supported by the "fixed" algorithm \(zone "z"\)/],
    ratelimit_zone z key=$arg_k requests=5 period=1m algo=fixed;
    server { listen 127.0.0.1:%%PORT%%;
        location / {
            ratelimit zone=z delay=2;   # BAD
            empty_gif;
        }
    }
C
    ['delay in a sliding location', <<'C', qr/"delay" is not supported by the "sliding" algorithm/],
    ratelimit_zone z key=$arg_k requests=5 period=1m;
    server { listen 127.0.0.1:%%PORT%%;
        location / {
            ratelimit_algo sliding;
            ratelimit zone=z delay=0;   # BAD
            empty_gif;
        }
    }
C
    ['delay, algo log set after it at server level', <<'C', qr/"delay" is not supported by the "log" algorithm/],
    ratelimit_zone z key=$arg_k requests=5 period=1m;
    server { listen 127.0.0.1:%%PORT%%;
        location / {
            ratelimit zone=z delay=1 max_delay=1s;   # BAD
            empty_gif;
        }
        ratelimit_algo log;
    }
C
    ['delay and nodelay', <<'C', qr/"delay" and "nodelay" are mutually exclusive in "ratelimit" directive/],
    ratelimit_zone z key=$arg_k rate=5r/s burst=5;
    ratelimit zone=z delay=2 nodelay;   # BAD
C
    ['max_delay without delay', <<'C', qr/"max_delay" requires "delay" in "ratelimit" directive/],
    ratelimit_zone z key=$arg_k rate=5r/s burst=5;
    ratelimit zone=z nodelay max_delay=1s;   # BAD
C
    ['bad delay', <<'C', qr/invalid delay "delay=-1"/],
    ratelimit_zone z key=$arg_k rate=5r/s burst=5;
    ratelimit zone=z delay=-1;   # BAD
C
    ['bad max_delay', <<'C', qr/invalid max_delay "max_delay=soon"/],
    ratelimit_zone z key=$arg_k rate=5r/s burst=5;
    ratelimit zone=z delay=1 max_delay=soon;   # BAD
C
    ['delay= twice', <<'C', qr/duplicate parameter "delay=" in "ratelimit" directive/],
    ratelimit_zone z key=$arg_k rate=5r/s burst=5;
    ratelimit zone=z delay=1 delay=2;   # BAD
C
    ['ratelimit_status out of range', <<'C', qr/value must be between 400 and 599 in "ratelimit_status" directive/],
    ratelimit_status 200;   # BAD
C
    # sync=TIME, sync_mode= (issue 10)
    ['sync without redis', <<'C', qr/"sync" needs "redis" in ratelimit zone "z".* in "ratelimit_zone" directive/],
    ratelimit_zone z key=$arg_k rate=10r/s sync=100ms;   # BAD
C
    ['sync below 10ms', <<'C', qr/"sync=5ms" must be from 10ms to the period of ratelimit zone "z" \(1000 ms\) in "ratelimit_zone" directive/],
    ratelimit_redis r 127.0.0.1:6379;
    ratelimit_zone z key=$arg_k requests=10 period=1s redis=r sync=5ms;   # BAD
C
    ['sync above the period', <<'C', qr/"sync=2s" must be from 10ms to the period of ratelimit zone "z" \(1000 ms\)/],
    ratelimit_redis r 127.0.0.1:6379;
    ratelimit_zone z key=$arg_k requests=10 period=1s redis=r sync=2s;   # BAD
C
    ['sync not a time', <<'C', qr/invalid sync interval "sync=soon" in "ratelimit_zone" directive/],
    ratelimit_redis r 127.0.0.1:6379;
    ratelimit_zone z key=$arg_k rate=10r/s redis=r sync=soon;   # BAD
C
    ['sync_mode unknown', <<'C', qr/invalid sync_mode "eventual", it must be "optimistic" or "lease" in "ratelimit_zone" directive/],
    ratelimit_redis r 127.0.0.1:6379;
    ratelimit_zone z key=$arg_k rate=10r/s redis=r sync=100ms sync_mode=eventual;   # BAD
C
    ['sync_mode without sync', <<'C', qr/"sync_mode" needs "sync" in ratelimit zone "z"/],
    ratelimit_redis r 127.0.0.1:6379;
    ratelimit_zone z key=$arg_k rate=10r/s redis=r sync_mode=lease;   # BAD
C
    ['sync= twice', <<'C', qr/duplicate parameter "sync=" in "ratelimit_zone" directive/],
    ratelimit_redis r 127.0.0.1:6379;
    ratelimit_zone z key=$arg_k rate=10r/s redis=r sync=100ms sync=200ms;   # BAD
C
    ['sync with zone algo=log', <<'C', qr/the "log" algorithm cannot be synced \(ratelimit zone "z"\): it keeps every request's time, not counts that hosts can add; use "sliding" in "ratelimit_zone" directive/],
    ratelimit_redis r 127.0.0.1:6379;
    ratelimit_zone z key=$arg_k requests=10 period=1s algo=log redis=r sync=100ms;   # BAD
C
    ['sync zone under ratelimit_algo log', <<'C', qr/the "log" algorithm cannot be synced \(ratelimit zone "z"\).*use "sliding" in "ratelimit" directive in \S+:\d+/],
    ratelimit_redis r 127.0.0.1:6379;
    ratelimit_zone z key=$arg_k requests=10 period=1s redis=r sync=100ms sync_mode=lease;
    server { listen 127.0.0.1:%%PORT%%;
        location / {
            ratelimit_algo log;
            ratelimit zone=z;   # BAD
            empty_gif;
        }
    }
C
    ['ratelimit_on_error unknown', <<'C', qr/invalid value "maybe", it must be one of "allow", "deny", "local" in "ratelimit_on_error" directive/],
    ratelimit_on_error maybe;   # BAD
C
    ['variable rate without default_rate', <<'C', qr/a variable "rate" requires "default_rate" in ratelimit zone "z"/],
    ratelimit_zone z key=$arg_k rate=$arg_r;   # BAD
C
    ['default_rate without a variable rate', <<'C', qr/"default_rate" is only for a variable "rate" in ratelimit zone "z"/],
    ratelimit_zone z key=$arg_k rate=5r/s default_rate=1r/s;   # BAD
C
    ['default_rate with requests and period', <<'C', qr/"default_rate" is only for a variable "rate"/],
    ratelimit_zone z key=$arg_k requests=5 period=1s default_rate=1r/s;   # BAD
C
    ['invalid default_rate', <<'C', qr/invalid default_rate "default_rate=\$arg_d"/],
    ratelimit_zone z key=$arg_k rate=$arg_r default_rate=$arg_d;   # BAD
C
    ['default_rate= twice', <<'C', qr/duplicate parameter "default_rate="/],
    ratelimit_zone z key=$arg_k rate=$arg_r default_rate=1r/s default_rate=2r/s;   # BAD
C
    ['zone algo=log with a variable rate', <<'C', qr/the "log" algorithm cannot take a variable "rate" \(its memory per key depends on the rate\)/],
    ratelimit_zone z key=$arg_k rate=$arg_r default_rate=1r/s algo=log;   # BAD
C
    ['ratelimit_algo log on a zone with a variable rate', <<'C', qr/the "log" algorithm cannot take the variable rate of zone "z" \(its memory per key depends on the rate\)/],
    ratelimit_zone z key=$arg_k rate=$arg_r default_rate=1r/s;
    server { listen 127.0.0.1:%%PORT%%;
        location / {
            ratelimit_algo log;
            ratelimit zone=z;   # BAD
            empty_gif;
        }
    }
C
    ['variable burst with zone algo=sliding', <<'C', qr/"burst" is not supported by the "sliding" algorithm/],
    ratelimit_zone z key=$arg_k rate=$arg_r default_rate=1r/s burst=$arg_b algo=sliding;   # BAD
C
    ['sync with a variable rate', <<'C', qr/"sync" cannot take a variable "rate" or "burst" in ratelimit zone "z"/],
    ratelimit_redis r 127.0.0.1:6379;
    ratelimit_zone z key=$arg_k rate=$arg_r default_rate=1r/s redis=r sync=100ms;   # BAD
C
    ['sync with a variable burst', <<'C', qr/"sync" cannot take a variable "rate" or "burst" in ratelimit zone "z"/],
    ratelimit_redis r 127.0.0.1:6379;
    ratelimit_zone z key=$arg_k rate=1r/s burst=$arg_b redis=r sync=100ms;   # BAD
C
    ['bad N/TIME rate', <<'C', qr/invalid rate "rate=10\/15x"/],
    ratelimit_zone z key=$arg_k rate=10/15x;   # BAD
C
    ['N/TIME rate above a year', <<'C', qr/invalid rate "rate=10\/367d"/],
    ratelimit_zone z key=$arg_k rate=10/367d;   # BAD
C
    ['N/TIME rate of 53 weeks', <<'C', qr/invalid rate "rate=10\/53w"/],
    ratelimit_zone z key=$arg_k rate=10/53w;   # BAD
C
    ['period of a year and two days', <<'C', qr/invalid period "period=1y2d"/],
    ratelimit_zone z key=$arg_k requests=10 period=1y2d;   # BAD
C
);

for my $c (@cases) {
    my ($name, $http, $re) = @$c;
    my ($rc, $out, $file) = nginx_t($http);
    my $line = conf_line_of($file, '# BAD');
    isnt($rc, 0, "$name: nginx -t fails");
    like($out, $re, "$name: message") or diag($out);
    like($out, qr/\Q in $file:$line\E\b/, "$name: names $file:$line") or diag($out);
    like($out, qr/"ratelimit\w*" directive/, "$name: names the directive") or diag($out);
}

# Valid edge values are accepted.
for my $good (
    ['ratelimit_status 400', "$ok_zone\n    ratelimit_status 400;"],
    ['ratelimit_status 599', "$ok_zone\n    ratelimit_status 599;"],
    ['burst with bucket algos', 'ratelimit_zone a key=$arg_k rate=1r/s burst=5 algo=token; ratelimit_zone b key=$arg_k rate=1r/s burst=5 algo=leaky;'],
    ['same zone, window algo location, no burst', 'ratelimit_zone z key=$arg_k requests=5 period=1m; server { listen 127.0.0.1:%%PORT%%; location / { ratelimit_algo sliding; ratelimit zone=z; empty_gif; } }'],
    ['sync zones, both modes, 10ms and the period', 'ratelimit_redis r 127.0.0.1:6379; ratelimit_zone a key=$arg_k requests=5 period=1s redis=r sync=10ms; ratelimit_zone b key=$arg_k requests=5 period=1s redis=r sync=1s sync_mode=lease algo=sliding; ratelimit_zone c key=$arg_k rate=5r/s burst=9 redis=r sync=100ms sync_mode=optimistic; server { listen 127.0.0.1:%%PORT%%; location / { ratelimit_algo token; ratelimit zone=a; ratelimit zone=b; ratelimit zone=c; empty_gif; } }'],
    ['delay forms', 'ratelimit_zone z key=$arg_k rate=5r/s burst=5; ratelimit_zone f key=$arg_k requests=5 period=1m algo=fixed; server { listen 127.0.0.1:%%PORT%%; location /a { ratelimit zone=z delay=0; empty_gif; } location /b { ratelimit zone=z delay=3 max_delay=500ms; empty_gif; } location /c { ratelimit zone=z nodelay; ratelimit zone=f nodelay; empty_gif; } location /d { ratelimit_algo leaky; ratelimit zone=z delay=99; empty_gif; } }'],
    ['log that fits', 'ratelimit_zone z key=$arg_k requests=1000 period=1h size=32k algo=log;'],
    ['quantity forms', "$ok_zone\n    server { listen 127.0.0.1:%%PORT%%; location /a { ratelimit zone=z quantity=0; empty_gif; } location /b { ratelimit zone=z quantity=5; empty_gif; } location /c { ratelimit zone=z quantity=\$arg_q; empty_gif; } }"],
    ['tiers', 'ratelimit_zone z key=$arg_k rate=$http_x_rate default_rate=100/15m burst=$http_x_burst; ratelimit_zone w key=$arg_k rate=${arg_n}r/m default_rate=1r/m algo=sliding;'],
    ['a static burst on the line of a tiered zone', 'ratelimit_zone z key=$arg_k rate=$arg_r default_rate=1r/s burst=$arg_b; server { listen 127.0.0.1:%%PORT%%; location / { ratelimit zone=z burst=3; empty_gif; } }'],
    ['N/TIME rates', 'ratelimit_zone a key=$arg_k rate=100/15m; ratelimit_zone b key=$arg_k rate=5/1h30m; ratelimit_zone c key=$arg_k rate=1/366d;'],
    ["nginx's time units up to a year", 'ratelimit_zone a key=$arg_k rate=1/1w; ratelimit_zone b key=$arg_k rate=1/52w; ratelimit_zone c key=$arg_k rate=1/1M; ratelimit_zone d key=$arg_k rate=1/1y; ratelimit_zone e key=$arg_k requests=3 period=1y1d; ratelimit_zone f key=$arg_k rate=1/1M2w3d;'],
) {
    my ($rc, $out) = nginx_t($good->[1]);
    is($rc, 0, "$good->[0]: accepted") or diag($out);
}

# ---------------------------------------------------------- concurrency zones (issue 19)
# What nginx -t refuses in a zone with concurrency= and on `ratelimit zone=` of such a zone;
# the messages are matched loosely (the spec's wording, where it gives one).
{
    my $R = 'ratelimit_redis r 127.0.0.1:6379;';
    # A value out of range: the message names the parameter, and is not the "invalid parameter"
    # of a parameter the directive does not know.
    my $value_re = sub { my ($p) = @_; return qr/\[emerg\] (?!invalid parameter)[^\n]*\b$p\b/ };
    my $loc = sub {    # a location applying zone c with the given parameters, marked BAD
        my ($params) = @_;
        return <<"C";
    ratelimit_zone c key=\$arg_k concurrency=5;
    server { listen 127.0.0.1:%%PORT%%;
        location / {
            ratelimit zone=c $params;   # BAD
            empty_gif;
        }
    }
C
    };
    my @conc = (
        (map { my ($p, $name) = @$_;
               ["concurrency with $p", "    $R\n    ratelimit_zone c key=\$arg_k concurrency=5 $p;   # BAD\n",
                qr/"$name" cannot be combined with "concurrency" in ratelimit zone "c"/] }
           ['rate=1r/s', 'rate'], ['default_rate=1r/s', 'default_rate'], ['requests=5', 'requests'],
           ['period=1m', 'period'], ['burst=3', 'burst'], ['algo=gcra', 'algo'],
           ['requests=5 period=1m', '(?:requests|period)']),
        ['concurrency with rate, rate first', "    ratelimit_zone c key=\$arg_k rate=1r/s concurrency=5;   # BAD\n",
         qr/"rate" cannot be combined with "concurrency" in ratelimit zone "c"/],
        ['concurrency with sync', "    $R\n    ratelimit_zone c key=\$arg_k concurrency=5 redis=r sync=100ms;   # BAD\n",
         qr/"sync" cannot be used with "concurrency" in ratelimit zone "c"/],
        ['concurrency with sync_mode', "    $R\n    ratelimit_zone c key=\$arg_k concurrency=5 redis=r sync_mode=lease;   # BAD\n",
         qr/"sync(?:_mode)?" cannot be used with "concurrency" in ratelimit zone "c"/],
        ['hold without redis', "    ratelimit_zone c key=\$arg_k concurrency=5 hold=10s;   # BAD\n",
         qr/"hold" needs "redis" in ratelimit zone "c"/],
        ['default_concurrency with a static concurrency', "    ratelimit_zone c key=\$arg_k concurrency=5 default_concurrency=3;   # BAD\n",
         qr/"default_concurrency"/],
        ['concurrency=$var without default_concurrency', "    ratelimit_zone c key=\$arg_k concurrency=\$arg_n;   # BAD\n",
         qr/"default_concurrency"/],
        ['concurrency=0', "    ratelimit_zone c key=\$arg_k concurrency=0;   # BAD\n", $value_re->('concurrency')],
        ['concurrency=1000001', "    ratelimit_zone c key=\$arg_k concurrency=1000001;   # BAD\n", $value_re->('concurrency')],
        ['concurrency=abc', "    ratelimit_zone c key=\$arg_k concurrency=abc;   # BAD\n", $value_re->('concurrency')],
        ['default_concurrency=0', "    ratelimit_zone c key=\$arg_k concurrency=\$arg_n default_concurrency=0;   # BAD\n",
         $value_re->('default_concurrency')],
        ['hold=500ms', "    $R\n    ratelimit_zone c key=\$arg_k concurrency=5 redis=r hold=500ms;   # BAD\n", $value_re->('hold')],
        ['hold=2d', "    $R\n    ratelimit_zone c key=\$arg_k concurrency=5 redis=r hold=2d;   # BAD\n", $value_re->('hold')],
        (map { my ($p, $name) = @$_;
               ["ratelimit zone=c $p", $loc->($p), qr/"$name" has no meaning for the concurrency zone "c"/] }
           ['burst=3', 'burst'], ['quantity=2', 'quantity'], ['delay=1', 'delay'], ['nodelay', 'nodelay']),
        # max_delay without delay is refused whatever the zone; with delay, delay is what is named
        ['ratelimit zone=c max_delay=1s', $loc->('max_delay=1s'),
         qr/"max_delay" (?:has no meaning for the concurrency zone "c"|requires "delay")/],
        ['ratelimit zone=c delay=1 max_delay=1s', $loc->('delay=1 max_delay=1s'),
         qr/"(?:max_)?delay" has no meaning for the concurrency zone "c"/],
    );
    for my $c (@conc) {
        my ($name, $http, $re) = @$c;
        my ($rc, $out, $file) = nginx_t($http);
        my $line = conf_line_of($file, '# BAD');
        isnt($rc, 0, "$name: nginx -t fails");
        like($out, $re, "$name: message") or diag($out);
        like($out, qr/\Q in $file:$line\E\b/, "$name: names $file:$line") or diag($out);
        like($out, qr/"ratelimit\w*" directive/, "$name: names the directive") or diag($out);
    }

    for my $good (
        ['concurrency 1 and 1000000', 'ratelimit_zone a key=$arg_k concurrency=1; ratelimit_zone b key=$arg_k concurrency=1000000;'],
        ['concurrency=$var with default_concurrency', 'map $arg_t $cn { gold 10; default ""; } ratelimit_zone c key=$arg_k concurrency=$cn default_concurrency=2;'],
        ['hold 1s and 1d with redis, and the default', "$R ratelimit_zone a key=\$arg_k concurrency=5 redis=r hold=1s; ratelimit_zone b key=\$arg_k concurrency=5 redis=r hold=1d; ratelimit_zone d key=\$arg_k concurrency=5 redis=r;"],
        ['a rate zone and a concurrency zone in one location, ratelimit_algo around', 'ratelimit_zone r key=$arg_k requests=5 period=1m; ratelimit_zone c key=$arg_k concurrency=5 size=1m; server { listen 127.0.0.1:%%PORT%%; location / { ratelimit_algo fixed; ratelimit zone=r; ratelimit zone=c; empty_gif; } }'],
        ['ratelimit_algo sliding does not apply to a concurrency zone', 'ratelimit_zone c key=$arg_k concurrency=5; server { listen 127.0.0.1:%%PORT%%; ratelimit_algo sliding; location / { ratelimit zone=c; empty_gif; } }'],
    ) {
        my ($rc, $out) = nginx_t($good->[1]);
        is($rc, 0, "$good->[0]: accepted") or diag($out);
    }
}

done_testing;
