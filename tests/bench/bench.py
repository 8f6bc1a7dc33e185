#!/usr/bin/env python3
"""The driver of run.sh (its header documents the settings and the method; run it, not this).

Sets up what the selected cases need (Redis servers and clusters, nginx instances), checks each
case exercises what it claims, fills the many-key zones, then measures the cases round-robin
(wrk, latency.py, CPU counters) and hands the raw counters to report.py, which does the
arithmetic and prints the report. The cases and their nginx configuration: cases.py.
Progress goes to stderr; stdout is the report. Python 3 standard library only.
"""
import hashlib
import json
import os
import random
import re
import resource
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

sys.dont_write_bytecode = True
import cases as C  # noqa: E402
import report  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
HZ = os.sysconf("SC_CLK_TCK")


def say(msg):
    """progress, on stderr: stdout is the report"""
    print(msg, file=sys.stderr, flush=True)


def die(msg):
    say("run.sh: " + msg)
    sys.exit(1)


# ---------------------------------------------------------------- settings (see run.sh)
def _env(name, default):
    """${NAME:-default}"""
    v = os.environ.get(name, "")
    return v if v != "" else default


def _int(name, default):
    v = _env(name, str(default))
    try:
        return int(v)
    except ValueError:
        die("%s must be an integer, not '%s'" % (name, v))


class S:
    DURATION = _int("DURATION", 10)
    WARMUP = _int("WARMUP", 2)
    ROUNDS = _int("ROUNDS", 3)
    CASES = os.environ.get("CASES", "")
    CONNS = _int("CONNS", 50)
    PIPELINE = _int("PIPELINE", 16)
    LAT_DURATION = _int("LAT_DURATION", 3)
    LAT_LOADED = _env("LAT_LOADED", "1")
    KEYS = _int("KEYS", 1000000)
    ZONE_SIZE = _env("ZONE_SIZE", "256m")
    FILL = _env("FILL", "1")
    FILL_MAX = _int("FILL_MAX", 60)
    NGINX_BIN = _env("NGINX_BIN", "/usr/sbin/nginx")
    SO = _env("SO", os.path.join(ROOT, "build/ngx_http_ratelimit_module.so"))
    NGINX_CPU = _int("NGINX_CPU", 0)
    WRK_CPU = _int("WRK_CPU", 1)
    REDIS_CPU = os.environ.get("REDIS_CPU", str(WRK_CPU))      # ${REDIS_CPU-$WRK_CPU}: may be set empty
    REDIS_CLUSTER_CPU = os.environ.get("REDIS_CLUSTER_CPU", "")
    REDIS_BIN = _env("REDIS_BIN", "redis-server")
    REDIS_CLI = _env("REDIS_CLI", "redis-cli")
    KEEP = _env("KEEP", "0")
    OTHER_MAX = _int("OTHER_MAX", 15)
    RETRIES = _int("RETRIES", 2)
    QUIET_WAIT = _int("QUIET_WAIT", 60)
    MAX_TIME = _int("MAX_TIME", 2700)
    METRICS = _env("METRICS", "1")


START_TIME = time.time()
REPRO = ("cd {root} && DURATION={s.DURATION} WARMUP={s.WARMUP} ROUNDS={s.ROUNDS} CONNS={s.CONNS} PIPELINE={s.PIPELINE} "
         "LAT_DURATION={s.LAT_DURATION} LAT_LOADED={s.LAT_LOADED} KEYS={s.KEYS} ZONE_SIZE={s.ZONE_SIZE} FILL={s.FILL} "
         "METRICS={s.METRICS} CASES='{s.CASES}' REDIS_CPU='{s.REDIS_CPU}' REDIS_CLUSTER_CPU='{s.REDIS_CLUSTER_CPU}' NGINX_BIN={s.NGINX_BIN} "
         "SO={s.SO} tests/bench/run.sh").format(root=ROOT, s=S)


def since_start():
    return time.time() - START_TIME


# ---------------------------------------------------------------- state, cleanup
class St:
    tmp = ""
    wrk = None                   # the running wrk (Popen), the running latency probe
    probe = None
    nginx = {}                   # workers -> (master pid, [worker pids])
    redis = {}                   # server -> {"ports": [...], "pids": [...], "tls": bool}
    tls_ports = set()            # the ports of the TLS-only servers (redis-cli needs --tls there)
    cli_calls = {}               # port -> redis-cli runs against it (each one connection)
    tls_dir = ""                 # the CA and server certificate of the TLS servers
    used_ports = set()
    sel = []                     # the selected cases (cases.Case), in table order
    port = {}                    # case name -> its port
    ctl_ports = []               # the sanity controls' ports: limit_req's, the module's
    metrics_port = {}            # workers -> the port of that nginx's ratelimit_metrics (METRICS=1)
    all_cpus = []
    meta = {}                    # what report.py needs besides the runs (meta.json)


def _alive(pid):
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True


