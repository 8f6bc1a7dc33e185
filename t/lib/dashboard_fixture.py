#!/usr/bin/python3
"""A stand-in for ratelimit_api serving the dashboard (src/ngx/http/api/dashboard/) and the JSON
its API.md describes, for testing the page alone: every member the page reads, counters that grow
with time (so rates and charts move), keys whose text is hostile. The standard library only;
RLTest::Browser starts it.

    dashboard_fixture.py SECONDS [ZONES]

Listens on a free loopback port and prints it (one line), then serves for SECONDS at most.
/ratelimit/ is read only (write=off), /ratelimit-admin/ allows DELETE (write=on); both serve
the page (GET with Accept: text/html), app.js, style.css, icon.svg, zones and zones/NAME/top?n=N.
ZONES (default 5) above 5 adds plain zones z6, z7, ... (a page of many zones).
GET /__requests answers every request made so far (method, path, accept), for the test.
"""
import json
import os
import sys
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "src", "ngx", "http", "api", "dashboard")
FILES = {"app.js": "text/javascript; charset=utf-8", "style.css": "text/css; charset=utf-8",
         "icon.svg": "image/svg+xml"}
CSP = "default-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'"
BASES = {"/ratelimit/": False, "/ratelimit-admin/": True}
START = time.time()
LOCK = threading.Lock()
REQUESTS = []
NZONES = 5

XSS_KEY = '<img src=x onerror="alert(1)">'
LONG_KEY = "Bearer " + "eyJhbGciOiJIUzI1NiJ9" * 3  # longer than 64 bytes: shown cut

# The top keys of each zone, largest first: [key, rejected, error, blocked, reset]
TOPS = {
    "api": [["203.0.113.7", 1234, 0, 0, "addr=203.0.113.7"],
            [XSS_KEY, 400, 0, 0, "key=" + urllib.parse.quote(XSS_KEY, safe="")],
            [LONG_KEY[:64], 90, 12, 0, None],
            ["198.51.100.23", 40, 3, 10, "addr=198.51.100.23"],
            ["2001:db8::/56", 7, 7, 0, "addr=2001:db8::"]],
    "login": [["alice@example.com", 55, 0, 55, "key=alice%40example.com"]],
    "g": [["tenant-42", 12, 0, 0, "key=tenant-42"]],
    "uploads": [],
    "quiet": [],
}


def item(k, now):
    key, rejected, error, blocked, reset = k
    return {"key": key, "truncated": key == LONG_KEY[:64], "rejected": rejected, "error": error,
            "blocked": blocked, "first_seen": now - 50000, "last_seen": now - 1500, "reset": reset}


def counters(t, passed, rejected, delayed=0.0, blocked=0.0):
    r = {k: 0 for k in ("passed", "delayed", "rejected", "blocked", "rejected_dry_run", "delayed_dry_run",
                        "blocked_dry_run", "exempt", "error_allowed", "error_denied", "error_local")}
    r.update(passed=int(passed * t), rejected=int(rejected * t), delayed=int(delayed * t), blocked=int(blocked * t))
    return r


def zones(write):
    t = time.time() - START
    now = int(time.time() * 1000)
    gcra = {"algorithm": "gcra", "requests": 10, "period_ms": 1000, "burst": 20}
    zs = [
        {"name": "api", "store": "shared memory", "policies": [gcra], "tiered": False, "keys": 1234,
         "capacity": 13107, "evictions": 0, "requests": counters(t, 500, 60, 20, 5)},
        {"name": "login", "store": "redis", "redis": "main",
         "policies": [{"algorithm": "sliding", "requests": 5, "period_ms": 60000, "block_ms": 600000}],
         "tiered": False, "keys": 0, "capacity": 9362, "evictions": 0, "requests": counters(t, 30, 4, 0, 2),
         "settle_failures": 0},
        {"name": "g", "store": "sync optimistic", "redis": "main", "policies": [gcra], "tiered": True,
         "keys": 88, "capacity": 9362, "evictions": 0, "requests": counters(t, 200, 3),
         "sync": {"mode": "optimistic", "interval_ms": 200, "rounds": int(5 * t), "failures": 0, "hosts": 2,
                  "last_round_ms_ago": 143, "keys_sent": int(40 * t)}},
        {"name": "uploads", "store": "in-flight",
         "policies": [{"algorithm": "concurrency", "concurrency": 100, "hold_ms": 60000}], "tiered": False,
         "keys": 3, "capacity": 13107, "evictions": 0, "requests": counters(t, 8, 1), "in_flight": 7},
        {"name": "quiet", "store": "shared memory", "policies": [gcra], "tiered": False, "keys": 13107,
         "capacity": 13107, "evictions": int(3 * t), "requests": counters(t, 1, 0), "top_k": 0},
    ]
    for i in range(6, NZONES + 1):
        zs.append({"name": "z%d" % i, "store": "shared memory", "policies": [gcra], "tiered": False,
                   "keys": i, "capacity": 13107, "evictions": 0, "requests": counters(t, i, i % 3)})
    for z in zs:
        z.setdefault("top_k", 16)
        z["top"] = [item(k, now) for k in TOPS.get(z["name"], [])[:3]] if z["top_k"] else []
    bounds = [0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1]
    calls = int(100 * t)
    share = [0, 0.1, 0.5, 0.9, 0.98, 0.995, 1, 1, 1, 1, 1, 1, 1]
    redis = [{"name": "main", "calls": calls, "checks": calls * 9,
              "errors": {"timeout": int(2 * t), "refused": 0, "reset": 0, "protocol": 0, "error_reply": 0,
                         "overflow": 0, "out_of_bounds": 0, "tls": 0},
              "reconnects": 1, "in_flight": 2, "redirects": {"moved": 0, "ask": 0},
              "round_trip": {"count": calls, "sum_s": round(calls * 0.0004, 6),
                             "buckets": [[b, int(calls * s)] for b, s in zip(bounds, share)]}}]
    return {"now_ms": now, "write": write, "zones": zs, "redis": redis}


