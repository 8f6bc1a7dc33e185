#!/usr/bin/env python3
"""The arithmetic and the Markdown report of run.sh (bench.py measures, this computes).

    python3 tests/bench/report.py DIR     rewrites the report of a run kept with KEEP=1
                                          (DIR: the kept directory, which holds out/)

bench.py writes, in DIR/out/, meta.json (settings, machine, sanity checks, ...) and one
NAME.ROUND.json per measured run: the raw counters of that run (see figures()). Everything
computed from them is here: the figures of one run (CPU shares, per-request and
per-1000-request costs), medians over rounds, same-round ratios, target checks, the report.
"""
import json
import math
import os
import sys

sys.dont_write_bytecode = True
import cases as C  # noqa: E402  (after dont_write_bytecode: no __pycache__ in tests/bench)

SCRIPT_CMDS = {"eval", "evalsha", "eval_ro", "evalsha_ro", "fcall", "fcall_ro"}  # the script calls


# ---------------------------------------------------------------- one run
def figures(raw):
    """The figures of one measured run, from its raw counters:
      rps          req/s (wrk)
      p99_load     latency.py's p99 (ms) alongside the measured run; None if it failed
      p99_alone    the same, alone after it (None: none)
      us_per_req   nginx workers' user+system CPU time per request (us)
      nginx_pct, wrk_pct   their CPU time, in % of one CPU over the wall time of the run
      other_pct    what else kept the CPUs the case uses busy (other processes; irq/softirq
                   apart), % of one CPU: a high value means a disturbed run
      softirq_pct  irq + softirq on those CPUs; busy_pct: all CPUs busy, irq/softirq included
      requests, non2xx, sock (socket errors), elog (error.log lines at level error or above)
    and for a case with Redis (None otherwise):
      redis_pct, redis_node_pct   Redis's CPU (/proc: all its nodes; and per node), % of one CPU
      redis_ms_1k_checks          Redis CPU ms per 1000 checks (requests answered; one request,
                                  one check)
      checks_per_call             requests per script call
      cmds_1k       Redis commands per 1000 requests (INFO commandstats, INFO itself left out;
                    the commands scripts run count too)
      info_cpu_ms_1k   Redis CPU ms per 1000 requests as INFO cpu says (used_cpu_sys + user)
      calls_1k      script calls (EVAL, EVALSHA, FCALL and their _RO forms) per 1000 requests:
                    all the module sends once connected (checks, refunds, sync rounds,
                    heartbeats, lease asks)
      cmd_1k        {command: calls per 1000 requests} of every command Redis ran (INFO
                    commandstats; inside scripts too; INFO left out); None for runs kept before
                    it was recorded
      conns, conns_1k   connections the server accepted from nginx during the run (INFO stats'
                    total_connections_received, the bench's own redis-cli runs left out), and
                    per 1000 requests: on a TLS server (tls), each one a TLS handshake
      checks        the checks the case's ratelimit_redis sent (the module's metrics, METRICS=1),
                    else the requests (one request, one check; a sync zone's: per request)
      mod_checks_per_call   checks per script call as the module's metrics count them (None
                    without them, and for sync zones, whose calls are rounds)
      script_us_check   Redis's time inside the script calls (INFO commandstats usec of FCALL,
                    EVALSHA...: the Lua and the commands it runs, without parsing and network),
                    per check
      inner_us_check    of that, the time inside the commands the scripts ran (GET, SET, ...)
      inner_per_check   {command: calls per check} of those commands (TIME, GET, SET...)"""
    hz, wall, n = raw["hz"], raw["wall"], raw["requests"]
    ng = raw["nginx_ticks"] / hz
    w = raw["wrk_cpu"]
    other = max(0.0, raw["busy_ticks"] / hz - ng - w - raw["all_redis_ticks"] / hz)
    f = {
        "rps": raw["rps"], "p99_load": raw["p99_loaded"], "p99_alone": raw["p99_alone"],
        "us_per_req": 1e6 * ng / n if n else 0.0,
        "nginx_pct": 100 * ng / wall, "wrk_pct": 100 * w / wall, "other_pct": 100 * other / wall,
        "softirq_pct": 100 * raw["softirq_ticks"] / hz / wall,
        "busy_pct": 100 * raw["machine_ticks"] / hz / wall,
        "requests": n, "non2xx": raw["non2xx"], "sock": raw["sock"], "elog": raw["elog"],
    }
    redis = {k: None for k in ("redis_pct", "redis_node_pct", "redis_ms_1k_checks", "checks_per_call",
                               "cmds_1k", "info_cpu_ms_1k", "calls_1k", "conns", "conns_1k", "cmd_1k")}
    redis.update({k: None for k in ("checks", "mod_checks_per_call", "script_us_check", "inner_us_check",
                                    "inner_per_check")})
    redis["tls"] = bool(raw.get("redis_tls"))
    if raw["redis"]:
        node = [t / hz for t in raw["redis_node_ticks"]]
        tot, k = sum(node), raw["script_calls"]
        redis.update(
            redis_pct=100 * tot / wall,
            redis_node_pct=[100 * t / wall for t in node],
            redis_ms_1k_checks=1e6 * tot / n if n else 0.0,
            checks_per_call=n / k if k else 0.0,
            cmds_1k=1000 * raw["commands"] / n if n else 0.0,
            info_cpu_ms_1k=1e6 * raw["redis_info_cpu"] / n if n else 0.0,
            calls_1k=1000 * k / n if n else 0.0)
        if "cmdstats" in raw:                     # runs kept before it was recorded have none
            redis.update(cmd_1k={k: 1000 * v / n if n else 0.0 for k, v in raw["cmdstats"].items()})
        if "redis_conns" in raw:                  # runs kept before it was counted have none
            redis.update(conns=raw["redis_conns"], conns_1k=1000 * raw["redis_conns"] / n if n else 0.0)
        if "cmdusec" in raw:                      # runs kept before it was recorded have none
            mk, mc = raw["module_checks"], raw["module_calls"]
            checks = mk if mk > 0 else n
            usec, calls = raw["cmdusec"], raw["cmdstats"]
            inner = [c for c in calls if c not in SCRIPT_CMDS]
            redis.update(
                checks=checks, mod_checks_per_call=mk / mc if mc else None,
                script_us_check=sum(v for c, v in usec.items() if c in SCRIPT_CMDS) / checks if checks else None,
                inner_us_check=sum(usec.get(c, 0) for c in inner) / checks if checks else None,
                inner_per_check={c: calls[c] / checks for c in inner} if checks else None)
    f.update(redis)
    return f