def _kill(pid, sig):
    try:
        os.kill(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _stop(pids, sig, wait=5.0):
    """sig to each, then SIGKILL to those still alive after `wait` seconds"""
    for p in pids:
        _kill(p, sig)
    for p in pids:
        end = time.time() + wait
        while _alive(p) and time.time() < end:
            time.sleep(0.1)
        if _alive(p):
            _kill(p, signal.SIGKILL)


def stop_nginx():
    for w, (master, workers) in list(St.nginx.items()):
        _stop([master], signal.SIGQUIT)
        for p in workers:
            _kill(p, signal.SIGKILL)
        del St.nginx[w]


def redis_stop(srv):
    r = St.redis.pop(srv, None)
    if r:
        _stop(r["pids"], signal.SIGTERM)


def cleanup():
    # bounded (a few seconds per process), and not interrupted: it stops what the run started
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    for p in (St.wrk, St.probe):
        if p and p.poll() is None:
            p.terminate()                  # timeout passes it on to wrk or latency.py
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()
    stop_nginx()
    for srv in list(St.redis):
        redis_stop(srv)
    if St.tmp and os.path.isdir(St.tmp):
        if S.KEEP == "1":
            say("kept " + St.tmp)
        else:
            shutil.rmtree(St.tmp, ignore_errors=True)


# ---------------------------------------------------------------- helpers
def free_ports(n):
    """n free TCP ports on 127.0.0.1 (held all at once while choosing, so they are distinct)"""
    socks = []
    try:
        for _ in range(n):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def fresh_ports(n):
    """n free ports that no earlier call handed out (those may not be bound yet: nginx starts
    after the Redis servers)"""
    for _ in range(20):
        ports = free_ports(n)
        if not St.used_ports.intersection(ports):
            St.used_ports.update(ports)
            return ports
    die("cannot find %d free ports" % n)


def run(cmd, **kw):
    """a command's stdout ('' if it cannot run)"""
    try:
        return subprocess.run(cmd, capture_output=True, text=True, **kw).stdout
    except OSError:
        return ""


def module_redis_counts(workers, name):
    """(script calls, checks) one ratelimit_redis has sent so far, from the module's metrics
    (nginx_ratelimit_redis_calls_total, _checks_total of the nginx with that many workers);
    (0, 0) without METRICS=1 or a name (sync zones count none: their calls are rounds)"""
    port = St.metrics_port.get(workers)
    if not port or not name:
        return 0, 0
    try:
        text = urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port, timeout=5).read().decode()
    except OSError:
        return 0, 0
    out = []
    for what in ("calls", "checks"):
        m = re.search(r'^nginx_ratelimit_redis_%s_total\{redis="%s"\} (\d+)' % (what, re.escape(name)), text, re.M)
        out.append(int(m.group(1)) if m else 0)
    return tuple(out)


def proc_ticks(pids):
    """CPU time (clock ticks) of each process: utime + stime of /proc/PID/stat (the whole
    thread group; the comm field may hold spaces, so count from the closing parenthesis)"""
    out = []
    for p in pids:
        try:
            with open("/proc/%d/stat" % p) as f:
                v = f.read().rsplit(")", 1)[1].split()
            out.append(int(v[11]) + int(v[12]))
        except (OSError, IndexError, ValueError):
            out.append(0)
    return out


def cpu_ticks(cpus):
    """(busy, irq+softirq) ticks of those CPUs together, from /proc/stat: busy is user nice
    system steal (irq and softirq apart: the loopback traffic of the benchmark itself)"""
    busy = soft = 0
    want = {"cpu%d" % c for c in cpus}
    with open("/proc/stat") as f:
        for line in f:
            v = line.split()
            if v and v[0] in want:
                busy += int(v[1]) + int(v[2]) + int(v[3]) + int(v[8])
                soft += int(v[6]) + int(v[7])
    return busy, soft


def children_cpu():
    """CPU seconds (user + system) of the children this process has waited for: wrk's, once
    reaped (timeout reaps wrk, so wrk's time is in timeout's)"""
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def parse_wrk(path):
    """(req/s, requests, non-2xx, socket errors) of wrk's output"""
    rps, n, non2xx, sock = 0.0, 0, 0, 0
    try:
        text = open(path, errors="replace").read()
    except OSError:
        return rps, n, non2xx, sock
    m = re.search(r"^Requests/sec:\s+(\S+)", text, re.M)
    if m:
        rps = float(m.group(1))
    m = re.search(r"^\s*(\d+) requests in ", text, re.M)
    if m:
        n = int(m.group(1))
    non2xx = sum(int(x) for x in re.findall(r"Non-2xx or 3xx responses:\s+(\d+)", text))
    for line in re.findall(r"Socket errors:(.*)", text):
        sock += sum(int(x) for x in re.findall(r"\d+", line))
    return rps, n, non2xx, sock


def probe_p99(path):
    """latency.py's p99 (ms) from its output "count p50 p90 p99 p999 max"; None if none"""
    try:
        for line in open(path, errors="replace"):
            v = line.split()
            try:
                if len(v) >= 4 and float(v[0]) > 0:
                    return float(v[3])
            except ValueError:
                continue
    except OSError:
        pass
    return None


