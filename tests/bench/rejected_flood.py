#!/usr/bin/env python3
"""What remembering Redis's rejections (src/core/keys/rejected.h) saves when one client floods one key.

    python3 tests/bench/rejected_flood.py        (settings below, in the environment)

One nginx (WORKERS workers, not pinned), two redis-servers: the flood's zone alone on one (its
INFO commandstats are the flood's), the other zones on the other. Zones, each on a
ratelimit_redis of its own (the module's metrics count each one's script calls and checks):

- flood:  key=$arg_k rate=100r/s burst=10, one key flooded by wrk at up to ~100x its limit
          (FLOOD_CONNS connections writing FLOOD_DEPTH pipelined requests, then waiting 1 ms
          after their answers: paced.lua; the rate reached is reported);
- normal: the same limit, keys 1..NORMAL_KEYS at random from a probe sending one request at a
          time (latency.py, a few requests per key and second: all admitted); its latency
          alone and beside the flood;
- slow:   key=$arg_k rate=1r/m, one key rejected once, then flooded: Redis's commands meanwhile;
- shm:    the flood's limit in shared memory, flooded as fast as answers come (FAST_CONNS
          connections, no pace) beside the Redis zone flooded the same way (one after the other, the
          order alternating by round): req/s of each.

Per round (ROUNDS, each phase DURATION seconds, a fresh key each): the probe alone; the probe
beside the paced flood; the unpaced flood of the Redis zone, then of the shm zone. Once, before
the rounds: the slow key. Reported: each round, and the medians.

Redis's work per 1000 rejected flood requests (429, as wrk counts them), net of what the
admitted ones need, from the module's metrics for the flood's ratelimit_redis: script calls
(nginx_ratelimit_redis_calls_total) less one per admitted request (the most it needs; a unit
frees every 10 ms, so a call per admission is the floor), as the issue counts "today 500-765";
and checks (nginx_ratelimit_redis_checks_total, one per request and zone that asked Redis) less
one per admitted request: how many rejected requests asked Redis at all (batched, many share a
call). Gross, beside them: every command the flood's Redis ran (FCALL and what runs inside it).
Issue 33's figure: script calls per admitted request (a unit frees every 10 ms and one call per
freed unit is the floor, 1.0; more is the herd of requests that ask Redis at once when a
remembered rejection runs out).

Settings: DURATION (5), ROUNDS (3), WORKERS (2), FLOOD_CONNS (10), FLOOD_DEPTH (2), FAST_CONNS
(8), NORMAL_KEYS (1000), NGINX_BIN (/usr/sbin/nginx), SO (build/ngx_http_ratelimit_module.so:
another build, e.g. one without the cache, measures the same for comparison), KEEP (1: keep the
temporary directory). A benchmark: it prints figures and never fails because of one (it exits
non-zero only if it cannot set up what it measures).
"""
import os
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
DURATION = float(os.environ.get("DURATION", "5"))
ROUNDS = int(os.environ.get("ROUNDS", "3"))
WORKERS = int(os.environ.get("WORKERS", "2"))
FLOOD_CONNS = int(os.environ.get("FLOOD_CONNS", "10"))
FLOOD_DEPTH = int(os.environ.get("FLOOD_DEPTH", "2"))
FAST_CONNS = int(os.environ.get("FAST_CONNS", "8"))
NORMAL_KEYS = int(os.environ.get("NORMAL_KEYS", "1000"))
NGINX_BIN = os.environ.get("NGINX_BIN", "/usr/sbin/nginx")
SO = os.path.abspath(os.environ.get("SO", os.path.join(ROOT, "build/ngx_http_ratelimit_module.so")))
LIMIT_RPS = 100  # the flood's and the normal traffic's rate
ZONES = {"flood": "rate=100r/s burst=10", "normal": "rate=100r/s burst=10", "slow": "rate=1r/m"}


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def wait_port(port, secs=10):
    end = time.time() + secs
    while time.time() < end:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            time.sleep(0.05)
    sys.exit("rejected_flood.py: nothing listens on port %d" % port)


