#!/usr/bin/env python3
"""Latency probe: one keep-alive connection, one request at a time (no pipelining).

    latency.py PORT SECONDS [KEYS]    (KEYS: GET /x?k=<random 1..KEYS>; without: GET /x)

Prints "count p50 p90 p99 p999 max" in milliseconds. run.sh runs it alone (the latency of a
lone request) and alongside the wrk load (what a request waits behind the load). wrk's own
latency figures cannot serve here: with pipelining it records one sample per write, and its
correction for coordinated omission (which assumes one request per write) adds synthetic
samples that distort the percentiles (and print 0 when they fall below the minimum).
The client's own time (~20 us of Python per request) is in every figure alike: compare rows.
"""
import random
import socket
import sys
import time


def main():
    port, secs = int(sys.argv[1]), float(sys.argv[2])
    keys = int(sys.argv[3]) if len(sys.argv) > 3 else 0
    s = socket.create_connection(("127.0.0.1", port))
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    host = b"Host: 127.0.0.1:%d\r\n\r\n" % port
    fixed = b"GET /x HTTP/1.1\r\n" + host
    lat = []
    buf = b""
    clock = time.perf_counter_ns
    end = clock() + int(secs * 1e9)
    while True:
        req = b"GET /x?k=%d HTTP/1.1\r\n" % random.randint(1, keys) + host if keys else fixed
        t0 = clock()
        if t0 >= end:
            break
        s.sendall(req)
        # one response: headers, then Content-Length bytes of body
        while b"\r\n\r\n" not in buf:
            chunk = s.recv(65536)
            if not chunk:
                sys.exit("connection closed")
            buf += chunk
        head, _, buf = buf.partition(b"\r\n\r\n")
        clen = 0
        for line in head.split(b"\r\n")[1:]:
            k, _, v = line.partition(b":")
            if k.strip().lower() == b"content-length":
                clen = int(v)
        while len(buf) < clen:
            chunk = s.recv(65536)
            if not chunk:
                sys.exit("connection closed")
            buf += chunk
        buf = buf[clen:]
        lat.append(clock() - t0)
    s.close()
    if not lat:
        print("0 nan nan nan nan nan")
        return
    lat.sort()
    n = len(lat)

    def q(p):
        return lat[min(n - 1, int(p * n))] / 1e6

    print("%d %.3f %.3f %.3f %.3f %.3f" % (n, q(0.5), q(0.9), q(0.99), q(0.999), lat[-1] / 1e6))


if __name__ == "__main__":
    main()