def http_probe(url):
    """one request (curl): (status, the RateLimit header's value, '' when absent)"""
    out = run(["curl", "-s", "-o", "/dev/null", "-D", "-", "--max-time", "5", url])
    lines = out.replace("\r", "").split("\n")
    status = lines[0].split()[1] if len(lines[0].split()) > 1 else ""
    hdr = ""
    for line in lines[1:]:
        name, colon, value = line.partition(":")
        if colon and name.strip().lower() == "ratelimit":
            hdr = value.strip()
    return status, hdr


def background(cmd, out):
    f = open(out, "w")
    try:
        return subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT)
    finally:
        f.close()


def run_wrk(out, secs, url, script=None, args=()):
    """wrk pinned to WRK_CPU; `timeout` bounds a stuck wrk"""
    cmd = ["timeout", "-k", "5", str(secs + 30), "taskset", "-c", str(S.WRK_CPU),
           "wrk", "-t1", "-c%d" % S.CONNS, "-d%ds" % secs]
    cmd += ["-s", script, url, "--"] + [str(a) for a in args] if script else [url]
    St.wrk = background(cmd, out)
    St.wrk.wait()
    St.wrk = None


def latency_probe(out, secs, case):
    """latency.py on the case's port, pinned to WRK_CPU (started, not waited for)"""
    cmd = ["timeout", "-k", "5", str(secs + 30), "taskset", "-c", str(S.WRK_CPU),
           sys.executable, os.path.join(HERE, "latency.py"), str(St.port[case.name]), str(secs)]
    if case.kind == "many":
        cmd.append(str(S.KEYS))
    St.probe = background(cmd, out)


def wait_probe():
    if St.probe:
        St.probe.wait()
        St.probe = None


def load_case(out, secs, case):
    """the case's load: GET /x, or random keys with a fresh seed; PIPELINE requests per write"""
    url = "http://127.0.0.1:%d/x" % St.port[case.name]
    if case.kind == "many":
        run_wrk(out, secs, url, os.path.join(HERE, "random-keys.lua"), (S.KEYS, random.randrange(1, 1 << 30), S.PIPELINE))
    elif S.PIPELINE > 1:
        run_wrk(out, secs, url, os.path.join(HERE, "one-key.lua"), (S.PIPELINE,))
    else:
        run_wrk(out, secs, url)


# ---------------------------------------------------------------- Redis
def redis_cpu(srv):
    """the CPUs a server is pinned to (REDIS_CPU or REDIS_CLUSTER_CPU), '' if not"""
    return S.REDIS_CLUSTER_CPU if srv.startswith("cluster") else S.REDIS_CPU


def redis_cli(port, *args, **kw):
    """redis-cli against that port (over TLS for a TLS server); each run is one connection,
    counted (see redis_conns)"""
    tls = ["--tls", "--cacert", St.tls_dir + "/ca.crt"] if port in St.tls_ports else []
    St.cli_calls[port] = St.cli_calls.get(port, 0) + 1
    return run([S.REDIS_CLI, "-p", str(port)] + tls + list(args), **kw).replace("\r", "")


def make_certs():
    """a CA and a server certificate signed by it (RSA 2048, SAN IP:127.0.0.1: nginx checks the
    address's host), made with the openssl CLI in $TMP/tls, for the TLS servers"""
    if not shutil.which("openssl"):
        die("openssl is not installed (the TLS rows make their certificates with it)")
    d = St.tls_dir = St.tmp + "/tls"
    os.makedirs(d)
    with open(d + "/server.ext", "w") as f:
        f.write("subjectAltName=IP:127.0.0.1\nbasicConstraints=CA:FALSE\n"
                "keyUsage=digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth\n")
    for cmd in (["req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.crt",
                 "-days", "2", "-subj", "/CN=rlbench CA"],
                ["req", "-newkey", "rsa:2048", "-nodes", "-keyout", "server.key", "-out", "server.csr",
                 "-subj", "/CN=127.0.0.1"],
                ["x509", "-req", "-in", "server.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial",
                 "-out", "server.crt", "-days", "2", "-extfile", "server.ext"]):
        p = subprocess.run(["openssl"] + cmd, cwd=d, capture_output=True, text=True)
        if p.returncode != 0:
            die("openssl %s failed: %s" % (cmd[0], p.stderr))


def tls_session(port):
    """the protocol and cipher a TLS server agrees on with OpenSSL's defaults (openssl s_client,
    verified against the CA; one connection, counted as redis-cli's are)"""
    St.cli_calls[port] = St.cli_calls.get(port, 0) + 1
    try:
        out = subprocess.run(["openssl", "s_client", "-connect", "127.0.0.1:%d" % port, "-CAfile",
                              St.tls_dir + "/ca.crt", "-verify_ip", "127.0.0.1", "-verify_return_error", "-brief"],
                             input="", capture_output=True, text=True, timeout=10).stderr
    except (OSError, subprocess.TimeoutExpired):
        return "?"
    got = dict((k.strip(), v.strip()) for k, _, v in (line.partition(":") for line in out.splitlines()) if _)
    return "%s %s, verification %s" % (got.get("Protocol version", "?"), got.get("Ciphersuite", "?"),
                                       got.get("Verification", "?"))