def top(name, n):
    now = int(time.time() * 1000)
    keys = TOPS.get(name)
    if keys is None:
        return None
    total = sum(k[1] for k in keys)
    return {"zone": name, "top_k": 16, "window_ms": 60000, "from_ms": now - now % 60000 - 60000,
            "until_ms": now - now % 60000 + 60000, "rejections": total, "bound": total // 16,
            "top": [item(k, now) for k in keys[:n]]}


class Handler(BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def send(self, status, body, ctype="application/json", extra=None):
        data = body if isinstance(body, bytes) else (json.dumps(body) + "\n").encode()
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(data)))
        self.send_header("X-Content-Type-Options", "nosniff")
        self.send_header("Cache-Control", "no-cache")
        for k, v in (extra or {}).items():
            self.send_header(k, v)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    def route(self):
        url = urllib.parse.urlsplit(self.path)
        with LOCK:
            REQUESTS.append({"method": self.command, "path": self.path, "accept": self.headers.get("Accept", "")})
        if url.path == "/__requests":
            with LOCK:
                return self.send(200, list(REQUESTS))
        base = next((b for b in BASES if url.path.startswith(b)), None)
        if base is None:
            return self.send(404, {"error": "not found"})
        write, rest = BASES[base], url.path[len(base):]
        q = urllib.parse.parse_qs(url.query)
        if self.command == "DELETE":
            if not write:
                return self.send(405, {"error": "DELETE needs ratelimit_api write=on"})
            if not rest.startswith("zones/") or rest.count("/") != 1:
                return self.send(404, {"error": "unknown endpoint"})
            name = urllib.parse.unquote(rest[len("zones/"):])
            keys = TOPS.get(name)
            if keys is None:
                return self.send(404, {"error": "unknown zone"})
            with LOCK:
                TOPS[name] = [k for k in keys if k[4] != url.query]
            return self.send(200, {"zone": name, "store": "shared memory", "reset": True, "local_states": 1})
        if self.command not in ("GET", "HEAD"):
            return self.send(405, {"error": "method not allowed"})
        if rest == "":
            if "text/html" not in self.headers.get("Accept", ""):
                return self.send(404, {"error": "unknown endpoint: use .../zones"})
            with open(os.path.join(ROOT, "index.html"), "rb") as f:
                return self.send(200, f.read(), "text/html; charset=utf-8",
                                 {"Content-Security-Policy": CSP, "Referrer-Policy": "no-referrer"})
        if rest in FILES:
            with open(os.path.join(ROOT, rest), "rb") as f:
                return self.send(200, f.read(), FILES[rest])
        if rest == "zones":
            with LOCK:
                return self.send(200, zones(write))
        if rest.startswith("zones/") and rest.endswith("/top"):
            name = urllib.parse.unquote(rest[len("zones/"):-len("/top")])
            try:
                n = int(q.get("n", ["10"])[0])
            except ValueError:
                return self.send(400, {"error": "n must be a number"})
            with LOCK:
                body = top(name, max(1, min(n, 16)))
            return self.send(200, body) if body else self.send(404, {"error": "unknown zone"})
        return self.send(404, {"error": "unknown endpoint: use .../zones"})

    do_GET = do_HEAD = do_DELETE = do_POST = route


def main():
    global NZONES
    secs = float(sys.argv[1]) if len(sys.argv) > 1 else 120
    NZONES = max(5, int(sys.argv[2])) if len(sys.argv) > 2 else 5
    srv = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    srv.daemon_threads = True
    print(srv.server_address[1], flush=True)
    threading.Timer(secs, srv.shutdown).start()
    srv.serve_forever()


if __name__ == "__main__":
    main()
