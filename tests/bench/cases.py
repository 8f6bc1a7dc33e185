#!/usr/bin/env python3
"""The cases of run.sh: a generated table, each case's nginx configuration and label.

    python3 tests/bench/cases.py [--config]      (CASES=REGEX: the selection run.sh would run)

prints the cases (name, key kind, check kind, nginx workers, label), with --config also the
lines each puts in http{} and in its `location /` (Redis addresses as ADDRS(server)).

A case is a point of a few axes; table() lists them as products of those axes:
  store    plain (no limit: the baseline), limit_req, shm (this module, state in shared
           memory), redis (in Redis, one check per request), sync (decided in shared memory,
           reconciled with Redis every 100ms), cluster (in a Redis Cluster of N primaries)
  algo     gcra token leaky sliding fixed log (this module's algorithms); concurrency (an
           in-flight limit, `concurrency=N`: at most N requests of a key at once; compared
           with gcra of the same store and key kind)
  kind     one:  GET /x, the limit keys on $server_name (one constant key)
           many: GET /x?k=<random 1..KEYS> (random-keys.lua), the limit keys on $arg_k
  headers  ratelimit_headers off, or nothing (plain: the zone whose headers add_header sends)
  workers  1: the main nginx (one worker pinned to NGINX_CPU); N > 1: a second nginx with N
           workers, not pinned (compared with plain of the same key kind and workers)
  tls      redis and sync: the same over TLS (`ratelimit_redis ... ssl`, verified against the
           bench's CA) to a redis-server listening on TLS only, compared with its plain-TCP twin
and a few single cases (a variant: a quota of its own, a name suffix and a label note, and the
case it is compared with, if any: `base`).
Names and labels are derived from the axes (see Case.name and Case.label). The check kind says
what run.sh's sanity check expects of one request: plain (200, no RateLimit header),
plain-headers (200 with the header of add_header), limit_req (200, no RateLimit header),
module (200 with the RateLimit headers), module-noheaders (200, no header), module-reject (a
second request: 429; the case's rows expect 429 throughout).
To add a case: add a point to table(), and if it needs a new kind of configuration, a branch
to Case.http() / Case.location().
"""
import dataclasses
import itertools
import os
import signal
import subprocess
import sys
from dataclasses import dataclass

ALGOS = ("gcra", "token", "leaky", "sliding", "fixed", "log")
CONC = "concurrency"
CONC_LIMIT = 1000000         # concurrency=N of the concurrency rows: the most the module accepts
KINDS = ("one", "many")
BUCKETS = ("gcra", "token", "leaky")
SYNC_EVERY = "100ms"
# The lease rows of issue 22 (and their shared-memory twins): suffix -> (quota, note)
SHARE_QUOTAS = {"r1e8": ("requests=100000000 period=1s burst=1000000", "10^8r/s burst=10^6"),
                "r1e5": ("requests=100000 period=1s burst=1000", "100000r/s burst=1000"),
                "r1e3": ("requests=1000 period=1s burst=100", "1000r/s burst=100")}
ONE_KEY_VAR = "$server_name"
MANY_KEY_VAR = "$arg_k"


def default_quota(algo, kind):
    """The default quota of an algorithm in shared memory, one that no benchmark reaches:
     - buckets (gcra token leaky): 10^9 requests per second, burst 1000;
     - windows (sliding fixed): 10^9 requests per 1s window;
     - log keeps a ring of `requests` 8-byte timestamps per key, so the quota decides the slot
       size: one key: 10^6 per second (an 8 MB ring, ~10x what one CPU serves); many keys: 10
       per second per key (136-byte slots; a key is drawn ~0.1 times a second, so 10 in one
       second practically never happens: the non-2xx column shows it);
     - concurrency: concurrency=1000000, far above the requests in flight at once (wrk's
       connections x pipelined requests): a slot is taken and given back per request."""
    if algo == CONC:
        return "concurrency=%d" % CONC_LIMIT
    if algo in BUCKETS:
        return "requests=1000000000 period=1s burst=1000"
    if algo == "log":
        return "requests=10 period=1s" if kind == "many" else "requests=1000000 period=1s"
    return "requests=1000000000 period=1s"


def redis_quota(algo, kind):
    """In Redis: one key as in shared memory; many keys: state that lasts a day, so that Redis
    really holds ~KEYS keys (a 1s quota would let each key expire between two of its hits, and
    measure key creation and expiry instead); it still admits every request. concurrency: as in
    shared memory, whatever the key kind (a key's sorted set lives while a request holds a slot:
    with short requests every check creates it and every release deletes it)."""
    if kind == "one" or algo == CONC:
        return default_quota(algo, kind)
    return "requests=10 period=1d burst=1000" if algo in BUCKETS else "requests=1000 period=1d"