def redis_spawn(cpus, d, port, *args, tls=False):
    """a redis-server (pinned to cpus if not empty) in d; its pid. tls: on TLS only (--port 0
    --tls-port), with the bench's certificate, clients not asked for one"""
    os.makedirs(d, exist_ok=True)
    pin = ["taskset", "-c", cpus] if cpus else []
    listen = ["--port", str(port)]
    if tls:
        St.tls_ports.add(port)
        t = St.tls_dir
        listen = ["--port", "0", "--tls-port", str(port), "--tls-cert-file", t + "/server.crt",
                  "--tls-key-file", t + "/server.key", "--tls-ca-cert-file", t + "/ca.crt",
                  "--tls-auth-clients", "no"]
    cmd = pin + [S.REDIS_BIN] + listen + ["--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
                 "--dir", d, "--daemonize", "yes", "--pidfile", d + "/redis.pid", "--logfile", d + "/redis.log"]
    if subprocess.run(cmd + list(args), stdout=subprocess.DEVNULL).returncode != 0:
        die("redis-server failed to start on port %d (log: %s/redis.log)" % (port, d))
    pidfile = d + "/redis.pid"
    for _ in range(100):
        if os.path.exists(pidfile) and os.path.getsize(pidfile) and redis_cli(port, "ping").strip() == "PONG":
            break
        time.sleep(0.05)
    if redis_cli(port, "ping").strip() != "PONG":
        log = run(["tail", "-3", d + "/redis.log"])
        die("redis-server on port %d does not answer: %s" % (port, log))
    return int(open(pidfile).read().split()[0])


def redis_start(srv, n, tls=False):
    """the standalone server srv (n = 0; tls: on TLS only) or a cluster of n primaries, once"""
    if srv in St.redis:
        return
    for b, pkg in ((S.REDIS_BIN, "redis-server"), (S.REDIS_CLI, "redis-tools")):
        if not shutil.which(b):
            die("%s is not installed (%s)" % (b, pkg))
    cpus = redis_cpu(srv)
    r = St.redis[srv] = {"ports": [], "pids": [], "tls": tls}  # filled as they start: a failure still stops them
    if n == 0:
        port = fresh_ports(1)[0]
        r["ports"].append(port)
        r["pids"].append(redis_spawn(cpus, "%s/redis-%s" % (St.tmp, srv), port, tls=tls))
    else:
        # each node: a client port and its own cluster bus port, both chosen free (the default
        # bus port, port + 10000, may be taken or beyond 65535)
        fresh = fresh_ports(2 * n)
        for j in range(n):
            port, bus = fresh[2 * j], fresh[2 * j + 1]
            r["ports"].append(port)
            r["pids"].append(redis_spawn(cpus, "%s/redis-%s-%d" % (St.tmp, srv, j), port, "--cluster-enabled", "yes",
                                         "--cluster-config-file", "nodes.conf", "--cluster-node-timeout", "2000",
                                         "--cluster-port", str(bus)))
        ports = r["ports"]
        if n == 1:
            # redis-cli --cluster create wants 3 primaries at least: one node takes every slot
            if subprocess.run([S.REDIS_CLI, "-p", str(ports[0]), "cluster", "addslotsrange", "0", "16383"],
                              stdout=subprocess.DEVNULL).returncode != 0:
                die("CLUSTER ADDSLOTSRANGE failed on port %d" % ports[0])
        else:
            p = subprocess.run([S.REDIS_CLI, "--cluster", "create"] + ["127.0.0.1:%d" % x for x in ports]
                               + ["--cluster-yes"], capture_output=True, text=True)
            out = p.stdout + p.stderr
            if p.returncode != 0:
                die("redis-cli --cluster create failed: " + out)
            if "All 16384 slots covered" not in out:
                die("redis-cli --cluster create: " + out)
        for _ in range(200):
            ok = all("cluster_state:ok" in redis_cli(x, "cluster", "info") for x in ports)
            if ok:
                break
            time.sleep(0.1)
        if not ok:
            die("cluster %s (ports %s) did not reach cluster_state:ok" % (srv, " ".join(map(str, ports))))
    say("== started Redis %s: port(s) %s, pid(s) %s, %s%s" % (
        srv, " ".join(map(str, r["ports"])), " ".join(map(str, r["pids"])),
        "pinned to CPU " + cpus if cpus else "not pinned", ", TLS only" if tls else ""))


def redis_addrs(srv):
    return " ".join("127.0.0.1:%d" % p for p in St.redis[srv]["ports"])


CMDSTAT = re.compile(r"^cmdstat_([^:]+):calls=(\d+),usec=(\d+)", re.M)
SCRIPT_CMDS = report.SCRIPT_CMDS


def redis_cmdtable(srv):
    """the calls of each command the server's nodes have run, and the microseconds Redis spent
    in each (INFO commandstats, summed over the nodes; the commands scripts and functions run
    count too, and a script's time includes theirs), INFO itself left out (this script sends it)"""
    calls, usec = {}, {}
    for port in St.redis[srv]["ports"]:
        for name, n, us in CMDSTAT.findall(redis_cli(port, "info", "commandstats")):
            if name != "info":
                calls[name] = calls.get(name, 0) + int(n)
                usec[name] = usec.get(name, 0) + int(us)
    return calls, usec


