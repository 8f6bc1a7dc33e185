#!/usr/bin/env python3
"""The driver of stream.sh (its header documents the settings and the method; run it, not this).

The rows (ROWS below), each a stream server of one nginx; the client is stream_client.c. Sets
up Redis and the certificates, checks each row does what it claims on an nginx of its own with
an access log, stops it, starts the measured nginx (no access log), fills the many-key zones,
measures the rows round-robin, and prints the report. Helpers (Redis, CPU counters, ports, the
quiet wait, cleanup) are bench.py's. `python3 stream_bench.py --report DIR` prints the report of
a run kept with KEEP=1 again. Python 3 standard library only.
"""
import json
import os
import random
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time

sys.dont_write_bytecode = True
import bench as B  # noqa: E402
from report import median, fmt  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
say = B.say


def die(msg):
    say("stream.sh: " + msg)
    sys.exit(1)


class S:
    DURATION = B._int("DURATION", 3)
    WARMUP = B._int("WARMUP", 1)
    ROUNDS = B._int("ROUNDS", 2)
    ROWS = os.environ.get("ROWS", "")
    CONNS = B._int("CONNS", 64)
    UDP_SOCKETS = B._int("UDP_SOCKETS", 64)
    KEYS = B._int("KEYS", 1000000)
    ZONE_SIZE = B._env("ZONE_SIZE", "256m")
    FILL = B._env("FILL", "1")
    FILL_MAX = B._int("FILL_MAX", 20)
    NGINX_BIN = B._env("NGINX_BIN", "/usr/sbin/nginx")
    SO = B._env("SO", os.path.join(ROOT, "build/ngx_stream_ratelimit_module.so"))
    STREAM_SO = B._env("STREAM_SO", "/usr/lib/nginx/modules/ngx_stream_module.so")
    NGINX_CPU = B._int("NGINX_CPU", 0)
    CLIENT_CPU = B._int("CLIENT_CPU", 1)
    REDIS_CPU = os.environ.get("REDIS_CPU", str(CLIENT_CPU))
    KEEP = B._env("KEEP", "0")
    QUIET_WAIT = B._int("QUIET_WAIT", 30)
    OTHER_MAX = B._int("OTHER_MAX", 15)
    RETRIES = B._int("RETRIES", 1)
    MAX_TIME = B._int("MAX_TIME", 1800)
    INSTR = B._env("INSTR", "1")
    INSTR_SECS = B._int("INSTR_SECS", 2)


# bench.py's helpers read their settings from its S
for _k, _v in (("NGINX_CPU", S.NGINX_CPU), ("WRK_CPU", S.CLIENT_CPU), ("REDIS_CPU", S.REDIS_CPU),
               ("KEEP", S.KEEP), ("QUIET_WAIT", S.QUIET_WAIT), ("MAX_TIME", S.MAX_TIME)):
    setattr(B.S, _k, _v)

CLIENT = os.path.join(ROOT, "build/bench/stream_client")
ADMIT = "requests=1000000000 period=1s burst=1000"      # a rate no row reaches (http's default quota)
ADMIT_DAY = "requests=10 period=1d burst=1000"           # Redis, many keys: state that lasts a day
REJECT = "requests=1 period=1h"                          # the first connection passes, then none


class Row:
    """one stream server and how the client loads it.
    proto: tcp, udp (sessions: a reply each), flood (udp, no waiting), dgram (udp flood, one
    session, proxied to the client's sink). keys: one, many (KEYS). expect: admit, reject,
    drop (datagrams). base: the row it is compared with."""

    def __init__(self, name, what, proto, body, zone="", keys="one", expect="admit", base="", hello=False,
                 tls="", redis=False, key="$binary_remote_addr", sanity_zone=""):
        self.name, self.what, self.proto, self.body, self.zone = name, what, proto, body, zone
        self.keys, self.expect, self.base, self.hello, self.tls, self.redis = keys, expect, base, hello, tls, redis
        self.key = key
        # the zone in the sanity run, where it differs: a datagram limit that admits everything
        # leaves no trace, so there it drops what exceeds a burst, to prove the line applies
        self.sanity_zone = sanity_zone

    @property
    def sni(self):
        return self.hello and "ssl_preread_server_name" in self.key

    def fills(self):
        return self.keys == "many" and bool(self.zone) and "limit_conn" not in self.body