class Redis:
    def __init__(self, tmp, name):
        d = os.path.join(tmp, name)
        os.mkdir(d)
        self.port = free_port()
        subprocess.run(["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
                        "--appendonly", "no", "--dir", d, "--daemonize", "yes", "--pidfile", d + "/redis.pid",
                        "--logfile", d + "/redis.log"], check=True, stdout=subprocess.DEVNULL)
        wait_port(self.port)

    def cli(self, *args):
        return subprocess.run(["redis-cli", "-p", str(self.port)] + list(args), check=True,
                              capture_output=True, text=True).stdout

    def commands(self):
        """Every command Redis has run (inside function calls too), by name, INFO left out."""
        stats = re.findall(r"cmdstat_([a-z|_-]+):calls=(\d+)", self.cli("INFO", "commandstats"))
        return {name: int(calls) for name, calls in stats if name != "info"}

    def stop(self):
        try:
            self.cli("SHUTDOWN", "NOSAVE")
        except subprocess.CalledProcessError:
            pass


def commands_since(before, after):
    """(total, "NAME n, ...") of the commands run between two Redis.commands()."""
    d = {k: v - before.get(k, 0) for k, v in after.items() if v != before.get(k, 0)}
    return sum(d.values()), ", ".join("%s %d" % (k.upper(), v) for k, v in sorted(d.items()))


def nginx_conf(tmp, so, servers, ports):
    lines = ["load_module %s;" % so] + (["user nobody nogroup;"] if os.geteuid() == 0 else []) + [
        "worker_processes %d;" % WORKERS, "pid %s/nginx.pid;" % tmp, "error_log %s/error.log warn;" % tmp,
        "events { worker_connections 4096; }", "http { access_log off; keepalive_requests 100000000;"]
    for z, limit in ZONES.items():
        lines.append("  ratelimit_redis %s 127.0.0.1:%d;" % (z, servers["flood" if z == "flood" else "other"].port))
        lines.append("  ratelimit_zone %s key=$arg_k %s redis=%s;" % (z, limit, z))
    lines.append("  ratelimit_zone shm key=$arg_k %s;" % ZONES["flood"])
    for z in list(ZONES) + ["shm"]:
        lines.append("  server { listen 127.0.0.1:%d; location / { ratelimit zone=%s; empty_gif; } }" % (ports[z], z))
    lines.append("  server { listen 127.0.0.1:%d; location = /metrics { ratelimit_metrics; } }" % ports["metrics"])
    lines.append("}")
    return "\n".join(lines) + "\n"


def redis_counts(port, name):
    """(script calls, checks) the module sent to ratelimit_redis `name` (its metrics)."""
    text = urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port, timeout=5).read().decode()
    out = []
    for what in ("calls", "checks"):
        m = re.search(r'^nginx_ratelimit_redis_%s_total\{redis="%s"\} (\d+)' % (what, name), text, re.M)
        out.append(int(m.group(1)) if m else 0)
    return out


def wrk(url, secs, conns, script=None, args=()):
    cmd = ["wrk", "-t1", "-c%d" % conns, "-d%ds" % max(1, round(secs)), url]
    if script:
        cmd += ["-s", os.path.join(HERE, script), "--"] + list(args)
    out = subprocess.run(cmd, capture_output=True, text=True).stdout
    m = re.search(r"(\d+) requests in ([\d.]+)(m?s)", out)
    if not m:
        sys.exit("rejected_flood.py: wrk said: " + out)
    n = int(m.group(1))
    secs_run = float(m.group(2)) / (1000 if m.group(3) == "ms" else 1)
    rejected = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    errors = re.search(r"Socket errors: (.*)", out)
    return {"requests": n, "rejected": int(rejected.group(1)) if rejected else 0, "rps": n / secs_run,
            "errors": errors.group(1) if errors else ""}


def probe(port, secs):
    """Starts the latency probe (the normal traffic); probe_result() waits for it."""
    return subprocess.Popen([sys.executable, os.path.join(HERE, "latency.py"), str(port), str(secs),
                             str(NORMAL_KEYS)], stdout=subprocess.PIPE, text=True)