def redis_cmdstats(srv):
    """the calls of each command (redis_cmdtable)"""
    return redis_cmdtable(srv)[0]


def counts_of(stats):
    """(script calls, commands) of redis_cmdstats(): script calls are EVAL, EVALSHA, FCALL and
    their _RO forms; commands are every command but INFO"""
    return sum(n for name, n in stats.items() if name in SCRIPT_CMDS), sum(stats.values())


def redis_counts(srv):
    """(script calls, commands) the server's nodes have run (counts_of)"""
    return counts_of(redis_cmdstats(srv))


TOTAL_CONNS = re.compile(r"^total_connections_received:(\d+)", re.M)


def redis_conns(srv):
    """the connections the server's nodes have accepted from others than this script: INFO
    stats' total_connections_received less the redis-cli runs (and s_client's) against them,
    the one asking included. On a TLS-only server each is a TLS handshake (full or resumed)."""
    t = 0
    for port in St.redis[srv]["ports"]:
        m = TOTAL_CONNS.search(redis_cli(port, "info", "stats"))
        t += int(m.group(1)) - St.cli_calls[port] if m else 0
    return t


def redis_info_cpu(srv):
    """the CPU time of the server's nodes as INFO cpu says (used_cpu_sys + used_cpu_user, s)"""
    t = 0.0
    for port in St.redis[srv]["ports"]:
        for m in re.finditer(r"^used_cpu_(?:sys|user):([0-9.]+)", redis_cli(port, "info", "cpu"), re.M):
            t += float(m.group(1))
    return t


def redis_dbsizes(srv):
    return "/".join(redis_cli(p, "dbsize").strip() for p in St.redis[srv]["ports"])


def all_redis_pids():
    """every Redis pid (subtracted from "other CPU": they are part of the benchmark)"""
    return [p for r in St.redis.values() for p in r["pids"]]


# ---------------------------------------------------------------- setup
def setup():
    for cmd, why in (("wrk", "wrk is not installed (./build.sh bench installs it)"),
                     ("taskset", "taskset is not installed (util-linux)"), ("curl", "curl is not installed")):
        if not shutil.which(cmd):
            die(why)
    if not os.access(S.NGINX_BIN, os.X_OK):
        die("no nginx at " + S.NGINX_BIN)
    if not os.path.isfile(S.SO):
        die("no module at %s (./build.sh build)" % S.SO)
    if S.PIPELINE < 1:
        die("PIPELINE must be 1 or more")
    ncpu = len(os.sched_getaffinity(0))
    if not (S.NGINX_CPU < ncpu and S.WRK_CPU < ncpu):
        die("need CPUs %d and %d, have %d" % (S.NGINX_CPU, S.WRK_CPU, ncpu))
    if S.NGINX_CPU == S.WRK_CPU:
        say("warning: nginx and wrk share CPU %d" % S.NGINX_CPU)
    St.all_cpus = list(range(ncpu))

    # the selected cases, with the baselines they are compared with (cases.py)
    St.sel = C.select(S.CASES)
    if St.sel is None:
        die("CASES='%s' is not a valid extended regex" % S.CASES)
    if not St.sel:
        die("CASES='%s' selects no case" % S.CASES)

    St.tmp = tempfile.mkdtemp(prefix="rlbench.", dir=os.environ.get("TMPDIR") or "/tmp")
    os.chmod(St.tmp, 0o755)
    os.makedirs(St.tmp + "/out")
    # load a private copy: build.sh rewrites build/*.so in place, which must not touch a running nginx
    shutil.copyfile(S.SO, St.tmp + "/ngx_http_ratelimit_module.so")
    with open(S.SO, "rb") as f:
        so_sha = hashlib.sha256(f.read()).hexdigest()[:12]
    # the source tree when the run starts (commits may land while it runs)
    git_rev = run(["git", "-C", ROOT, "log", "-1", "--format=%h (%cd)", "--date=format:%Y-%m-%d %H:%M"]).strip() or "?"
    if run(["git", "-C", ROOT, "status", "--porcelain", "--", "src", "config"]).strip():
        git_rev += " + uncommitted src"
    cpu_model = ""
    for line in open("/proc/cpuinfo"):
        if line.startswith("model name"):
            cpu_model = line.split(": ", 1)[1].strip() if ": " in line else ""
            break
    St.meta = {
        "so": S.SO, "so_sha": so_sha, "git_rev": git_rev,
        "so_time": time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(os.path.getmtime(S.SO))),
        "nginx_version": subprocess.run([S.NGINX_BIN, "-v"], capture_output=True, text=True).stderr.strip().split("/")[-1],
        "ncpu": ncpu, "cpu_model": cpu_model, "kernel": os.uname().release, "repro": REPRO,
        "selected": [c.name for c in St.sel],
        "settings": {k: getattr(S, k) for k in dir(S) if k.isupper()},
    }

    # ports: one per case, plus the two sanity controls (limit_req and this module at a tiny rate)
    ports = fresh_ports(len(St.sel) + 2)
    St.port = {c.name: p for c, p in zip(St.sel, ports)}
    St.ctl_ports = ports[len(St.sel):]
    if S.METRICS == "1":
        for w in sorted({1} | {c.workers for c in St.sel}):
            St.metrics_port[w] = fresh_ports(1)[0]

    # the Redis servers the cases use, then the nginx instances: 1 (always: it serves the sanity
    # controls) and every other worker count
    if any(c.tls for c in St.sel):
        make_certs()
    for c in St.sel:
        if c.redis:
            redis_start(c.redis, c.cluster, c.tls)
    if St.redis:
        St.meta["redis_version"] = run([S.REDIS_BIN, "--version"]).split()[2].replace("v=", "")
    tls_srv = [srv for srv in St.redis if St.redis[srv]["tls"]]
    if tls_srv:
        St.meta["tls_session"] = tls_session(St.redis[tls_srv[0]]["ports"][0])
        St.meta["openssl_version"] = " ".join(run(["openssl", "version"]).split()[:2])
    mask = "1" + "0" * S.NGINX_CPU     # worker_cpu_affinity: the bit of NGINX_CPU, rightmost is CPU 0
    for w in sorted({1} | {c.workers for c in St.sel}):
        d = "%s/ng%d" % (St.tmp, w)
        os.makedirs(d)
        os.chmod(d, 0o755)
        conf = d + "/nginx.conf"
        with open(conf, "w") as f:
            f.write(C.nginx_conf(w, St.sel, St.port, St.ctl_ports, d, St.tmp + "/ngx_http_ratelimit_module.so", S.ZONE_SIZE,
                                 mask, redis_addrs, os.getuid() == 0,
                                 St.tls_dir + "/ca.crt" if St.tls_dir else "", St.metrics_port.get(w, 0)))
        say("== starting nginx with %d worker(s) (%s)" % (w, conf))
        args = [S.NGINX_BIN, "-p", d + "/", "-c", conf, "-e", d + "/error.log"]
        if subprocess.run(args[:1] + ["-t", "-q"] + args[1:]).returncode != 0:
            die("nginx -t failed (config in %s; KEEP=1 keeps it)" % conf)
        if subprocess.run(args).returncode != 0:
            die("nginx failed to start")
        workers = []
        for _ in range(100):
            if os.path.exists(d + "/nginx.pid") and os.path.getsize(d + "/nginx.pid"):
                master = int(open(d + "/nginx.pid").read().split()[0])
                workers = [int(x) for x in run(["pgrep", "-P", str(master)]).split()]
                St.nginx[w] = (master, workers)
                if len(workers) == w:
                    break
            time.sleep(0.1)
        if len(workers) != w:
            die("nginx workers did not start: " + run(["tail", "-5", d + "/error.log"]))