def disturbed(f, other_max):
    """whether other work disturbed the run: "other" (in whole % of a CPU) above OTHER_MAX"""
    return float("%.0f" % f["other_pct"]) > other_max


def fmt(spec, v):
    """spec % v, "-" for nothing (None, nan)"""
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "-"
    return spec % v


def progress(f):
    """the line bench.py prints after each run (without its "[k/total] round r NAME" head)"""
    nodes = "/".join("%.0f" % p for p in f["redis_node_pct"]) if f["redis_node_pct"] else "-"
    lat = {k: "nan" if f[k] is None else "%.3f" % f[k] for k in ("p99_load", "p99_alone")}
    return ("%7.0f req/s p99 %s ms (alone %s) nginx %3.0f%% %5.2f us/req wrk %3.0f%% redis %s%% (%s) %s ms/1k, "
            "%s/call, %s calls/1k, %s cmds/1k other %.0f%% softirq %.0f%% all %.0f%% non-2xx %d err %d log %d") % (
        f["rps"], lat["p99_load"], lat["p99_alone"], f["nginx_pct"], f["us_per_req"],
        f["wrk_pct"], fmt("%.1f", f["redis_pct"]), nodes, fmt("%.3f", f["redis_ms_1k_checks"]),
        fmt("%.1f", f["checks_per_call"]), fmt("%.3f", f["calls_1k"]), fmt("%.3f", f["cmds_1k"]),
        f["other_pct"], f["softirq_pct"], f["busy_pct"], f["non2xx"], f["sock"], f["elog"])


# ---------------------------------------------------------------- over rounds
def median(values):
    """the median of the numbers (None and nan left out); None if there is none"""
    v = sorted(x for x in values if x is not None and not (isinstance(x, float) and math.isnan(x)))
    if not v:
        return None
    m = len(v) // 2
    return v[m] if len(v) % 2 else (v[m - 1] + v[m]) / 2


class Runs:
    """the figures of every selected case, one per round (the last attempt of each)"""

    def __init__(self, figs):
        self.figs = figs                      # name -> [figures of round 1, 2, ...]

    def __contains__(self, name):
        return bool(name) and name in self.figs

    def col(self, name, key):
        """the median over rounds of one figure"""
        return median(f[key] for f in self.figs[name])

    def colv(self, name, key):
        """the median over rounds of each part of a per-node figure, "a/b/c" """
        rounds = self.figs[name]
        parts = len(rounds[0][key] or [])
        return "/".join("%.0f" % median(f[key][j] for f in rounds) for j in range(parts))

    def cmd(self, name, command):
        """the median over rounds of one command's calls per 1000 requests (0 in a round
        that ran none); None if the runs did not record them"""
        rounds = self.figs[name]
        if any(f["cmd_1k"] is None for f in rounds):
            return None
        return median(f["cmd_1k"].get(command, 0.0) for f in rounds)

    def commands(self, name):
        """every command the runs of that case ran, most called first (median per 1000 requests)"""
        rounds = self.figs[name]
        if any(f["cmd_1k"] is None for f in rounds):
            return []
        names = set().union(*(f["cmd_1k"] for f in rounds))
        return sorted(((c, self.cmd(name, c)) for c in names), key=lambda x: (-x[1], x[0]))

    def ratio_num(self, name, base, key="rps", invert=False):
        """the median over rounds of key(name) / key(base) within the same round (rounds are
        minutes apart and the machine's speed drifts: a same-round ratio cancels the drift);
        invert: key(base) / key(name) (for a cost, e.g. nginx CPU per request: the throughput
        ratio that cost implies)"""
        out = []
        for a, b in zip(self.figs[name], self.figs[base]):
            a, b = a[key], b[key]
            if invert:
                a, b = b, a
            out.append(a / b if b > 0 else 0.0)
        return median(out)

    def ratio(self, name, base):
        return "%.2fx" % self.ratio_num(name, base) if base in self else "-"

    def total(self, name, key):
        return sum(f[key] for f in self.figs[name])