def rows():
    r = []
    for kind, sfx in (("one", ""), ("many", "-1M")):
        addr = "$binary_remote_addr"
        r += [
            Row("plain" + sfx, "`return`", "tcp", "return \"ok\\n\";", keys=kind),
            Row("limit_conn" + sfx, "stream `limit_conn` 65535", "tcp", "limit_conn lc%s 65535; return \"ok\\n\";" % sfx,
                zone="limit_conn_zone %s zone=lc%s:{size};" % (addr, sfx), keys=kind, base="plain" + sfx),
            Row("accept" + sfx, "ratelimit at=accept, gcra", "tcp", "ratelimit zone=acc%s; return \"ok\\n\";" % sfx,
                zone="ratelimit_zone acc%s key=%s %s size={size};" % (sfx, addr, ADMIT), keys=kind, base="plain" + sfx),
            Row("preread-plain" + sfx, "`ssl_preread on; return`", "tcp", "ssl_preread on; return \"ok\\n\";",
                keys=kind, hello=True, key="$ssl_preread_server_name"),
            Row("preread" + sfx, "ratelimit at=preread on the SNI", "tcp",
                "ssl_preread on; ratelimit zone=sni%s at=preread; return \"ok\\n\";" % sfx,
                zone="ratelimit_zone sni%s key=$ssl_preread_server_name %s size={size};" % (sfx, ADMIT),
                keys=kind, hello=True, key="$ssl_preread_server_name", base="preread-plain" + sfx),
            Row("redis" + sfx, "ratelimit at=accept, Redis per connection", "tcp",
                "ratelimit zone=rd%s; ratelimit_on_error deny; return \"ok\\n\";" % sfx,
                zone="ratelimit_zone rd%s key=%s %s size=1m redis=main;" % (sfx, addr, ADMIT if kind == "one" else ADMIT_DAY),
                keys=kind, base="plain" + sfx, redis=True),
        ]
    r += [
        Row("tls-handshake-rsa", "`listen ssl`, a full handshake (RSA 2048)", "tcp", "return \"ok\\n\";", tls="rsa"),
        Row("tls-handshake-ec", "`listen ssl`, a full handshake (ECDSA P-256)", "tcp", "return \"ok\\n\";", tls="ec"),
        Row("tls-rejected", "`listen ssl`, rejected at accept (a ClientHello sent)", "tcp",
            "ratelimit zone=tlsrej; return \"ok\\n\";", zone="ratelimit_zone tlsrej key=$binary_remote_addr %s;" % REJECT,
            tls="rsa", hello=True, expect="reject", base="tls-handshake-rsa"),
        Row("tls-rejected-preread", "`ssl_preread`, rejected at preread on the SNI", "tcp",
            "ssl_preread on; ratelimit zone=snirej at=preread; return \"ok\\n\";",
            zone="ratelimit_zone snirej key=$ssl_preread_server_name %s;" % REJECT,
            hello=True, key="$ssl_preread_server_name", expect="reject", base="tls-handshake-rsa"),
        Row("flood-log", "rejecting flood, one key, each rejection logged", "tcp", "ratelimit zone=fl1; return \"ok\\n\";",
            zone="ratelimit_zone fl1 key=$binary_remote_addr %s;" % REJECT, expect="reject", base="plain"),
        Row("flood-nolog", "the same, `ratelimit_log_level info` (not logged)", "tcp",
            "ratelimit zone=fl2; ratelimit_log_level info; return \"ok\\n\";",
            zone="ratelimit_zone fl2 key=$binary_remote_addr %s;" % REJECT, expect="reject", base="flood-log"),
        Row("flood-reset", "the same, not logged, `ratelimit_reject reset`", "tcp",
            "ratelimit zone=fl3; ratelimit_log_level info; ratelimit_reject reset; return \"ok\\n\";",
            zone="ratelimit_zone fl3 key=$binary_remote_addr %s;" % REJECT, expect="reject", base="flood-log"),
        Row("udp-plain", "UDP sessions, `return`", "udp", "return \"ok\\n\";"),
        Row("udp-accept", "UDP sessions, ratelimit at=accept", "udp", "ratelimit zone=ua; return \"ok\\n\";",
            zone="ratelimit_zone ua key=$binary_remote_addr %s;" % ADMIT, base="udp-plain"),
        Row("udp-rejected", "UDP sessions rejected (a flood from %d ports), each logged" % S.UDP_SOCKETS, "flood",
            "ratelimit zone=ur; return \"ok\\n\";", zone="ratelimit_zone ur key=$binary_remote_addr %s;" % REJECT,
            expect="reject", base="udp-plain"),
        Row("udp-rejected-nolog", "the same, `ratelimit_log_level info` (not logged)", "flood",
            "ratelimit zone=ur2; ratelimit_log_level info; return \"ok\\n\";",
            zone="ratelimit_zone ur2 key=$binary_remote_addr %s;" % REJECT, expect="reject", base="udp-rejected"),
        Row("udp-dgram-plain", "datagrams of one session, `proxy_pass`", "dgram", "proxy_pass 127.0.0.1:{sink};"),
        Row("udp-dgram", "the same, ratelimit at=datagram", "dgram", "ratelimit zone=pk at=datagram; proxy_pass 127.0.0.1:{sink};",
            zone="ratelimit_zone pk key=$binary_remote_addr %s;" % ADMIT, base="udp-dgram-plain",
            sanity_zone="ratelimit_zone pk key=$binary_remote_addr requests=1 period=1h burst=9;"),
        Row("udp-dgram-dropped", "the same, over the limit: dropped", "dgram",
            "ratelimit zone=pkd at=datagram; proxy_pass 127.0.0.1:{sink};",
            zone="ratelimit_zone pkd key=$binary_remote_addr %s;" % REJECT, expect="drop", base="udp-dgram-plain"),
    ]
    return r


ROWS = rows()
BY_NAME = {r.name: r for r in ROWS}