# ---------------------------------------------------------------- sanity
def sanity():
    """each case must really exercise what it claims, or its row means nothing: abort otherwise"""
    lines, bad = [], False

    def check(text, ok):
        nonlocal bad
        lines.append(("ok    " if ok else "FAIL  ") + text)
        bad = bad or not ok

    for port, what, second in ((St.ctl_ports[0], "limit_req control (rate=1r/m)", "503"),
                               (St.ctl_ports[1], "ratelimit control (requests=1 period=1h)", "429")):
        url = "http://127.0.0.1:%d/x" % port
        s1, s2 = http_probe(url)[0], http_probe(url)[0]
        check("%s: %s then %s (want 200 then %s)" % (what, s1, s2, second), s1 == "200" and s2 == second)
    for c in St.sel:
        z = c.zone
        url = "http://127.0.0.1:%d/x" % St.port[c.name] + ("?k=1" if c.kind == "many" else "")
        calls0 = redis_counts(c.redis)[0] if c.redis else 0
        st, hdr = http_probe(url)
        if c.check == "module-reject":
            st, hdr = http_probe(url)      # the first may be admitted
        if c.check == "module":
            ok, want = st == "200" and '"rl_%s"' % z in hdr, "200 with RateLimit of zone rl_" + z
        elif c.check == "plain-headers":
            ok, want = st == "200" and '"rl_gcra"' in hdr, "200 with the RateLimit header of add_header"
        elif c.check == "module-reject":
            ok, want = st == "429" and '"rl_%s"' % z in hdr, "429 with RateLimit of zone rl_%s, on a second request" % z
        else:
            ok, want = st == "200" and not hdr, "200 without RateLimit"
        check("%s: %s%s (want %s)" % (c.name, st, " RateLimit: " + hdr if hdr else "", want), ok)
        if c.redis:
            if c.store == "sync":
                time.sleep(0.5)            # a sync zone sends at its next round
            calls = redis_counts(c.redis)[0] - calls0
            check("%s: Redis %s ran %d script call(s) for it (want >= 1)" % (c.name, c.redis, calls), calls >= 1)
    # capacity of the module's shared-memory zones as the module logs it (capacity, not usage)
    cap_re = re.compile(r'ratelimit zone "rl_[^"]*": [0-9]* keys of [0-9]* bytes')
    found = set()
    for w in St.nginx:
        found.update(cap_re.findall(open("%s/ng%d/error.log" % (St.tmp, w), errors="replace").read()))
    by_zone = {c.zone: c for c in St.sel}
    for line in sorted(found):
        z = line.split('"')[1][len("rl_"):]
        c = by_zone.get(z)
        if z == "ctl" or (c and c.redis and c.store != "sync"):
            continue                       # a Redis zone: its shared memory is unused here
        if re.search(r'_1M["_]', line):
            cap = int(line.split()[3])
            check("capacity: %s (want >= %d)" % (line, S.KEYS), cap >= S.KEYS)
    say("\n".join(lines))
    if bad:
        die("sanity check failed: the figures would not mean what they claim (KEEP=1 keeps %s)" % St.tmp)
    return lines