# Configuration builders, shared by the cases and the sanity controls.
def limit_req_http(zone, key, size, rate="100000000r/s"):
    return ["limit_req_zone %s zone=lr_%s:%s rate=%s;" % (key, zone, size, rate)]


def limit_req_location(zone, rate="100000000r/s"):
    """limit_req with a rate no benchmark reaches; burst+nodelay because limit_req counts every
    request arriving within one millisecond (nginx's cached clock) as excess: without a burst
    the second request of a millisecond would be rejected, and without nodelay delayed."""
    if rate == "100000000r/s":
        return ["limit_req zone=lr_%s burst=1000000 nodelay; empty_gif;" % zone]
    return ["limit_req zone=lr_%s; empty_gif;" % zone]


def algo_arg(algo):
    """the zone's algo= argument (" algo=NAME"); none for a concurrency zone (refused there)"""
    return "" if algo == CONC else " algo=" + algo


def module_http(zone, key, quota, size, algo):
    return ["ratelimit_zone rl_%s key=%s %s size=%s%s;" % (zone, key, quota, size, algo_arg(algo))]


def module_location(zone, headers=""):
    return ["ratelimit zone=rl_%s;" % zone] + (["ratelimit_headers %s;" % headers] if headers else []) + ["empty_gif;"]


@dataclass(frozen=True)
class Case:
    store: str               # plain limit_req shm redis sync cluster
    kind: str                # one many
    algo: str = ""
    headers: str = ""        # shm: ratelimit_headers value; plain: add_header the headers of this zone
    workers: int = 1
    mode: str = ""           # sync: "" (optimistic) or lease
    cluster: int = 0         # cluster: its number of primaries
    quota: str = ""          # replaces the default quota
    log: str = ""            # ratelimit_log_level
    reject: bool = False     # the limit rejects nearly every request (429 expected)
    suffix: str = ""         # name suffix of a variant
    note: str = ""           # label note of a variant
    tls: bool = False        # redis, sync: to Redis over TLS (a TLS-only server of its own)
    base: str = ""           # a variant: the case it is compared with (kept by a selection)

    @property
    def name(self):
        many = self.kind == "many"
        if self.store == "plain":
            n = "plain" + ("-headers" if self.headers else "") + ("-rand" if many else "")
        else:
            prefix = {"limit_req": "limit_req", "shm": "", "redis": "redis-",
                      "sync": "sync-lease-" if self.mode == "lease" else "sync-",
                      "cluster": "cluster%d-" % self.cluster}[self.store]
            if self.tls:
                prefix += "tls-"
            n = prefix + self.algo + ("-1M" if many else "")
            if self.headers == "off":
                n += "-headers-off"
        if self.suffix:
            n += "-" + self.suffix
        if self.workers > 1:
            n += "-%dw" % self.workers
        return n

    @property
    def zone(self):
        """the name as an identifier, for zone names"""
        return self.name.replace("-", "_")

    @property
    def check(self):
        if self.store == "plain":
            return "plain-headers" if self.headers else "plain"
        if self.store == "limit_req":
            return "limit_req"
        if self.reject:
            return "module-reject"
        return "module-noheaders" if self.headers == "off" else "module"

    @property
    def keyvar(self):
        return ONE_KEY_VAR if self.kind == "one" else MANY_KEY_VAR

    @property
    def redis(self):
        """the Redis server the case uses ("" for none): the standalone server shared by the
        Redis rows, a cluster of N primaries shared by the cluster rows, or a standalone server
        of its own for a sync zone (so that its Redis commands and CPU are the case's alone:
        idle sync zones still send rounds)"""
        if self.store == "redis" and self.tls:
            return "standalone_tls"
        return {"redis": "standalone", "cluster": "cluster%d" % self.cluster,
                "sync": "sync_" + self.zone}.get(self.store, "")

    @property
    def redis_name(self):
        """the name of its ratelimit_redis (the label of its counters in the module's metrics),
        "" for a case without Redis"""
        return "r_" + self.zone if self.redis else ""

    @property
    def twin(self):
        """a TLS case's plain-TCP twin (the same case without tls), "" for others"""
        return dataclasses.replace(self, tls=False).name if self.tls else ""

    @property
    def label(self):
        if self.store == "plain":
            if self.headers:
                text = "plain nginx + the %s row's RateLimit headers (add_header)" % self.headers[len("rl_"):]
            else:
                text = "plain nginx, random URLs" if self.kind == "many" else "plain nginx (empty_gif)"
        elif self.store == "limit_req":
            text = "limit_req"
        else:
            algo = "concurrency=%d" % CONC_LIMIT if self.algo == CONC else self.algo
            text = "ratelimit " + algo + {
                "shm": ", ratelimit_headers off" if self.headers == "off" else "",
                "redis": ", Redis" + (" over TLS" if self.tls else ""),
                "sync": ", Redis%s, sync=%s %s" % (" over TLS" if self.tls else "", SYNC_EVERY,
                                                   self.mode or "optimistic"),
                "cluster": ", Redis Cluster of %d primar%s" % (self.cluster, "y" if self.cluster == 1 else "ies"),
            }[self.store]
        if self.note:
            text += ", " + self.note
        if self.workers > 1:
            text += ", %d nginx workers" % self.workers
        return text

    def http(self, zone_size, addrs="", ca="CA"):
        """the case's http{}-level lines; addrs: its Redis server's addresses; ca: the file of
        the CA that signed the TLS servers' certificate"""
        z, key = self.zone, self.keyvar
        if self.store == "plain":
            return []
        if self.store == "limit_req":
            return limit_req_http(z, key, zone_size)
        if self.store == "shm":
            return module_http(z, key, self.quota or default_quota(self.algo, self.kind), zone_size, self.algo)
        # Redis: ratelimit_on_error local is unused here, so the zone's shared memory is only
        # 1m, but a sync zone decides in its shared memory: ZONE_SIZE, as the shared-memory rows
        quota, size = self.quota or redis_quota(self.algo, self.kind), "1m"
        if self.store == "sync":
            quota += " sync=" + SYNC_EVERY + (" sync_mode=" + self.mode if self.mode else "")
            size = zone_size
        cluster = "cluster " if self.store == "cluster" else ""
        # TLS: verified (ssl_verify is on by default) against the bench's CA, the name checked
        # being the address's host, 127.0.0.1, which the server certificate's SAN holds
        tls = " ssl ssl_trusted_certificate=%s" % ca if self.tls else ""
        return ["ratelimit_redis %s %s%s%s timeout=100ms;" % (self.redis_name, cluster, addrs, tls),
                "ratelimit_zone rl_%s key=%s %s size=%s%s redis=%s;" % (z, key, quota, size, algo_arg(self.algo),
                                                                        self.redis_name)]

    def location(self):
        """the body of the case's `location /`"""
        z = self.zone
        if self.store == "plain":
            lines = []
            if self.headers:
                # the two headers the module sends for that zone with gcra's default quota, byte
                # for byte: the same response size, which tells the cost of the module's work
                # from the cost of sending and parsing ~75 more bytes
                lines = ["add_header RateLimit-Policy '\"%s\";q=1000000000;w=1';" % self.headers,
                         "add_header RateLimit '\"%s\";r=1000;t=1';" % self.headers]
            return lines + ["empty_gif;"]
        if self.store == "limit_req":
            return limit_req_location(z)
        if self.store == "shm":
            return module_location(z, self.headers)
        # ratelimit_on_error deny: a Redis error shows as a 503 in the non-2xx column
        return (["ratelimit zone=rl_%s;" % z, "ratelimit_on_error deny;"]
                + (["ratelimit_log_level %s;" % self.log] if self.log else []) + ["empty_gif;"])