# (label, row, base, minimum) of the targets of issue 31; "-1M" rows where the same holds
TARGETS = [("accept >= 0.95x plain", "accept", "plain", 0.95), ("accept, 1M keys >= 0.95x plain", "accept-1M", "plain-1M", 0.95),
           ("accept >= 1.0x limit_conn", "accept", "limit_conn", 1.0),
           ("accept, 1M keys >= 1.0x limit_conn", "accept-1M", "limit_conn-1M", 1.0),
           ("preread >= 0.9x ssl_preread alone", "preread", "preread-plain", 0.9),
           ("preread, 1M names >= 0.9x", "preread-1M", "preread-plain-1M", 0.9),
           ("Redis per connection >= 0.8x plain", "redis", "plain", 0.8),
           ("Redis per connection, 1M keys >= 0.8x plain", "redis-1M", "plain-1M", 0.8),
           ("rejected TLS (at accept) >= 5x RSA handshakes", "tls-rejected", "tls-handshake-rsa", 5.0),
           ("rejected TLS (at accept) >= 5x ECDSA handshakes", "tls-rejected", "tls-handshake-ec", 5.0),
           ("rejected TLS (at preread) >= 5x RSA handshakes", "tls-rejected-preread", "tls-handshake-rsa", 5.0),
           ("rejected TLS (at preread) >= 5x ECDSA handshakes", "tls-rejected-preread", "tls-handshake-ec", 5.0),
           ("datagram limit >= 0.9x plain", "udp-dgram", "udp-dgram-plain", 0.9)]


class St:
    tmp = ""
    sel = []
    port = {}
    sink = {}
    nginx = None             # (master, [workers], dir)
    meta = {}


# ---------------------------------------------------------------- set-up
def select(expr):
    """the rows whose name matches, with the rows they are compared with (and their targets' bases)"""
    try:
        rx = re.compile(expr)
    except re.error:
        die("ROWS='%s' is not a valid regular expression" % expr)
    want = {r.name for r in ROWS if rx.search(r.name)}
    for _ in range(3):
        want |= {BY_NAME[n].base for n in want if BY_NAME[n].base}
        want |= {b for _, n, b, _ in TARGETS if n in want}
    return [r for r in ROWS if r.name in want]


def udp_free(port):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        s.bind(("127.0.0.1", port))
        return True
    except OSError:
        return False
    finally:
        s.close()


def ports(n):
    """n ports free for TCP and UDP both"""
    out = []
    while len(out) < n:
        out += [p for p in B.fresh_ports(n - len(out)) if udp_free(p)]
    return out


def certs():
    """RSA 2048 (bench.py's, signed by its CA) and ECDSA P-256 (self-signed) server certificates"""
    B.make_certs()
    d = B.St.tls_dir
    p = subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
                        "-keyout", "ec.key", "-out", "ec.crt", "-days", "2", "-subj", "/CN=127.0.0.1"],
                       cwd=d, capture_output=True, text=True)
    if p.returncode:
        die("openssl (ECDSA certificate): " + p.stderr)
    return {"rsa": (d + "/server.crt", d + "/server.key"), "ec": (d + "/ec.crt", d + "/ec.key")}


def nginx_conf(d, crt, sanity=False, single=False):
    """one nginx, one worker pinned to NGINX_CPU, a server per row. sanity: with an access log
    (what each session's limit said) and short UDP sessions, to check the rows; single: one
    process in the foreground, no master (under callgrind)"""
    out = ["load_module %s;" % S.STREAM_SO, "load_module %s/ngx_stream_ratelimit_module.so;" % St.tmp]
    if os.getuid() == 0 and not single:
        out.append("user nobody nogroup;")
    out.append("""worker_processes 1;
worker_cpu_affinity {mask};
worker_rlimit_nofile 65536;
daemon {on};
master_process {on};
pid {d}/nginx.pid;
error_log {d}/error.log error;   # error: each rejection's line, unless a row lowers its level

events {{
    worker_connections 16384;
}}

stream {{""".format(d=d, mask="1" + "0" * S.NGINX_CPU, on="off" if single else "on"))
    if sanity:
        out += ["    log_format sane '$server_port $status rl=$ratelimit_status lc=$limit_conn_status dropped=$ratelimit_dropped';",
                "    access_log %s/sanity.log sane;" % d]
    if any(r.redis for r in St.sel):
        out.append("    ratelimit_redis main %s timeout=100ms;" % B.redis_addrs("main"))
    for r in St.sel:
        if r.zone:
            out.append("    " + (r.sanity_zone if sanity and r.sanity_zone else r.zone).format(size=S.ZONE_SIZE))
    for r in St.sel:
        p = St.port[r.name]
        listen = "listen 127.0.0.1:%d%s backlog=4096;" % (p, " ssl" if r.tls else "")
        if r.proto != "tcp":
            listen = "listen 127.0.0.1:%d udp;" % p
        lines = [listen]
        if r.tls:
            lines.append("ssl_certificate %s; ssl_certificate_key %s;" % crt[r.tls])
        if r.proto == "dgram":
            # sessions end 1s after their last datagram in the sanity run (their log line then)
            lines.append("proxy_timeout %s;" % ("1s" if sanity else "30s"))
        lines.append(r.body.format(sink=St.sink.get(r.name, 0)))
        out.append("    server {  # %s\n        %s\n    }" % (r.name, "\n        ".join(lines)))
    out.append("}")
    return "\n".join(out) + "\n"