def met(ok):
    return "met" if ok else "NOT met"


# ---------------------------------------------------------------- the report
def report(meta, runs, out=sys.stdout):
    def p(line=""):
        print(line, file=out)

    s = meta["settings"]
    sel = [C.by_name()[n] for n in meta["selected"]]
    names = [c.name for c in sel]
    ncpu, keys = meta["ncpu"], s["KEYS"]
    kl = "%dM" % (keys // 1000000) if keys % 1000000 == 0 else str(keys)
    has_redis = any(c.redis for c in sel)
    col, ratio = runs.col, runs.ratio

    def rps_int(name):
        return "%d" % int(col(name, "rps") + 0.5)

    p("### Benchmark: allowed-path throughput")
    p()
    p("nginx %s, %d CPUs (%s), kernel %s;" % (meta["nginx_version"], ncpu, meta["cpu_model"], meta["kernel"]))
    p("module %s (built %s, sha256 %s..., git %s)." % (meta["so"], meta["so_time"], meta["so_sha"], meta["git_rev"]))
    p("nginx: 1 worker pinned to CPU %s (\"2 nginx workers\" rows: a second nginx, 2 workers not pinned), access_log off, keep-alive;"
      % s["NGINX_CPU"])
    p("wrk -t1 -c%d -d%ds pinned to CPU %s, %d requests per write (HTTP/1.1 pipelining);"
      % (s["CONNS"], s["DURATION"], s["WRK_CPU"], s["PIPELINE"]))
    p("%ds warm-up before each run; %d rounds run round-robin, medians reported; every shared-memory zone %s (limit_req's and ratelimit's);"
      % (s["WARMUP"], s["ROUNDS"], s["ZONE_SIZE"]))
    p("\"%s\" rows: GET /x?k=<random 1..%d> keyed on $arg_k%s; other rows: GET /x keyed on a constant."
      % (kl, keys, ", every key sent once before measuring" if s["FILL"] == "1" else ""))
    if has_redis:
        pin = lambda cpu: "pinned to CPU %s" % cpu if cpu else "not pinned"  # noqa: E731
        p("Redis %s (--save '' --appendonly no); standalone server %s, cluster nodes %s;"
          % (meta["redis_version"], pin(s["REDIS_CPU"]), pin(s["REDIS_CLUSTER_CPU"])))
        p("ratelimit_redis ... timeout=100ms, ratelimit_on_error deny; one standalone server, a cluster of 1 primary, a cluster of 3 primaries.")
    if meta.get("redis_tls"):
        p("TLS rows: redis-server on TLS only (--port 0 --tls-port, --tls-auth-clients no), pinned as the plain one, certificate")
        p("RSA 2048 signed by a CA the bench makes at start with the openssl CLI (SAN IP:127.0.0.1); ratelimit_redis ... ssl")
        p("ssl_trusted_certificate=<that CA> (verified against 127.0.0.1); %s; the server agrees on %s (openssl s_client)."
          % (meta.get("openssl_version", "?"), meta.get("tls_session", "?")))
    p()
    p("| case | keys | req/s | vs plain | vs plain + headers | vs limit_req | p99 under load | p99 alone | nginx CPU/req | nginx CPU "
      "| wrk CPU | Redis CPU | Redis CPU per 1000 checks | CPUs busy (of %d00%%) | other CPU | spread "
      "| non-2xx / socket errors / error.log lines |" % ncpu)
    p("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for c in sel:
        n = c.name
        if c.check.startswith("plain"):
            keycol = "(random URLs)" if c.kind == "many" else "-"
        else:
            keycol = kl if c.kind == "many" else "1"
        vs_lr = "-" if c.check.startswith("plain") else ratio(n, C.lr_of(c.kind, c.workers))
        vs_ph = "-"
        if (c.kind == "one" and c.workers == 1 and c.check.startswith("module") and c.check != "module-noheaders"
                and c.algo != C.CONC and "plain-headers" in runs):   # a concurrency zone's headers differ
            vs_ph = ratio(n, "plain-headers")
        rps = [f["rps"] for f in runs.figs[n]]
        m = col(n, "rps")
        spread = "%.1f%%" % (100 * (max(rps) - min(rps)) / m if m > 0 else 0)
        errcol = "%d / %d / %d" % (runs.total(n, "non2xx"), runs.total(n, "sock"), runs.total(n, "elog"))
        if c.check == "module-reject":
            reqs = runs.total(n, "requests")
            errcol += " (429 expected: %.2f%% of responses)" % (100 * runs.total(n, "non2xx") / reqs if reqs else 0)
        rcpu = "-"
        if c.redis:
            rcpu = fmt("%.0f", col(n, "redis_pct")) + "%"
            if c.redis == "cluster3":
                rcpu += " (%s%% per primary)" % runs.colv(n, "redis_node_pct")
        p("| %s | %s | %s | %s | %s | %s | %s | %s | %.2f us | %.0f%% | %.0f%% | %s | %s | %.0f%% | %.0f%% | %s | %s |" % (
            c.label, keycol, rps_int(n), ratio(n, C.plain_of(c.kind, c.workers, names)), vs_ph, vs_lr,
            fmt("%.2f ms", col(n, "p99_load")), fmt("%.3f ms", col(n, "p99_alone")), col(n, "us_per_req"),
            col(n, "nginx_pct"), col(n, "wrk_pct"), rcpu, fmt("%.2f ms", col(n, "redis_ms_1k_checks")),
            col(n, "busy_pct"), col(n, "other_pct"), spread, errcol))
    p("""
- req/s, p99 and CPU columns: medians over the rounds. "vs plain" and "vs limit_req": the median over rounds
  of the ratio within a round (the machine's speed drifts between rounds), against plain nginx receiving the
  same URLs (one-key rows: GET /x; {kl} rows: the random URLs; with the same number of workers) and
  limit_req with the same key kind. "vs plain + headers" (one-key rows that send RateLimit headers): against plain
  nginx sending the same two headers with add_header (the same response bytes; on loopback, where the kernel's
  send and wake-up dominate the cost of a request, ~75 more bytes per response cost more than the module's own
  work: compare it with "ratelimit_headers off" vs plain).
- "p99 under load", "p99 alone": the p99 of latency.py (one connection, one request at a time, ~20 us of Python
  client included) during the measured run, beside wrk's {conns} connections x {pipeline} pipelined requests (mostly
  the wait behind them, so it follows req/s), and alone for {lat}s after it (what a lone request waits).
- "nginx CPU/req": the workers' user+system CPU time per request; "nginx CPU", "wrk CPU", "Redis CPU": their
  share of one CPU during the run (2 workers: the sum). nginx near 100% per worker and wrk below means nginx
  sets the pace; wrk near 100% means the client does, which narrows req/s differences: compare "nginx CPU/req"
  too. "Redis CPU per 1000 checks": Redis's CPU time (all its nodes) per 1000 requests answered. "CPUs busy":
  all CPUs together, irq and softirq included (near {ncpu}00%: the machine, not one process, is the limit). "other CPU":
  what else kept the CPUs the case uses busy (other processes; not irq/softirq, which is mostly the
  benchmark's own loopback traffic), in % of one CPU; a run above {other_max}% is measured again (at most
  {retries} times). "spread": (max - min) / median of req/s over the rounds.
- "non-2xx / socket errors / error.log lines": summed over the measured runs; error.log lines at level error
  or above (a Redis error would show there and as a 503).
- ratelimit quotas (never reached): gcra/token/leaky requests=1000000000 period=1s burst=1000;
  sliding/fixed requests=1000000000 period=1s; log with one key requests=1000000 period=1s (an 8 MB ring),
  log with {kl} keys requests=10 period=1s (136-byte slots: a key is drawn ~0.1 times a second).
  Redis, {kl} keys: gcra requests=10 period=1d burst=1000, sliding requests=1000 period=1d (state that
  lasts, so that Redis holds ~{kl} keys); Redis, one key: as in shared memory; "rejected (429)": gcra
  requests=1 period=1h, so every request after the first is rejected (logged at ratelimit_log_level info,
  below the log's level: the row measures rejecting, not writing an error.log line per request).
  limit_req: rate=100000000r/s, limit_req burst=1000000 nodelay (a burst because limit_req counts all the
  requests of one millisecond against it).
  concurrency=1000000 rows: an in-flight limit never reached (wrk keeps at most {inflight} requests in flight),
  in shared memory and in Redis (hold=30s, the default), the same whatever the key kind.
  sync=100ms rows: the same quotas as the Redis rows; "lease, 300000r/s burst=3000000": a quota the one-key
  load nears (a lease's units drain with the global level: on a key used far below its rate they drain
  away before they are spent, and requests wait for grants).""".format(
        kl=kl, conns=s["CONNS"], pipeline=s["PIPELINE"], lat=s["LAT_DURATION"], ncpu=ncpu,
        inflight=s["CONNS"] * s["PIPELINE"],
        other_max=s["OTHER_MAX"], retries=s["RETRIES"]))
    p()
    p("Sanity checks:")
    for line in meta["sanity"]:
        p("  " + line)
    if meta["filled"]:
        p("Zones filled before measuring:")
        for line in meta["filled"]:
            p("  " + line)
    kept = sum(disturbed(f, s["OTHER_MAX"]) for n in names for f in runs.figs[n])
    p("Runs measured again because other work kept the CPUs busy (> %s%% of a CPU): %d;" % (s["OTHER_MAX"], meta["retried"]))
    p("measurements kept although disturbed (other CPU > %s%%): %d;" % (s["OTHER_MAX"], kept))
    p("seconds spent waiting for idle CPUs before measuring: %d." % meta["waited"])
    p()
    p("Targets (reported, not enforced). \"req/s\": same-round req/s ratio, median over rounds; \"CPU\": the")
    p("baseline's nginx CPU per request / the case's (the throughput ratio nginx's own cost implies), same way:")

    def target(label, name, base, minimum):
        if name not in runs or base not in runs:
            return
        r = runs.ratio_num(name, base)
        c = runs.ratio_num(name, base, "us_per_req", invert=True)
        p("  %-40s %-20s req/s %.3fx %-8s CPU %.3fx %s" % (label, name, r, met(r >= minimum), c, met(c >= minimum)))

    # the rate zones' targets (the concurrency zones': in conc_report, against gcra)
    shm = [c for c in sel if c.check.startswith("module") and not c.redis and c.algo != C.CONC]
    for c in shm:
        if c.check != "module-reject" and c.kind == "one":
            target("one key >= 0.97x plain:", c.name, "plain", 0.97)
    for c in shm:
        if c.check == "module" and c.kind == "one":
            target("one key >= 0.97x plain + same headers:", c.name, "plain-headers", 0.97)
    for c in shm:
        if c.check != "module-reject" and c.kind == "many":
            target("%s keys >= 1.0x limit_req %s keys:" % (kl, kl), c.name, "limit_req-1M", 1.0)
    for c in sel:
        if c.check == "module" and c.workers == 1 and c.store == "redis" and c.algo != C.CONC:
            target("Redis, allowed >= 0.75x plain:", c.name, C.plain_of(c.kind, 1, names), 0.75)

    if has_redis:
        p()
        p("Redis: its CPU per 1000 checks, and the p99 latency the check adds (the row's p99 - plain's, same key kind")
        p("and workers; from latency.py under load and alone):")

        def added(a, b):
            return "-" if a is None or b is None else "%+.3f ms" % (a - b)

        for c in sel:
            if not c.redis:
                continue
            n = c.name
            line = "  %-20s Redis %6s ms CPU per 1000 checks, %5s%% of a CPU (%s%% per node), %s checks per script call;" % (
                n, fmt("%.3f", col(n, "redis_ms_1k_checks")), fmt("%.1f", col(n, "redis_pct")),
                runs.colv(n, "redis_node_pct"), fmt("%.1f", col(n, "checks_per_call")))
            base = C.plain_of(c.kind, c.workers, names)
            if base:
                line += " p99 added: under load %s, alone %s" % (
                    added(col(n, "p99_load"), col(base, "p99_load")), added(col(n, "p99_alone"), col(base, "p99_alone")))
            p(line)
        headed = False
        for w in sorted({1} | {c.workers for c in sel}):
            sfx = "-%dw" % w if w > 1 else ""
            a, b = "cluster1-gcra-1M" + sfx, "cluster3-gcra-1M" + sfx
            if a not in runs or b not in runs:
                continue
            if not headed:
                p()
                p("Redis Cluster, %s random keys, checks/s (= req/s) against 1 primary vs 3 primaries:" % kl)
                headed = True
            p("  %d nginx worker(s): 1 primary %.0f/s (Redis %s%%), 3 primaries %.0f/s (Redis %s%% per primary): %.2fx;" % (
                w, col(a, "rps"), runs.colv(a, "redis_node_pct"), col(b, "rps"), runs.colv(b, "redis_node_pct"),
                runs.ratio_num(b, a)))
            p("      nginx CPU %.0f%% vs %.0f%%, wrk CPU %.0f%% vs %.0f%%, all CPUs busy %.0f%% vs %.0f%% (of %d00%%); "
              "Redis CPU per 1000 checks %.3f vs %.3f ms" % (
                  col(a, "nginx_pct"), col(b, "nginx_pct"), col(a, "wrk_pct"), col(b, "wrk_pct"),
                  col(a, "busy_pct"), col(b, "busy_pct"), ncpu, col(a, "redis_ms_1k_checks"), col(b, "redis_ms_1k_checks")))
            # what Redis alone could serve if each primary had a CPU of its own: primaries / (CPU per check)
            ma, mb = col(a, "redis_ms_1k_checks"), col(b, "redis_ms_1k_checks")
            p("      extrapolated, not measured: with a CPU per primary, Redis could serve ~%.0f/s (1 primary) vs ~%.0f/s "
              "(3 primaries): %.2fx" % (1e6 / ma if ma > 0 else 0, 3e6 / mb if mb > 0 else 0, 3 * ma / mb if mb > 0 else 0))

    # Sync zones: each sync row beside the same algorithm in shared memory and in Redis per
    # request (same key kind, same run), with the Redis commands and CPU (INFO) per 1000 requests.
    order = [n for n in ("gcra", "redis-gcra", "sync-gcra", "sync-lease-gcra", "sync-lease-gcra-near",
                         "redis-tls-gcra", "sync-tls-gcra",
                         "gcra-1M", "redis-gcra-1M", "sync-gcra-1M", "sync-lease-gcra-1M",
                         "redis-tls-gcra-1M", "sync-tls-gcra-1M") if n in runs]
    if any(n.startswith("sync-") for n in order):
        p()
        p("Sync zones (sync=100ms), against the same limit in shared memory and in Redis per request, same run")
        p("(ratios: median over rounds of the same-round ratio; Redis: INFO commandstats and INFO cpu before/after each run;")
        p("calls: the script calls the module sends, FCALL or EVALSHA; commands: every command Redis ran, inside scripts too):")
        p()
        p("| case | keys | req/s | vs plain | vs shared memory | vs Redis per request | Redis calls per 1000 requests "
          "| Redis commands per 1000 requests (in scripts too) | Redis CPU per 1000 requests | non-2xx |")
        p("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
        for n in order:
            c = C.by_name()[n]
            many = c.kind == "many"
            shm_n, redis_n = ("gcra-1M", "redis-gcra-1M") if many else ("gcra", "redis-gcra")
            if c.tls:                   # over TLS: against Redis per request over TLS
                redis_n = redis_n.replace("redis-", "redis-tls-")
            p("| %s | %s | %s | %s | %s | %s | %s | %s | %s | %d |" % (
                c.label, kl if many else "1", rps_int(n), ratio(n, C.plain_of(c.kind, 1, names)),
                ratio(n, shm_n) if n != shm_n else "-", ratio(n, redis_n) if n != redis_n else "-",
                fmt("%.2f", col(n, "calls_1k")), fmt("%.1f", col(n, "cmds_1k")), fmt("%.3f ms", col(n, "info_cpu_ms_1k")),
                runs.total(n, "non2xx")))
        p()
        p("Sync targets (reported, not enforced):")
        target("hot key >= 0.95x shared memory:", "sync-gcra", "gcra", 0.95)
        target("hot key >= 0.95x shared memory:", "sync-lease-gcra", "gcra", 0.95)
        target("hot key >= 0.95x shared memory:", "sync-lease-gcra-near", "gcra", 0.95)
        target("%s keys >= 0.85x shared memory:" % kl, "sync-gcra-1M", "gcra-1M", 0.85)
        for n in ("sync-gcra", "sync-lease-gcra", "sync-lease-gcra-near"):
            if n not in runs:
                continue
            calls = col(n, "calls_1k")
            p("  %-40s %-20s %s Redis calls per 1000 requests %s" % (
                "hot key: <= 10 Redis calls per 1000:", n, fmt("%.3f", calls), met(calls is not None and calls <= 10)))
    conc_report(sel, runs, target, kl, names)
    variant_report(sel, runs, target)
    tls_report(meta, sel, runs, target, kl)
    redis_cpu_report(sel, runs, kl, names)
    p()
    p("Reproduce: " + meta["repro"])
    p("Total time: %dm%ds" % (meta["elapsed"] // 60, meta["elapsed"] % 60))


def conc_report(sel, runs, target, kl, names, out=sys.stdout):
    """Concurrency zones against gcra in the same store and key kind (C.conc_base), same run;
    for Redis, every command it ran per request (the script call and the commands inside it,
    the ZREM of the release, the refreshes), from INFO commandstats"""
    def p(line=""):
        print(line, file=out)

    rows = [c for c in sel if c.algo == C.CONC and c.name in runs and C.conc_base(c) in runs]
    if not rows:
        return
    col = runs.col
    p()
    p("Concurrency zones (concurrency=%d: a slot taken and given back per request) against gcra in the same store and" % C.CONC_LIMIT)
    p("key kind, same run (ratios: median over rounds of the same-round ratio; Redis: INFO commandstats and INFO cpu")
    p("before and after each run; commands: every command Redis ran, those inside the script call too, per request):")
    p()
    p("| case | keys | req/s | vs plain | rate zone (gcra) req/s | vs rate zone | nginx CPU/req case / rate zone "
      "| Redis script calls per request | Redis commands per request | of which, per request | Redis CPU per 1000 requests "
      "| non-2xx / error.log lines |")
    p("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- | ---: | ---: |")

    def per_req(v, spec="%.3f"):
        return fmt(spec, None if v is None else v / 1000)

    def detail(n):
        return ", ".join("%s %.3f" % (cmd.upper(), v / 1000) for cmd, v in runs.commands(n) if v >= 1) or "-"

    for c in rows:
        n, b = c.name, C.conc_base(c)
        for name, label in ((n, c.label), (b, C.by_name()[b].label + " (the rate zone)")):
            red = bool(C.by_name()[name].redis)
            p("| %s | %s | %d | %s | %s | %s | %s | %s | %s | %s | %s | %d / %d |" % (
                label, kl if c.kind == "many" else "1", int(col(name, "rps") + 0.5),
                runs.ratio(name, C.plain_of(c.kind, 1, names)),
                "%d" % int(col(b, "rps") + 0.5) if name == n else "-",
                "%.2fx" % runs.ratio_num(n, b) if name == n else "-",
                "%.2f / %.2f us" % (col(n, "us_per_req"), col(b, "us_per_req")) if name == n else "-",
                per_req(col(name, "calls_1k")) if red else "-", per_req(col(name, "cmds_1k"), "%.2f") if red else "-",
                detail(name) if red else "-", fmt("%.3f ms", col(name, "info_cpu_ms_1k")) if red else "-",
                runs.total(name, "non2xx"), runs.total(name, "elog")))
    p()
    p("Concurrency targets (reported, not enforced):")
    for c in rows:
        if c.store == "shm":
            target("concurrency, shm >= 0.95x gcra:", c.name, C.conc_base(c), 0.95)
    for c in rows:
        if c.store == "redis":
            target("concurrency, Redis >= 0.8x Redis gcra:", c.name, C.conc_base(c), 0.8)


# the rows a Redis row's CPU is put beside (issue 33): plain nginx and the shared-memory zone
CPU_BASES = ("plain", "plain-rand", "gcra", "gcra-1M")


def redis_cpu_report(sel, runs, kl, names, out=sys.stdout):
    """Issue 33: each Redis row's CPU per request, the nginx worker's and redis-server's (/proc,
    around each measured run), beside plain nginx and the shared-memory zone of the same run;
    Redis's time per check from its own counters (INFO commandstats: the script calls' usec over
    the checks, the module's metrics counting the checks) and what the scripts ran per check;
    Ratios, never assertions."""
    def p(line=""):
        print(line, file=out)

    rows = [c for c in sel if c.name in runs and (c.redis or c.name in CPU_BASES)]
    if not any(c.redis for c in rows):
        return
    col = runs.col

    def inner(n):
        """the commands the scripts ran per check, most first (medians over rounds)"""
        rounds = [f["inner_per_check"] for f in runs.figs[n] if f["inner_per_check"] is not None]
        if not rounds:
            return "-"
        cmds = set().union(*rounds)
        per = sorted(((median(r.get(c, 0.0) for r in rounds), c) for c in cmds), reverse=True)
        return ", ".join("%s %.2f" % (c.upper(), v) for v, c in per if v >= 0.005) or "-"

    p()
    p("Redis's CPU per request (issue 33): the nginx worker's and redis-server's CPU time (/proc utime + stime, around each")
    p("measured run) per request wrk completed, medians over rounds; \"vs plain\": the worker's CPU per request over plain")
    p("nginx's of the same key kind, same round (median); Redis's time inside its script calls per check from its own")
    p("counters (INFO commandstats usec of FCALL/EVALSHA over the checks the module's metrics count: the Lua and the")
    p("commands it runs, without reading, parsing and writing; per request for sync zones), and of that the commands")
    p("(Redis measures wall time: on a CPU it shares with wrk, the usec include waits for the CPU, and may exceed its")
    p("CPU time); checks per script call (the module's metrics); the commands the scripts ran per check:")
    p()
    p("| case | keys | req/s | nginx worker us/request | vs plain | Redis us/request | total us/request "
      "| Redis script us/check (commandstats) | of which in commands | checks per script call | commands per check "
      "in scripts |")
    p("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |")
    for c in rows:
        n = c.name
        base = C.plain_of(c.kind, c.workers, names)
        ng, rd = col(n, "us_per_req"), col(n, "redis_ms_1k_checks") if c.redis else None
        keycol = ("(random URLs)" if c.kind == "many" else "-") if c.check.startswith("plain") else (
            kl if c.kind == "many" else "1")
        p("| %s | %s | %d | %.2f | %s | %s | %s | %s | %s | %s | %s |" % (
            c.label, keycol, int(col(n, "rps") + 0.5), ng,
            "%.2fx" % runs.ratio_num(n, base, "us_per_req") if base and base != n else "-",
            fmt("%.2f", rd), fmt("%.1f", ng + rd if rd is not None else None),
            fmt("%.2f", col(n, "script_us_check")), fmt("%.2f", col(n, "inner_us_check")),
            fmt("%.1f", col(n, "mod_checks_per_call")), inner(n) if c.redis else "-"))

    p()
    p("Issue 33's targets (reported, not enforced; CPU per request, medians):")

    def at_most(label, n, key, limit):
        if n in runs and col(n, key) is not None:
            v = col(n, key)
            p("  %-52s %-20s %.2f us %s" % (label, n, v, met(v <= limit)))

    at_most("Redis CPU per check, %s keys, <= 4 us:" % kl, "redis-gcra-1M", "redis_ms_1k_checks", 4.0)
    at_most("Redis CPU per check, one hot key, <= 3 us:" , "redis-gcra", "redis_ms_1k_checks", 3.0)
    for n in ("redis-gcra", "redis-gcra-1M"):
        base = C.plain_of(C.by_name()[n].kind, 1, names)
        if n in runs and base in runs:
            r = runs.ratio_num(n, base, "us_per_req")
            p("  %-52s %-20s %.2fx %s" % ("nginx worker CPU per request <= 1.3x plain's:", n, r, met(r <= 1.3)))
    a, b = "sync-lease-gcra-1M", "redis-gcra-1M"
    if a in runs and b in runs:
        r = runs.ratio_num(a, b)
        cr = runs.ratio_num(a, b, "redis_ms_1k_checks")
        bad = runs.total(a, "non2xx")
        p("  %-52s %-20s req/s %.2fx %s, Redis CPU per request %.2fx %s, non-2xx %d %s" % (
            "lease zone, %s keys, vs the per-request zone:" % kl, a, r, met(r >= 1.0), cr, met(cr <= 1.0), bad,
            met(bad == 0)))


# the variants' targets (Case.base): the least same-round req/s ratio each must reach
VARIANT_TARGETS = {"fixed-calendar": ("calendar zone >= 0.97x the same fixed window:", 0.97)}


def variant_report(sel, runs, target, out=sys.stdout):
    """Variants (a case with a base: block=, a calendar window) against their base, same run:
    every round's req/s ratio, the median, and nginx's CPU per request"""
    def p(line=""):
        print(line, file=out)

    rows = [c for c in sel if c.base and c.name in runs and c.base in runs]
    if not rows:
        return
    p()
    p("Variants against the same zone without what they add (same run; ratios: same-round req/s, each round and the median):")
    p()
    p("| case | against | req/s | theirs | ratio per round | ratio (median) | nginx CPU/req case / theirs |")
    p("| --- | --- | ---: | ---: | --- | ---: | ---: |")
    for c in rows:
        n, b = c.name, c.base
        each = " ".join("%.3f" % (x["rps"] / y["rps"] if y["rps"] > 0 else 0.0)
                        for x, y in zip(runs.figs[n], runs.figs[b]))
        p("| %s | %s | %d | %d | %s | %.3fx | %.2f / %.2f us |" % (
            c.label, C.by_name()[b].label, int(runs.col(n, "rps") + 0.5), int(runs.col(b, "rps") + 0.5), each,
            runs.ratio_num(n, b), runs.col(n, "us_per_req"), runs.col(b, "us_per_req")))
    targets = [c for c in rows if c.name in VARIANT_TARGETS]
    if targets:
        p()
        p("Variant targets (reported, not enforced):")
        for c in targets:
            label, minimum = VARIANT_TARGETS[c.name]
            target(label, c.name, c.base, minimum)


def tls_report(meta, sel, runs, target, kl, out=sys.stdout):
    """Redis over TLS against the same over plain TCP (its twin), same run; the TLS handshakes
    (connections the TLS server accepted) per 1000 requests"""
    def p(line=""):
        print(line, file=out)

    rows = [c for c in sel if c.tls and c.name in runs and c.twin in runs]
    if not rows:
        return
    col = runs.col
    p()
    p("Redis over TLS against the same over plain TCP, same run (ratios: median over rounds of the same-round ratio;")
    p("Redis CPU: INFO cpu; handshakes: the connections the TLS-only server accepted from nginx during the measured runs,")
    p("INFO stats' total_connections_received before and after each, the bench's own redis-cli runs left out):")
    p()
    p("| case | keys | req/s over TLS | req/s over TCP | TLS / TCP | nginx CPU/req TLS / TCP | Redis CPU per 1000 requests TLS / TCP "
      "| p99 alone TLS / TCP | Redis calls per 1000 requests TLS / TCP | TLS handshakes per 1000 requests | TLS handshakes / requests (all rounds) "
      "| connections TLS / TCP (all rounds) | error.log lines TLS / TCP |")
    p("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for c in rows:
        n, t = c.name, c.twin
        hs, reqs = runs.total(n, "conns") if col(n, "conns") is not None else None, runs.total(n, "requests")
        hs_t = runs.total(t, "conns") if col(t, "conns") is not None else None
        p("| %s | %s | %d | %d | %.2fx | %.2f / %.2f us | %s / %s | %s / %s | %s / %s | %s | %s | %s / %s | %d / %d |" % (
            c.label, kl if c.kind == "many" else "1", int(col(n, "rps") + 0.5), int(col(t, "rps") + 0.5),
            runs.ratio_num(n, t), col(n, "us_per_req"), col(t, "us_per_req"),
            fmt("%.3f ms", col(n, "info_cpu_ms_1k")), fmt("%.3f ms", col(t, "info_cpu_ms_1k")),
            fmt("%.3f ms", col(n, "p99_alone")), fmt("%.3f ms", col(t, "p99_alone")),
            fmt("%.2f", col(n, "calls_1k")), fmt("%.2f", col(t, "calls_1k")),
            fmt("%.4f", col(n, "conns_1k")), "-" if hs is None else "%d / %d" % (hs, reqs),
            fmt("%d", hs), fmt("%d", hs_t), runs.total(n, "elog"), runs.total(t, "elog")))
    if meta.get("redis_conns"):
        p()
        p("nginx's connections to each TLS server over the whole run (start, sanity check, fill, warm-ups, measured runs;")
        p("each one TLS handshake): " + ", ".join("%s %d" % (srv, meta["redis_conns"][srv]) for srv in meta.get("redis_tls", [])
                                                   if srv in meta["redis_conns"]) + "; to the plain-TCP")
        p("servers: " + ", ".join("%s %d" % (srv, v) for srv, v in meta["redis_conns"].items()
                                  if srv not in meta.get("redis_tls", [])) + " (a reconnection, after a timeout, is one more).")
    p()
    p("TLS targets (reported, not enforced):")
    for c in rows:
        if c.store == "redis":
            target("per request over TLS >= 0.9x over TCP:", c.name, c.twin, 0.9)
    for c in rows:
        if c.store == "sync":
            target("sync over TLS unchanged (>= 0.95x TCP):", c.name, c.twin, 0.95)
    for c in rows:
        if runs.col(c.name, "conns") is None:
            continue
        hs, reqs = runs.total(c.name, "conns"), runs.total(c.name, "requests")
        per = 1000 * hs / reqs if reqs else 0.0
        p("  %-40s %-20s %.4f per 1000 requests (%d in %d requests) %s" % (
            "TLS handshakes ~0 (<= 0.01 per 1000):", c.name, per, hs, reqs, met(per <= 0.01)))


# ---------------------------------------------------------------- files
def load(outdir):
    """meta.json and the runs' figures of a run's out/ directory"""
    with open(os.path.join(outdir, "meta.json")) as f:
        meta = json.load(f)
    figs = {}
    for n in meta["selected"]:
        figs[n] = []
        for r in range(1, meta["settings"]["ROUNDS"] + 1):
            with open(os.path.join(outdir, "%s.%d.json" % (n, r))) as f:
                figs[n].append(figures(json.load(f)))
    return meta, Runs(figs)


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: report.py DIR   (a run's directory kept with KEEP=1)")
    d = sys.argv[1]
    meta, runs = load(os.path.join(d, "out") if os.path.isdir(os.path.join(d, "out")) else d)
    report(meta, runs)


if __name__ == "__main__":
    main()