def table():
    """Every case, in the order of the report."""
    t = [
        # baselines: plain nginx (one key; the same + the gcra row's headers; random URLs)
        Case("plain", "one"),
        Case("plain", "one", headers="rl_gcra"),
        Case("plain", "many"),
    ]
    t += [Case("limit_req", kind) for kind in KINDS]
    # this module in shared memory: algorithm x RateLimit headers (on, off) x key kind
    t += [Case("shm", kind, algo, headers) for algo, headers, kind in itertools.product(ALGOS, ("", "off"), KINDS)]
    # concurrency zones (in flight at most 1000000 per key), x key kind: against gcra (the
    # baseline a selection keeps); requests are short, so each takes a slot and gives it back
    t += [Case("shm", kind, CONC) for kind in KINDS]
    # in Redis, one check per request: gcra x key kind; a row whose limit rejects (logged at
    # info, below the error log's level for requests: it measures rejecting, not writing one
    # error.log line per request); sliding with many keys
    t += [Case("redis", kind, "gcra") for kind in KINDS]
    t += [Case("redis", "one", "gcra", quota="requests=1 period=1h", log="info", reject=True,
               suffix="rejected", note="rejected (429)"),
          Case("redis", "many", "sliding")]
    # concurrency zones in Redis (a sorted-set member per request: taken in the script call,
    # given back by a pipelined ZREM), x key kind: against redis-gcra of the same key kind
    t += [Case("redis", kind, CONC) for kind in KINDS]
    # sync=100ms: sync mode x key kind; and lease with a quota the one-key load nears (a lease's
    # units drain with the global level: on a key used far below its rate they drain away
    # before they are spent, and requests wait for grants)
    t += [Case("sync", kind, "gcra", mode=mode) for mode, kind in itertools.product(("", "lease"), KINDS)]
    t += [Case("sync", "one", "gcra", mode="lease", quota="requests=300000 period=1s burst=3000000",
               suffix="near", note="300000r/s burst=3000000")]
    # lease on a hot key at three rates (issue 22: leases as shares), each beside the same limit
    # in shared memory
    for suffix, (quota, note) in SHARE_QUOTAS.items():
        t += [Case("shm", "one", "gcra", quota=quota, suffix=suffix, note=note),
              Case("sync", "one", "gcra", mode="lease", quota=quota, suffix=suffix, note=note)]
    # over TLS, against the same over plain TCP (its twin, kept by a selection): per request
    # and sync=100ms optimistic, x key kind
    t += [Case(store, kind, "gcra", tls=True) for store, kind in itertools.product(("redis", "sync"), KINDS)]
    # operator controls (issue 21), one key, each against the same zone without the control:
    # gcra with block= (every request admitted: the cost of looking for a block); a fixed window
    # of one day, and the same as a calendar day in a time zone (windows from the tz database)
    t += [Case("shm", "one", "gcra", quota="requests=1000000000 period=1s burst=1000 block=10m",
               suffix="block", note="block=10m", base="gcra"),
          Case("shm", "one", "fixed", quota="requests=1000000000 period=1d", suffix="1d", note="period=1d"),
          Case("shm", "one", "fixed", quota="requests=1000000000 period=day timezone=Europe/Berlin",
               suffix="calendar", note="period=day timezone=Europe/Berlin", base="fixed-1d")]
    # Redis Cluster: nginx workers x primaries, many keys; with 2 workers, their plain baseline
    for workers in (1, 2):
        if workers > 1:
            t.append(Case("plain", "many", workers=workers))
        t += [Case("cluster", "many", "gcra", cluster=n, workers=workers) for n in (1, 3)]
    return t