# ---------------------------------------------------------------- fill
def fill():
    """send each key 1..KEYS once to every many-key zone (limit_req's and this module's), so
    that the "1M" rows measure lookups in a zone holding ~KEYS keys, not inserts into a filling one"""
    filled = []
    for c in St.sel:
        if c.kind != "many" or c.check == "plain":
            continue
        if c.algo == C.CONC and c.store == "redis":
            # a key's sorted set lives only while a request holds a slot (the release deletes
            # the last member, and with it the key): there is nothing to fill
            say("== not filled %s: a Redis concurrency key lives only while a request holds a slot" % c.name)
            filled.append("%s: not filled (a Redis concurrency key lives only while a request holds a slot)" % c.name)
            continue
        sent, nxt, t0, non2xx = 0, 1, int(time.time()), 0
        out = "%s/out/fill-%s" % (St.tmp, c.name)
        while sent < S.KEYS and int(time.time()) - t0 < S.FILL_MAX:
            secs = min((S.KEYS - sent) // 60000 + 1, 5)
            run_wrk(out, secs, "http://127.0.0.1:%d/" % St.port[c.name], os.path.join(HERE, "walk-keys.lua"),
                    (S.KEYS, nxt, S.PIPELINE))
            _, got, bad, _ = parse_wrk(out)
            if got <= 0:
                die("fill of %s failed: %s" % (c.name, open(out, errors="replace").read()))
            non2xx += bad
            sent += got
            nxt = (nxt - 1 + got) % S.KEYS + 1
        extra = ", keys in Redis %s now (per node): %s" % (c.redis, redis_dbsizes(c.redis)) if c.redis else ""
        say("== filled %s: %d requests over keys 1..%d in %ds, non-2xx %d%s"
            % (c.name, sent, S.KEYS, int(time.time()) - t0, non2xx, extra))
        filled.append("%s: %d requests, non-2xx %d%s" % (c.name, sent, non2xx, extra))
    return filled


# ---------------------------------------------------------------- measure
ERROR_LINE = re.compile(rb"\[(error|crit|alert|emerg)\]")


def measure(c, out):
    """warm up, then one measured run (with latency.py alongside), then latency.py alone; the
    run's raw counters (report.figures() turns them into figures). CPU counters are read
    around the measured wrk run; "busy" is of the CPUs the case uses: nginx's and wrk's, and
    Redis's if pinned (all CPUs for 2 workers or an unpinned Redis)."""
    w, srv = c.workers, c.redis
    workers = St.nginx[w][1]
    rp = St.redis[srv]["pids"] if srv else []
    rcpu = redis_cpu(srv) if srv else ""
    cpus = {S.NGINX_CPU, S.WRK_CPU}
    if w > 1 or (srv and (not rcpu or "-" in rcpu)):
        cpus = set(St.all_cpus)
    elif srv:
        cpus |= {int(x) for x in rcpu.split(",")}
    errlog = "%s/ng%d/error.log" % (St.tmp, w)

    load_case(out + ".warmup", S.WARMUP, c)
    k0 = cm0 = k1 = cm1 = n0 = n1 = 0
    ic0 = ic1 = 0.0
    cs0 = cs1 = us0 = us1 = {}
    mc0 = module_redis_counts(w, c.redis_name)
    if srv:
        cs0, us0 = redis_cmdtable(srv)
        k0, cm0 = counts_of(cs0)
        ic0 = redis_info_cpu(srv)
        n0 = redis_conns(srv)
    e0 = os.path.getsize(errlog)
    p0, r0, a0 = sum(proc_ticks(workers)), proc_ticks(rp), sum(proc_ticks(all_redis_pids()))
    b0, m0, c0, w0 = cpu_ticks(cpus), cpu_ticks(St.all_cpus), children_cpu(), time.time()
    if S.LAT_LOADED == "1":
        # the probe ends a little before wrk; it is reaped after c1, so its CPU time is not wrk's
        latency_probe(out + ".loaded", S.DURATION - 1 if S.DURATION > 2 else 1, c)
    load_case(out, S.DURATION, c)
    w1 = time.time()
    p1, r1, a1 = sum(proc_ticks(workers)), proc_ticks(rp), sum(proc_ticks(all_redis_pids()))
    b1, m1, c1 = cpu_ticks(cpus), cpu_ticks(St.all_cpus), children_cpu()
    wait_probe()
    for p in workers:
        if not _alive(p):
            die("an nginx worker died during %s: %s" % (c.name, run(["tail", "-5", errlog])))
    if srv:
        n1 = redis_conns(srv)
        cs1, us1 = redis_cmdtable(srv)
        k1, cm1 = counts_of(cs1)
        ic1 = redis_info_cpu(srv)
    mc1 = module_redis_counts(w, c.redis_name)
    with open(errlog, "rb") as f:
        f.seek(e0)
        elog = sum(1 for line in f if ERROR_LINE.search(line))
    lat = None
    if S.LAT_DURATION > 0:
        latency_probe(out + ".alone", S.LAT_DURATION, c)
        wait_probe()
        lat = probe_p99(out + ".alone")
    rps, n, non2xx, sock = parse_wrk(out)
    return {
        "rps": rps, "requests": n, "non2xx": non2xx, "sock": sock,
        "p99_loaded": probe_p99(out + ".loaded"), "p99_alone": lat, "elog": elog,
        "hz": HZ, "wall": w1 - w0, "wrk_cpu": c1 - c0, "nginx_ticks": p1 - p0, "all_redis_ticks": a1 - a0,
        "busy_ticks": b1[0] - b0[0], "softirq_ticks": b1[1] - b0[1], "machine_ticks": sum(m1) - sum(m0),
        "redis": srv, "redis_node_ticks": [y - x for x, y in zip(r0, r1)],
        "script_calls": k1 - k0, "commands": cm1 - cm0, "redis_info_cpu": ic1 - ic0,
        "cmdstats": {k: v - cs0.get(k, 0) for k, v in cs1.items() if v != cs0.get(k, 0)},
        "cmdusec": {k: v - us0.get(k, 0) for k, v in us1.items() if v != us0.get(k, 0)},
        "module_calls": mc1[0] - mc0[0], "module_checks": mc1[1] - mc0[1],
        "redis_tls": bool(srv) and St.redis[srv]["tls"], "redis_conns": n1 - n0,
    }


def wait_quiet():
    """before a measurement, wait (at most QUIET_WAIT seconds) until the two CPUs are nearly
    idle for half a second: other work on this machine (builds, tests) would otherwise take CPU
    time from nginx or wrk and lower the figure of whichever case runs meanwhile; the seconds waited"""
    t0 = time.time()
    while time.time() - t0 < S.QUIET_WAIT and since_start() < S.MAX_TIME:
        b0 = cpu_ticks({S.NGINX_CPU, S.WRK_CPU})
        time.sleep(0.5)
        b1 = cpu_ticks({S.NGINX_CPU, S.WRK_CPU})
        if (b1[0] - b0[0] + b1[1] - b0[1]) * 200 // HZ <= 15:     # <= 15% of one CPU
            break
    return time.time() - t0


def measure_all():
    """every case, round-robin ROUNDS times; a run during which something else kept the CPUs
    busy is measured again (at most RETRIES times; the last attempt is kept whatever it shows)"""
    total = S.ROUNDS * len(St.sel)
    say("== measuring %d cases x %d rounds x (%ds + %ds + %ds): ~%d min" % (
        len(St.sel), S.ROUNDS, S.WARMUP, S.DURATION, S.LAT_DURATION,
        total * (S.WARMUP + S.DURATION + S.LAT_DURATION + 1) // 60 + 1))
    k = retried = 0
    waited = 0.0
    for rnd in range(1, S.ROUNDS + 1):
        for c in St.sel:
            out = "%s/out/%s.%d" % (St.tmp, c.name, rnd)
            k += 1
            for attempt in range(S.RETRIES + 1):
                waited += wait_quiet()
                raw = measure(c, out)
                with open(out + ".json", "w") as f:
                    json.dump(raw, f)
                fig = report.figures(raw)
                say("[%d/%d] round %d %-19s %s" % (k, total, rnd, c.name, report.progress(fig)))
                if not report.disturbed(fig, S.OTHER_MAX) or since_start() >= S.MAX_TIME:
                    break
                if attempt < S.RETRIES:
                    say("   disturbed (other %.0f%% > %d%%): measuring again" % (fig["other_pct"], S.OTHER_MAX))
                    retried += 1
                    os.rename(out, "%s.disturbed%d" % (out, attempt))   # kept for KEEP=1
    return retried, int(waited)


def main():
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    try:
        setup()
        St.meta["sanity"] = sanity()
        St.meta["filled"] = fill() if S.FILL == "1" else []
        St.meta["retried"], St.meta["waited"] = measure_all()
        # nginx's connections to each server over the whole run (start, sanity, fill, warm-ups,
        # measured runs): on a TLS server, every TLS handshake nginx made
        St.meta["redis_conns"] = {srv: redis_conns(srv) for srv in St.redis}
        St.meta["redis_tls"] = [srv for srv in St.redis if St.redis[srv]["tls"]]
        St.meta["elapsed"] = int(since_start())
        outdir = St.tmp + "/out"
        with open(outdir + "/meta.json", "w") as f:
            json.dump(St.meta, f, indent=1)
        report.report(*report.load(outdir))
    except KeyboardInterrupt:
        sys.exit(130)
    finally:
        cleanup()


if __name__ == "__main__":
    main()
