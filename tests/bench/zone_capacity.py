#!/usr/bin/env python3
"""How many keys does a rate-limit zone remember? Found by observation, for keys_per_mib.sh.

    zone_capacity.py PORT PATH TAG [DEADLINE_EPOCH]

The location PATH must admit one request per key and reject a second one (for a long
while: the probe must come back before the first request is forgotten by the limit itself),
keying on $arg_k. One probe with N keys:

    GET PATH?k=<p>1, <p>2, ... <p>N, then GET PATH?k=<p>1 again

where <p> is a prefix unique to the probe, so every probe starts with N keys the zone never saw,
all newer than whatever earlier probes left. With least-recently-used eviction (this module, and
limit_req when its zone is full) the zone holds the newest C keys: the last request is rejected
(key 1 remembered) if N <= C and admitted (key 1 forgotten) if N > C. Doubling N, then bisecting,
finds C exactly.

Requests are pipelined on one keep-alive connection (a writer thread sends them all, the main
thread counts the responses), so nginx handles them strictly in order, at full speed.
Prints: "capacity probes requests seconds".
"""
import re
import socket
import sys
import threading
import time

STATUS = re.compile(rb"HTTP/1\.1 (\d{3})")


def probe(port, path, prefix, n):
    """Sends keys 1..n then key 1 again; returns (statuses of the n fills: dict, last status)."""
    reqs = [b"GET %s?k=%s%d HTTP/1.1\r\nHost: bench\r\n\r\n" % (path, prefix, i) for i in range(1, n + 1)]
    reqs.append(b"GET %s?k=%s1 HTTP/1.1\r\nHost: bench\r\nConnection: close\r\n\r\n" % (path, prefix))
    blob = b"".join(reqs)
    sock = socket.create_connection(("127.0.0.1", port), timeout=60)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    writer = threading.Thread(target=sock.sendall, args=(blob,), daemon=True)
    writer.start()
    fills, last, seen, tail = {}, None, 0, b""
    while seen < n + 1:
        chunk = sock.recv(1 << 20)
        if not chunk:
            break
        data = tail + chunk
        end = 0
        for m in STATUS.finditer(data):
            seen += 1
            if seen <= n:
                fills[m.group(1)] = fills.get(m.group(1), 0) + 1
            else:
                last = int(m.group(1))
            end = m.end()
        # keep what may hold the start of a status line cut by the chunk boundary
        tail = data[max(end, len(data) - 11):]
    writer.join(5)
    sock.close()
    if seen != n + 1:
        raise RuntimeError(f"got {seen} responses for {n + 1} requests")
    return fills, last


def main():
    port, path, tag = int(sys.argv[1]), sys.argv[2].encode(), sys.argv[3].encode()
    deadline = float(sys.argv[4]) if len(sys.argv) > 4 else time.time() + 150
    t0 = time.time()
    count = {"probes": 0, "requests": 0}

    def remembered(n):
        if time.time() > deadline:
            raise SystemExit("zone_capacity.py: out of time")
        count["probes"] += 1
        count["requests"] += n + 1
        fills, last = probe(port, path, b"%sp%d_" % (tag, count["probes"]), n)
        if set(fills) != {b"200"}:
            raise SystemExit(f"zone_capacity.py: fresh keys not all admitted: {fills}")
        return last != 200

    lo, n = 0, 1024  # lo: largest N seen remembered
    while remembered(n):
        lo, n = n, n * 2
    hi = n  # smallest N seen forgotten
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if remembered(mid):
            lo = mid
        else:
            hi = mid
    print(lo, count["probes"], count["requests"], f"{time.time() - t0:.1f}")


if __name__ == "__main__":
    main()