def by_name():
    return {c.name: c for c in table()}


# ---------------------------------------------------------------- baselines and selection
def plain_of(kind, workers, names):
    """the plain case of that key kind and worker count, or "" if there is none"""
    n = ("plain" if kind == "one" else "plain-rand") + ("-%dw" % workers if workers > 1 else "")
    return n if n in names else ""


def lr_of(kind, workers):
    """limit_req of that key kind (one worker only), or "" """
    if workers != 1:
        return ""
    return "limit_req" if kind == "one" else "limit_req-1M"


def sync_bases(case):
    """a sync case's comparisons: the same algorithm and key kind in shared memory and in Redis
    per request (the table after the main one; over TLS: in Redis per request over TLS); the
    lease rows of SHARE_QUOTAS: the same limit in shared memory"""
    if case.store != "sync":
        return []
    if case.suffix in SHARE_QUOTAS:
        return [case.algo + "-" + case.suffix, "redis-" + case.algo]
    n = case.algo + ("-1M" if case.kind == "many" else "")
    return [n, ("redis-tls-" if case.tls else "redis-") + n]


def conc_base(case):
    """a concurrency case's comparison: gcra in the same store, same key kind ("" for others)"""
    if case.algo != CONC:
        return ""
    return dataclasses.replace(case, algo="gcra").name


def baselines(case, names):
    """the cases a case is compared with, which a selection keeps: plain of its key kind and
    workers, limit_req of its key kind, plain + the same headers (one-key rows with headers),
    for a sync case the same limit in shared memory and in Redis per request, for a concurrency
    case gcra in the same store, for a TLS case its plain-TCP twin, and a variant's base"""
    b = [plain_of(case.kind, case.workers, names)]
    if case.check.startswith("module"):
        b.append(lr_of(case.kind, case.workers))
    if case.check == "module" and case.kind == "one" and case.workers == 1:
        b.append("plain-headers")
    b += sync_bases(case)
    b.append(conc_base(case))
    b.append(case.twin)
    b.append(case.base)
    return [n for n in b if n]