def probe_result(p):
    out = p.communicate()[0].split()
    return {"count": int(out[0]), "p50": float(out[1]), "p99": float(out[3])}


def status(url):
    try:
        return urllib.request.urlopen(url, timeout=5).status
    except urllib.error.HTTPError as e:
        return e.code


def loadavg():
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def slow_key(ports, redis):
    """rate=1r/m: once rejected, the key's flood makes no Redis command at all."""
    url = "http://127.0.0.1:%d/x?k=slow-%d" % (ports["slow"], time.time_ns())
    codes = [status(url), status(url)]
    if codes != [200, 429]:
        sys.exit("rejected_flood.py: slow key: %s, expected 200 then 429" % codes)
    time.sleep(0.2)
    c0, (k0, _) = redis.commands(), redis_counts(ports["metrics"], "slow")
    w = wrk(url, DURATION, FAST_CONNS)
    time.sleep(0.2)
    c1, (k1, _) = redis.commands(), redis_counts(ports["metrics"], "slow")
    n, which = commands_since(c0, c1)
    return dict(w, commands=n, which=which, calls=k1 - k0)


def one_round(ports, flood_redis, r):
    row = {}
    p = probe(ports["normal"], DURATION)
    row["alone"] = probe_result(p)

    url = "http://127.0.0.1:%d/x?k=hot-%d" % (ports["flood"], r)
    c0, (k0, ch0) = flood_redis.commands(), redis_counts(ports["metrics"], "flood")
    p = probe(ports["normal"], DURATION)
    w = wrk(url, DURATION, FLOOD_CONNS, "paced.lua", ["1", str(FLOOD_DEPTH)])
    row["beside"] = probe_result(p)
    time.sleep(0.2)  # the last answers' calls counted
    c1, (k1, ch1) = flood_redis.commands(), redis_counts(ports["metrics"], "flood")
    admitted, rejected = w["requests"] - w["rejected"], max(1, w["rejected"])
    row["flood"] = dict(w, admitted=admitted, calls=k1 - k0, checks=ch1 - ch0,
                        commands=commands_since(c0, c1)[0],
                        net_calls=1000.0 * max(0, k1 - k0 - admitted) / rejected,
                        per_admission=(k1 - k0) / admitted if admitted else 0.0,
                        net_checks=1000.0 * max(0, ch1 - ch0 - admitted) / rejected,
                        commands_per=1000.0 * commands_since(c0, c1)[0] / rejected)

    # Unpaced, one zone after the other (which first alternates by round), a key of its own each.
    for z in (("flood", "shm") if r % 2 == 0 else ("shm", "flood")):
        row["fast_redis" if z == "flood" else "fast_shm"] = wrk("http://127.0.0.1:%d/x?k=fast-%d" % (ports[z], r),
                                                                DURATION, FAST_CONNS)
    return row


def med(rows, f):
    return statistics.median(f(x) for x in rows)