def start_nginx(sanity, crt):
    d = "%s/%s" % (St.tmp, "sanity" if sanity else "nginx")
    os.makedirs(d)
    os.chmod(d, 0o777)
    conf = d + "/nginx.conf"
    with open(conf, "w") as f:
        f.write(nginx_conf(d, crt, sanity=sanity))
    args = [S.NGINX_BIN, "-p", d + "/", "-c", conf, "-e", d + "/error.log"]
    p = subprocess.run(args[:1] + ["-t", "-q"] + args[1:], capture_output=True, text=True)
    if p.returncode:
        die("nginx -t failed (%s; KEEP=1 keeps it): %s" % (conf, p.stderr))
    if subprocess.run(args).returncode:
        die("nginx failed to start: " + B.run(["tail", "-5", d + "/error.log"]))
    for _ in range(100):
        if os.path.exists(d + "/nginx.pid") and os.path.getsize(d + "/nginx.pid"):
            master = int(open(d + "/nginx.pid").read().split()[0])
            workers = [int(x) for x in B.run(["pgrep", "-P", str(master)]).split()]
            if len(workers) == 1:
                St.nginx = (master, workers, d)
                B.St.nginx[1] = (master, workers)          # stopped by bench.py's cleanup
                return
        time.sleep(0.1)
    die("the nginx worker did not start: " + B.run(["tail", "-5", d + "/error.log"]))


def stop_nginx():
    B.stop_nginx()
    St.nginx = None


def build_client():
    """the client, with cc -O2 (rebuilt when its source is newer)"""
    src = os.path.join(HERE, "stream_client.c")
    if os.path.exists(CLIENT) and os.path.getmtime(CLIENT) >= os.path.getmtime(src):
        return
    os.makedirs(os.path.dirname(CLIENT), exist_ok=True)
    p = subprocess.run(["cc", "-O2", "-Wall", "-Wextra", "-Werror", "-o", CLIENT, src, "-lssl", "-lcrypto"],
                       capture_output=True, text=True)
    if p.returncode:
        die("cannot build the client (cc, libssl-dev): " + p.stderr)