def matching(pattern, names):
    """the names the extended regex matches, as `grep -E` matches them (POSIX ERE, not
    Python's re); every name for an empty pattern. None if the pattern is invalid."""
    if not pattern:
        return set(names)
    p = subprocess.run(["grep", "-E", "--", pattern], input="\n".join(names) + "\n",
                       capture_output=True, text=True)
    if p.returncode > 1:
        return None
    return set(p.stdout.split())


def select(pattern):
    """the selected cases in table order: those CASES matches, and their baselines; None if
    the pattern is invalid"""
    cases = table()
    names = [c.name for c in cases]
    hit = matching(pattern, names)
    if hit is None:
        return None
    want = set()
    for c in cases:
        if c.name in hit:
            want.add(c.name)
            want.update(baselines(c, names))
    return [c for c in cases if c.name in want]


# ---------------------------------------------------------------- nginx configuration
CONTROL_LR = "1r/m"
CONTROL_QUOTA = "requests=1 period=1h"


def nginx_conf(workers, sel, ports, ctl_ports, d, so, zone_size, cpu_mask, addrs_of, root, ca="", metrics_port=0):
    """the configuration of the nginx instance with that many workers: its cases (of sel), each
    on its own port (ports: name -> port) with one `location /`, and on the one-worker instance
    the two sanity controls (ctl_ports: limit_req's, the module's): the same snippets at a rate
    a second request exceeds, to prove both limiters act. addrs_of(server) -> its addresses;
    ca: the CA file of the TLS servers; metrics_port: a server with `ratelimit_metrics` there
    (0: none), whose counters the Redis rows read (the checks and script calls each
    ratelimit_redis sent)."""
    mine = [c for c in sel if c.workers == workers]
    out = ["load_module %s;" % so]
    if root:
        out.append("user nobody nogroup;")
    out.append("worker_processes %d;" % workers)
    if workers == 1:
        out.append("worker_cpu_affinity %s;" % cpu_mask)
    out.append("""daemon on;
master_process on;
pid {d}/nginx.pid;
error_log {d}/error.log info;    # info: the module logs each zone's capacity at start

events {{
    worker_connections 4096;
}}

http {{
    access_log off;
    error_log {d}/error.log notice;  # requests: notice (the info level above is for start-up)
    keepalive_timeout 75s;
    keepalive_requests 1000000000;  # a wrk connection lives for a whole run
    default_type application/octet-stream;
    client_body_temp_path {d}/client_body_temp;
    proxy_temp_path {d}/proxy_temp;
    fastcgi_temp_path {d}/fastcgi_temp;
    uwsgi_temp_path {d}/uwsgi_temp;
    scgi_temp_path {d}/scgi_temp;
""".format(d=d))

    def indent(n, lines):
        out.extend(" " * n + line for line in lines)

    for c in mine:
        indent(4, c.http(zone_size, addrs_of(c.redis) if c.redis else "", ca))
    if workers == 1:
        indent(4, limit_req_http("ctl", ONE_KEY_VAR, "1m", CONTROL_LR))
        indent(4, module_http("ctl", ONE_KEY_VAR, CONTROL_QUOTA, "1m", "gcra"))
    out.append("")
    for c in mine:
        out += ["    server {  # %s" % c.name,
                "        listen 127.0.0.1:%d;" % ports[c.name],
                "        server_name bench;",
                "        location / {"]
        indent(12, c.location())
        out += ["        }", "    }"]
    if workers == 1:
        out.append("    server { listen 127.0.0.1:%d; server_name bench; location / {" % ctl_ports[0])
        indent(8, limit_req_location("ctl", CONTROL_LR))
        out.append("    } }")
        out.append("    server { listen 127.0.0.1:%d; server_name bench; location / {" % ctl_ports[1])
        indent(8, module_location("ctl"))
        out.append("    } }")
    if metrics_port:
        out.append("    server { listen 127.0.0.1:%d; server_name bench; location = /metrics { ratelimit_metrics; } }"
                   % metrics_port)
    out.append("}")
    return "\n".join(out) + "\n"


def main():
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)   # quiet when piped into head
    sel = select(os.environ.get("CASES", ""))
    if sel is None:
        sys.exit("cases.py: CASES is not a valid extended regex")
    for c in sel:
        print("%-24s %-5s %-17s %d  %s" % (c.name, c.kind, c.check, c.workers, c.label))
        if "--config" in sys.argv[1:]:
            for line in c.http("$ZONE_SIZE", "ADDRS(%s)" % c.redis, "$TMP/tls/ca.crt"):
                print("    http:     " + line)
            for line in c.location():
                print("    location: " + line)
    if not sel:
        sys.exit("cases.py: CASES selects no case")


if __name__ == "__main__":
    main()