def report(slow, rows, load0, load1):
    print("Module %s; nginx %d workers, not pinned; %d CPUs; %d rounds of %gs; load average before %s, after %s."
          % (SO, WORKERS, os.cpu_count(), len(rows), DURATION, load0, load1))
    print()
    print("| round | flood req/s (x limit) | rejected / admitted | script calls / checks | script calls per admission "
          "| per 1000 rejected, net: script calls / checks | Redis commands per 1000 rejected | normal p50 / p99 alone "
          "| normal p50 / p99 beside the flood | unpaced flood req/s: Redis / shm | ratio |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for i, x in enumerate(rows):
        f = x["flood"]
        print("| %d | %.0f (%.0fx) | %d / %d | %d / %d | **%.2f** | %.1f / %.1f | %.1f | %.3f / %.3f ms | %.3f / %.3f ms "
              "| %.0f / %.0f | %.2fx |" % (i + 1, f["rps"], f["rps"] / LIMIT_RPS, f["rejected"], f["admitted"],
                                         f["calls"], f["checks"], f["per_admission"], f["net_calls"], f["net_checks"],
                                         f["commands_per"], x["alone"]["p50"], x["alone"]["p99"],
                             x["beside"]["p50"], x["beside"]["p99"], x["fast_redis"]["rps"], x["fast_shm"]["rps"],
                             x["fast_redis"]["rps"] / x["fast_shm"]["rps"]))
    print()
    net = med(rows, lambda x: x["flood"]["net_calls"])
    per = med(rows, lambda x: x["flood"]["per_admission"])
    print("Medians: script calls per admission **%.2f** (issue 33's target <= 1.2: %s; spread %.2f-%.2f); script calls "
          "per 1000 rejected flood requests, net of one per admitted request: **%.1f** "
          "(target <= 30: %s); rejected requests that asked Redis (checks), per 1000: %.1f; Redis commands per "
          "1000 rejected (gross) %.1f; unpaced flood, the Redis zone against the shared-memory zone **%.2fx** "
          "(%.0f against %.0f req/s); normal traffic p50 / p99 %.3f / %.3f ms alone, %.3f / %.3f ms beside the "
          "flood." % (per, "met" if per <= 1.2 else "not met", min(x["flood"]["per_admission"] for x in rows),
                      max(x["flood"]["per_admission"] for x in rows),
                      net, "met" if net <= 30 else "not met", med(rows, lambda x: x["flood"]["net_checks"]),
                      med(rows, lambda x: x["flood"]["commands_per"]),
             med(rows, lambda x: x["fast_redis"]["rps"] / x["fast_shm"]["rps"]),
             med(rows, lambda x: x["fast_redis"]["rps"]), med(rows, lambda x: x["fast_shm"]["rps"]),
             med(rows, lambda x: x["alone"]["p50"]), med(rows, lambda x: x["alone"]["p99"]),
             med(rows, lambda x: x["beside"]["p50"]), med(rows, lambda x: x["beside"]["p99"])))
    print()
    print("rate=1r/m, one key rejected, then flooded (%.0f req/s, %d requests, %d rejected): **%d Redis "
          "commands**%s (INFO commandstats, INFO left out; its server serves no other traffic then), %d "
          "script calls (target 0: %s)." % (slow["rps"], slow["requests"], slow["rejected"], slow["commands"],
                                             " (%s)" % slow["which"] if slow["which"] else "", slow["calls"],
                                             "met" if slow["commands"] == 0 else "not met"))
    errors = [x[k]["errors"] for x in rows for k in ("flood", "fast_redis", "fast_shm") if x[k]["errors"]]
    if errors:
        print()
        print("wrk socket errors: " + "; ".join(errors))


def main():
    for c in ("wrk", "redis-server", "redis-cli"):
        if shutil.which(c) is None:
            sys.exit("rejected_flood.py: %s is not installed" % c)
    if not os.path.exists(SO):
        sys.exit("rejected_flood.py: no module at %s (./build.sh build)" % SO)
    tmp = tempfile.mkdtemp(prefix="rlflood.")
    so = os.path.join(tmp, "module.so")
    shutil.copy(SO, so)
    servers = {}
    conf = os.path.join(tmp, "nginx.conf")
    started = False
    try:
        servers = {name: Redis(tmp, name) for name in ("flood", "other")}
        ports = {k: free_port() for k in list(ZONES) + ["shm", "metrics"]}
        with open(conf, "w") as f:
            f.write(nginx_conf(tmp, so, servers, ports))
        subprocess.run([NGINX_BIN, "-p", tmp, "-c", conf], check=True)
        started = True
        for p in ports.values():
            wait_port(p)
        load0 = loadavg()
        log("slow key (rate=1r/m) ...")
        slow = slow_key(ports, servers["other"])
        rows = []
        for r in range(ROUNDS):
            log("round %d/%d ..." % (r + 1, ROUNDS))
            rows.append(one_round(ports, servers["flood"], r))
        report(slow, rows, load0, loadavg())
    finally:
        if started:
            subprocess.run([NGINX_BIN, "-p", tmp, "-c", conf, "-s", "stop"], stderr=subprocess.DEVNULL)
            time.sleep(0.5)
        for s in servers.values():
            s.stop()
        if os.environ.get("KEEP") == "1":
            log("kept " + tmp)
        else:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