def setup():
    for cmd in ("taskset", "openssl", "cc"):
        if not shutil.which(cmd):
            die(cmd + " is not installed")
    for f, why in ((S.NGINX_BIN, "no nginx"), (S.SO, "no module (./build.sh build)"),
                   (S.STREAM_SO, "no stream module (apt-get install libnginx-mod-stream)")):
        if not os.path.exists(f):
            die("%s at %s" % (why, f))
    ncpu = len(os.sched_getaffinity(0))
    if not (S.NGINX_CPU < ncpu and S.CLIENT_CPU < ncpu):
        die("need CPUs %d and %d, have %d" % (S.NGINX_CPU, S.CLIENT_CPU, ncpu))
    if S.KEYS < 2 or S.KEYS > 254 * 65536:
        die("KEYS must be 2 .. %d (127.1.0.0 and up)" % (254 * 65536))
    build_client()
    St.sel = select(S.ROWS)
    if not St.sel:
        die("ROWS='%s' selects no row" % S.ROWS)
    St.tmp = B.St.tmp = tempfile.mkdtemp(prefix="rlsbench.", dir=os.environ.get("TMPDIR") or "/tmp")
    os.chmod(St.tmp, 0o755)
    os.makedirs(St.tmp + "/out")
    shutil.copyfile(S.SO, St.tmp + "/ngx_stream_ratelimit_module.so")
    ps = ports(len(St.sel) + sum(r.proto == "dgram" for r in St.sel))
    for r in St.sel:
        St.port[r.name] = ps.pop()
        if r.proto == "dgram":
            St.sink[r.name] = ps.pop()
    crt = certs() if any(r.tls for r in St.sel) else {}
    if any(r.redis for r in St.sel):
        B.redis_start("main", 0)
    git_rev = B.run(["git", "-C", ROOT, "log", "-1", "--format=%h (%cd)", "--date=format:%Y-%m-%d %H:%M"]).strip() or "?"
    if B.run(["git", "-C", ROOT, "status", "--porcelain", "--", "src", "config"]).strip():
        git_rev += " + uncommitted src"
    cpu = next((line.split(": ", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name")), "?")
    St.meta = {"git_rev": git_rev, "nginx": subprocess.run([S.NGINX_BIN, "-v"], capture_output=True, text=True).stderr.strip(),
               "cpu": cpu, "ncpu": ncpu, "kernel": os.uname().release, "selected": [r.name for r in St.sel],
               "settings": {k: getattr(S, k) for k in dir(S) if k.isupper()}}
    return crt


# ---------------------------------------------------------------- the client
def client(r, secs, count=0, inflight=None, walk=None, seed=None):
    """stream_client for the row, pinned to CLIENT_CPU: its counters (name -> number)"""
    cmd = ["taskset", "-c", str(S.CLIENT_CPU), CLIENT, "udp" if r.proto != "tcp" else "tcp", "-p", str(St.port[r.name]),
           "-d", str(secs)]
    if r.proto == "tcp":
        cmd += ["-c", str(inflight or S.CONNS)]
        if r.tls and not r.hello:
            cmd.append("-T")
        if r.hello:
            cmd.append("-H")
    else:
        cmd += ["-c", str(inflight or (1 if r.proto == "dgram" else S.UDP_SOCKETS))]
        if r.proto in ("flood", "dgram"):
            cmd.append("-f")
        if r.proto == "dgram":
            cmd += ["-S", str(St.sink[r.name])]
    if r.keys == "many":
        cmd += ["-k", str(S.KEYS)] + (["-K", "sni"] if r.sni else [])
    if count:
        cmd += ["-n", str(count)]
    if walk is not None:
        cmd += ["-w", str(walk)]
    cmd += ["-r", str(seed if seed is not None else random.randrange(1, 1 << 30))]
    try:
        p = subprocess.run(["timeout", "-k", "5", str(int(secs) + 30)] + cmd, capture_output=True, text=True)
    except OSError as e:
        die("cannot run the client: %s" % e)
    got = dict(kv.split("=", 1) for kv in p.stdout.split() if "=" in kv)
    if p.returncode or "wall" not in got:
        die("the client failed (%s): %s %s" % (" ".join(cmd), p.stdout, p.stderr))
    return {k: float(v) for k, v in got.items()}


def udp_drops(port):
    """the datagrams the kernel dropped on 127.0.0.1:port's sockets (their receive queues were
    full): /proc/net/udp's last column"""
    want = ":%04X" % port
    total = 0
    with open("/proc/net/udp") as f:
        next(f)
        for line in f:
            v = line.split()
            if len(v) > 12 and v[1].endswith(want) and v[1].startswith("0100007F"):
                total += int(v[-1])
    return total


# ---------------------------------------------------------------- sanity
def sanity():
    """on an nginx with an access log: each row admits, rejects or drops as it claims, its limit
    says so ($ratelimit_status, $limit_conn_status, $ratelimit_dropped), Redis is called"""
    lines, bad = [], False
    log = St.nginx[2] + "/sanity.log"

    def check(text, ok):
        nonlocal bad
        lines.append(("ok    " if ok else "FAIL  ") + text)
        bad = bad or not ok

    def logged(port, k):
        """the access log's last k lines of that port, once there are k (sessions log at their end)"""
        got = []
        end = time.time() + 5
        while time.time() < end:
            got = [x.split(" ", 1)[1] for x in open(log, errors="replace").read().splitlines()
                   if x.startswith("%d " % port)] if os.path.exists(log) else []
            if len(got) >= k:
                break
            time.sleep(0.1)
        return got[-k:] if len(got) >= k else got

    for r in St.sel:
        n = 4
        calls0 = B.redis_counts("main")[0] if r.redis else 0
        if r.proto == "dgram":
            c = client(r, 3, count=20, seed=1)
            passed = 1 if r.expect == "drop" else 10 if r.sanity_zone else 20
            check("%s: sent %d, proxied %d (want 20, %d%s)" % (r.name, c["sent"], c["sink"], passed,
                                                               ": the sanity run's burst=9" if r.sanity_zone else ""),
                  c["sent"] == 20 and c["sink"] == passed and not udp_drops(St.port[r.name]))
            got = logged(St.port[r.name], 1)
            st = got[0] if got else "nothing logged"
            want = "dropped=%d " % (20 - passed)
            check("%s: the session's log line: %s (want %s)" % (r.name, st, want.strip()), want in st + " ")
            continue
        c = client(r, 3, count=n, inflight=1, seed=1)
        if r.expect == "admit":
            ok = c["admitted"] == n
            want = "%d admitted" % n
        else:
            ok = c["admitted"] <= 1 and c["conns"] >= n - 1 and c["closed"] + c["reset"] >= n - 1 if r.proto == "tcp" \
                else c["replies"] <= 1 and c["sent"] >= n
            want = "at most the first admitted, the others rejected"
        check("%s: %s (want %s)" % (r.name, " ".join("%s=%d" % (k, c[k]) for k in ("conns", "admitted", "closed", "reset", "errors",
                                                                               "handshakes", "sent", "replies") if c.get(k)), want), ok)
        if r.tls and not r.hello:
            check("%s: %d TLS handshakes (want %d)" % (r.name, c["handshakes"], n), c["handshakes"] == n)
        got = logged(St.port[r.name], n if r.expect == "admit" else 2)
        if r.expect == "reject":
            want = "503 rl=REJECTED"
        elif "limit_conn" in r.body:
            want = "200 rl=- lc=PASSED"
        elif r.zone:
            want = "200 rl=PASSED"
        else:
            want = "200 rl=- lc=- "
        check("%s: the access log says %s (want %s)" % (r.name, got[-1] if got else "nothing", want),
              bool(got) and want in got[-1] + " ")
        if r.redis:
            calls = B.redis_counts("main")[0] - calls0
            check("%s: Redis ran %d script call(s) (want >= %d)" % (r.name, calls, n), calls >= n)
    say("\n".join(lines))
    if bad:
        die("sanity check failed: the figures would not mean what they claim (KEEP=1 keeps %s)" % St.tmp)
    return lines


# ---------------------------------------------------------------- fill, measure
def fill():
    """every key 0..KEYS-1 once into each many-key zone (at most FILL_MAX seconds each), so that
    the 1M rows look keys up more than they insert them: what share was filled is reported"""
    out = []
    for r in St.sel:
        if not r.fills():
            continue
        t0 = time.time()
        c = client(r, S.FILL_MAX, count=S.KEYS, walk=0)
        extra = ", keys in Redis: %s" % B.redis_dbsizes("main") if r.redis else ""
        line = "%s: %d of %d keys in %.0fs (%.0f%%), %d not admitted%s" % (
            r.name, c["conns"], S.KEYS, time.time() - t0, 100.0 * c["conns"] / S.KEYS, c["conns"] - c["admitted"], extra)
        say("== filled " + line)
        out.append(line)
    return out


def measure(r):
    """a warm-up, then one measured run: the client's counters, and around it the CPU time of
    the nginx worker, of Redis, of all CPUs (to tell a disturbed run), the kernel's UDP drops"""
    workers = St.nginx[1]
    rp = B.all_redis_pids() if r.redis else []
    client(r, S.WARMUP)
    e0 = os.path.getsize(St.nginx[2] + "/error.log")
    d0 = udp_drops(St.port[r.name]) if r.proto != "tcp" else 0
    s0 = udp_drops(St.sink[r.name]) if r.proto == "dgram" else 0
    p0, rd0, b0, t0 = sum(B.proc_ticks(workers)), sum(B.proc_ticks(rp)), B.cpu_ticks(range(St.meta["ncpu"])), time.time()
    c = client(r, S.DURATION)
    p1, rd1, b1, t1 = sum(B.proc_ticks(workers)), sum(B.proc_ticks(rp)), B.cpu_ticks(range(St.meta["ncpu"])), time.time()
    d1 = udp_drops(St.port[r.name]) if r.proto != "tcp" else 0
    s1 = udp_drops(St.sink[r.name]) if r.proto == "dgram" else 0
    for p in workers:
        if not B._alive(p):
            die("the nginx worker died during %s: %s" % (r.name, B.run(["tail", "-5", St.nginx[2] + "/error.log"])))
    e1 = os.path.getsize(St.nginx[2] + "/error.log")
    return {"client": c, "hz": B.HZ, "span": t1 - t0, "nginx_ticks": p1 - p0, "redis_ticks": rd1 - rd0,
            "busy_ticks": b1[0] - b0[0], "softirq_ticks": b1[1] - b0[1], "drops": d1 - d0, "sink_drops": s1 - s0,
            "log_bytes": e1 - e0}


def figures(r, raw):
    """the figures of one run. units: what the row counts (TCP connections, UDP sessions,
    datagrams) that nginx handled:
      TCP: connections admitted or rejected (not errors); UDP sessions: replies; a UDP flood:
      datagrams sent less those the kernel dropped at nginx's socket (never read)"""
    c, hz = raw["client"], raw["hz"]
    wall = c["wall"]
    ng, rd = raw["nginx_ticks"] / hz, raw["redis_ticks"] / hz
    cl = c["user"] + c["sys"]
    if r.proto == "tcp":
        admitted, rejected = c["admitted"], c["closed"] + c["reset"]
        units = admitted + rejected
    elif r.proto == "udp":
        units, admitted, rejected = c["conns"], c["admitted"], c["lost"]
    else:
        units = max(0.0, c["sent"] - raw["drops"])
        admitted = c["sink"] + raw["sink_drops"] if r.proto == "dgram" else c["replies"]
        rejected = max(0.0, units - admitted)
    other = max(0.0, raw["busy_ticks"] / hz - ng - cl - rd)
    return {
        "rate": units / wall if wall else 0.0, "units": units, "admitted": admitted, "rejected": rejected,
        "errors": c["errors"] + c["timeouts"] + (c["lost"] if r.proto == "udp" else 0),
        "nginx_pct": 100 * ng / raw["span"], "client_pct": 100 * cl / wall, "redis_pct": 100 * rd / raw["span"],
        "nginx_us": 1e6 * ng / units if units else None, "client_us": 1e6 * cl / units if units else None,
        "per_cpu_s": units / ng if ng else None, "other_pct": 100 * other / raw["span"],
        "softirq_pct": 100 * raw["softirq_ticks"] / hz / raw["span"],
        "kernel_drops": raw["drops"], "log_bytes": raw["log_bytes"],
    }


def progress(f):
    return ("%8.0f/s nginx %3.0f%% %s us client %3.0f%% %s us redis %.0f%% admitted %d rejected %d errors %d "
            "other %.0f%% softirq %.0f%% log +%dB") % (
        f["rate"], f["nginx_pct"], fmt("%.2f", f["nginx_us"]), f["client_pct"], fmt("%.2f", f["client_us"]),
        f["redis_pct"], f["admitted"], f["rejected"], f["errors"], f["other_pct"], f["softirq_pct"], f["log_bytes"])


def measure_all():
    total, k, retried = S.ROUNDS * len(St.sel), 0, 0
    say("== measuring %d rows x %d rounds x (%ds + %ds): ~%d min" % (
        len(St.sel), S.ROUNDS, S.WARMUP, S.DURATION, total * (S.WARMUP + S.DURATION + 1) // 60 + 1))
    for rnd in range(1, S.ROUNDS + 1):
        for r in St.sel:
            k += 1
            for attempt in range(S.RETRIES + 1):
                B.wait_quiet()
                raw = measure(r)
                f = figures(r, raw)
                raw["disturbed"] = f["other_pct"] > S.OTHER_MAX
                say("[%d/%d] round %d %-20s %s" % (k, total, rnd, r.name, progress(f)))
                if not raw["disturbed"] or B.since_start() >= S.MAX_TIME:
                    break
                if attempt < S.RETRIES:
                    say("   disturbed (other %.0f%% > %d%%): measuring again" % (f["other_pct"], S.OTHER_MAX))
                    retried += 1
            with open("%s/out/%s.%d.json" % (St.tmp, r.name, rnd), "w") as fh:
                json.dump(raw, fh)
    return retried


# ---------------------------------------------------------------- instructions
def instructions(crt):
    """user-space instructions per connection (session, datagram) of nginx under callgrind, for
    the one-key rows: the module's own cost, which the kernel's (~30 us per TCP connection on
    loopback) and the machine's noise hide in the figures above. One nginx process, collecting
    inside its event loop; per row: a few connections to warm up, the counters zeroed, INSTR_SECS
    seconds of the client (one connection or session in flight; the floods as above), dumped."""
    if not shutil.which("valgrind") or not shutil.which("callgrind_control"):
        say("== no valgrind: no instruction counts")
        return {}
    d = St.tmp + "/callgrind"
    os.makedirs(d)
    with open(d + "/nginx.conf", "w") as f:
        f.write(nginx_conf(d, crt, single=True))
    cmd = ["taskset", "-c", str(S.NGINX_CPU), "valgrind", "--tool=callgrind", "--callgrind-out-file=%s/cg.out" % d,
           "--collect-atstart=no", "--toggle-collect=ngx_process_events_and_timers",
           "--compress-strings=no", "--compress-pos=no",   # each dump readable alone
           S.NGINX_BIN, "-p", d + "/", "-c", d + "/nginx.conf", "-e", d + "/error.log"]
    vg = B.background(cmd, d + "/valgrind.log")
    B.St.wrk = vg                        # stopped by bench.py's cleanup if this ends early
    out = {}
    try:
        first = next(r for r in St.sel if r.proto == "tcp")
        for _ in range(300):
            try:
                socket.create_connection(("127.0.0.1", St.port[first.name]), 1).close()
                break
            except OSError:
                time.sleep(0.1)
        for r in St.sel:
            if r.keys != "one":
                continue
            warm = client(r, 5, count=5, inflight=1)
            if warm["conns"] + warm["sent"] == 0:
                # (a whole RSA handshake under callgrind may not finish within the warm-up)
                say("== callgrind %-20s no connection in warm-up: left out" % r.name)
                continue
            d0 = udp_drops(St.port[r.name]) if r.proto != "tcp" else 0
            s0 = udp_drops(St.sink[r.name]) if r.proto == "dgram" else 0
            subprocess.run(["callgrind_control", "-z", str(vg.pid)], capture_output=True)
            c = client(r, S.INSTR_SECS, inflight=1 if r.proto in ("tcp", "udp") else None)
            for f in os.listdir(d):
                if f.startswith("cg.out."):
                    os.unlink(os.path.join(d, f))
            subprocess.run(["callgrind_control", "-d", str(vg.pid)], capture_output=True)
            dumps = sorted((f for f in os.listdir(d) if f.startswith("cg.out.")), key=lambda f: os.path.getmtime(os.path.join(d, f)))
            ir = 0
            if dumps:
                # kept as cg.ROW (KEEP=1): callgrind_annotate tells where the instructions went
                dump = os.path.join(d, "cg." + r.name)
                os.rename(os.path.join(d, dumps[-1]), dump)
                m = re.search(r"^summary:\s*(\d+)", open(dump).read(), re.M)
                ir = int(m.group(1)) if m else 0
            raw = {"client": c, "hz": B.HZ, "span": c["wall"], "nginx_ticks": 0, "redis_ticks": 0, "busy_ticks": 0,
                   "softirq_ticks": 0, "drops": (udp_drops(St.port[r.name]) - d0) if r.proto != "tcp" else 0,
                   "sink_drops": (udp_drops(St.sink[r.name]) - s0) if r.proto == "dgram" else 0, "log_bytes": 0}
            units = figures(r, raw)["units"]
            out[r.name] = {"ir": ir, "units": units}
            say("== callgrind %-20s %d Ir / %d = %s" % (r.name, ir, units, int(ir / units) if units else "-"))
    finally:
        vg.terminate()
        try:
            vg.wait(30)
        except subprocess.TimeoutExpired:
            vg.kill()
        B.St.wrk = None
    return out


# ---------------------------------------------------------------- report
def report(outdir, out=sys.stdout):
    meta = json.load(open(outdir + "/meta.json"))
    sel = [BY_NAME[n] for n in meta["selected"] if n in BY_NAME]
    figs, disturbed = {}, 0
    for r in sel:
        for rnd in range(1, meta["settings"]["ROUNDS"] + 1):
            path = "%s/%s.%d.json" % (outdir, r.name, rnd)
            if os.path.exists(path):
                raw = json.load(open(path))
                f = figures(r, raw)
                f["disturbed"] = raw.get("disturbed", f["other_pct"] > meta["settings"]["OTHER_MAX"])
                disturbed += f["disturbed"]
                figs.setdefault(r.name, []).append(f)

    def p(line=""):
        print(line, file=out)

    def med(name, key):
        """the median of the undisturbed runs (of all, if every run was disturbed)"""
        runs = figs.get(name, [])
        return median(f[key] for f in ([f for f in runs if not f["disturbed"]] or runs))

    def ratio(name, base, key):
        """the median of the same-round ratios, of the rounds in which neither was disturbed (if any)"""
        pairs = [(x, y) for x, y in zip(figs.get(name, []), figs.get(base, [])) if x[key] and y[key]]
        pairs = [(x, y) for x, y in pairs if not x["disturbed"] and not y["disturbed"]] or pairs
        return median(x[key] / y[key] for x, y in pairs)

    s = meta["settings"]
    p("## stream{}: connections, sessions and datagrams per second (tests/bench/stream.sh)")
    p()
    p("%s, module %s; %s (%d CPUs), kernel %s. nginx: one worker on CPU %d; the client on CPU %d%s. "
      "%d round(s) of %ds, medians; ratios: medians of the same-round ratios. %d in flight (TCP), %d UDP sockets; "
      "many keys: %d (source addresses 127.1.0.0 and up; SNI names k<i>.example for preread)."
      % (meta["nginx"], meta["git_rev"], meta["cpu"], meta["ncpu"], meta["kernel"], s["NGINX_CPU"], s["CLIENT_CPU"],
         ", Redis on CPU " + s["REDIS_CPU"] if any(r.redis for r in sel) and s["REDIS_CPU"] else "",
         s["ROUNDS"], s["DURATION"], s["CONNS"], s["UDP_SOCKETS"], s["KEYS"]))
    if meta.get("filled"):
        p()
        p("Filled: " + "; ".join(meta["filled"]) + ".")
    if meta.get("retried") or disturbed:
        p()
        p("%d run(s) measured again (other work > %d%% of a CPU); %d disturbed run(s) kept all the same, left out "
          "of the medians and ratios where the row has undisturbed ones." % (meta.get("retried", 0), s["OTHER_MAX"], disturbed))
    p()
    p("| row | what | keys | per s | nginx CPU | nginx µs each | per nginx CPU s | client CPU | client µs each | "
      "admitted | rejected | vs | per s ratio | per CPU s ratio |")
    p("| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- | ---: | ---: |")
    unit = {"tcp": "conns", "udp": "sessions", "flood": "sessions", "dgram": "datagrams"}
    for r in sel:
        if r.name not in figs:
            continue
        base = r.base if r.base in figs else ""
        p("| %s | %s | %s | %s %s | %s%% | %s | %s | %s%% | %s | %s | %s | %s | %s | %s |" % (
            r.name, r.what, "1M" if r.keys == "many" else "1", fmt("%.0f", med(r.name, "rate")), unit[r.proto],
            fmt("%.0f", med(r.name, "nginx_pct")), fmt("%.2f", med(r.name, "nginx_us")), fmt("%.0f", med(r.name, "per_cpu_s")),
            fmt("%.0f", med(r.name, "client_pct")), fmt("%.2f", med(r.name, "client_us")),
            fmt("%.0f", med(r.name, "admitted")), fmt("%.0f", med(r.name, "rejected")), base or "-",
            fmt("%.2fx", ratio(r.name, base, "rate")) if base else "-",
            fmt("%.2fx", ratio(r.name, base, "per_cpu_s")) if base else "-"))
    ins = meta.get("instructions") or {}

    def per(name):
        v = ins.get(name)
        return v["ir"] / v["units"] if v and v["units"] else None

    def verdict(v, minimum):
        return "-" if v is None else "%.2fx: %s" % (v, "met" if v >= minimum else "**not met**")

    targets = [t for t in TARGETS if t[1] in figs and t[2] in figs]
    if targets:
        p()
        p("Targets (issue 31), on connections (sessions, datagrams) per second, per nginx CPU second%s:"
          % (", and per user-space instruction (callgrind, below)" if ins else ""))
        p()
        p("| target | per s | per nginx CPU s |%s" % (" user-space instructions (the kernel left out: no verdict) |" if ins else ""))
        p("| --- | ---: | ---: |%s" % (" ---: |" if ins else ""))
    for label, name, base, minimum in targets:
        cells = [verdict(ratio(name, base, key), minimum) for key in ("rate", "per_cpu_s")]
        if ins:
            a, b = per(name), per(base)
            cells.append("%.2fx" % (b / a) if a and b else "-")
        p("| %s |" % label + "".join(" %s |" % c for c in cells))
    if ins:
        p()
        p("User-space instructions of nginx per connection (session, datagram) under callgrind, one key "
          "(nginx, the module, libc: not the kernel), %ds per row, one connection or session in flight:" % s.get("INSTR_SECS", 0))
        p()
        p("| row | Ir each | vs | theirs | difference | ratio (theirs / row's) |")
        p("| --- | ---: | --- | ---: | ---: | ---: |")
        for r in sel:
            a = per(r.name)
            if a is None:
                continue
            b = per(r.base) if r.base else None
            p("| %s | %.0f | %s | %s | %s | %s |" % (r.name, a, r.base if b else "-", fmt("%.0f", b),
                                                      "%+.0f" % (a - b) if b else "-", "%.3fx" % (b / a) if b else "-"))
    p()
    p("nginx CPU: the worker's user + system time (/proc) over the run; µs each: that per connection, "
      "session or datagram handled; client CPU: stream_client's own. A row whose nginx CPU is well below "
      "100% is bound by the client (or by Redis), not by nginx: compare per nginx CPU second then.")
    p()
    p("Reproduce: `%s`" % meta["repro"])


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "--report":
        report(sys.argv[2])
        return
    try:
        crt = setup()
        start_nginx(True, crt)
        St.meta["sanity"] = sanity()
        stop_nginx()
        start_nginx(False, crt)
        St.meta["filled"] = fill() if S.FILL == "1" else []
        St.meta["retried"] = measure_all()
        if S.INSTR == "1":
            stop_nginx()
            St.meta["instructions"] = instructions(crt)
        St.meta["repro"] = ("cd %s && DURATION=%d WARMUP=%d ROUNDS=%d ROWS='%s' CONNS=%d UDP_SOCKETS=%d KEYS=%d FILL=%s "
                            "FILL_MAX=%d REDIS_CPU='%s' tests/bench/stream.sh") % (
            ROOT, S.DURATION, S.WARMUP, S.ROUNDS, S.ROWS, S.CONNS, S.UDP_SOCKETS, S.KEYS, S.FILL, S.FILL_MAX, S.REDIS_CPU)
        with open(St.tmp + "/out/meta.json", "w") as f:
            json.dump(St.meta, f, indent=1)
        report(St.tmp + "/out")
    except KeyboardInterrupt:
        sys.exit(130)
    finally:
        B.cleanup()


if __name__ == "__main__":
    main()
