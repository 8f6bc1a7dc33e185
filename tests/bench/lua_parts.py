#!/usr/bin/env python3
"""Where Redis's time per check goes in the Lua (issue 33): run by tests/bench/redis_lua.sh --parts.

    tests/bench/redis_lua.sh --parts [--rounds N] [--checks N] [--groups N] [--keys-count N]
                                     [--proto NAME=FILE]... [--protos] [--only A,B] [--check-protos]
                                     [--callgrind [--redis-server PATH]]

The production function library (printed by the bench binary from the built core) and
variants of it, each one part of the decide path done twice (its cost is the difference: the
script stays correct, its decisions unchanged) or left out, or a floor (a library that does
nothing but what every call must: take KEYS and ARGV, return a reply), all loaded as Redis
Functions and called with FCALL on the same batches (rl_redis_lua_bench: gcra, groups of one
check, run.sh's quotas so that every check is admitted and writes its key; one hot key, and
random keys among KEYS-COUNT that all exist). Reported per check: Redis's time inside the call
(INFO commandstats usec), the variant's minus production's, for each part; and Redis's own GET
and SET pipelined without a script (the floor of a script that reads and writes each key once).

--protos adds the prototypes of issue 33's cuts (PROTOS below); --only A,B keeps only the parts
and prototypes whose names hold A or B. --proto NAME=FILE adds a library of one's own (a prototype: FUNCTION LOAD's text, its name the
same length as production's, any: it is renamed) to the same table.

--check-protos runs, instead of measuring, each prototype beside production on the same
calls (their clocks taken from the call, random batches of repeated keys, a limit that
rejects too) and says whether every reply is the same: a prototype's figures mean nothing if
it decides otherwise.

--callgrind counts instead of timing: the redis-server runs under callgrind (valgrind), its
counters zeroed before each measurement's calls and dumped after (rl_redis_lua_bench --hook),
one measurement per way (defaults: 1 round of 3200 checks, 100000 keys); reported per check:
Redis's instructions while it serves the calls (reading and parsing them, running them,
writing the replies: readQueryFromClient and handleClientsWithPendingWritesUsingThreads; not
serverCron's periodic work, e.g. active expiry, nor epoll)
for every way and part, and production's split into parts by function (callgrind_parts.py:
the Lua interpreter, its tables, strings and garbage collector, struct.pack/unpack, redis.call's
arguments and reply, the commands themselves...). Exact where timing on a shared machine is
not, but blind to cache misses (1M keys cost more than 100000 in time, not in instructions).
The function names need a redis-server with symbols (Debian's is stripped: its Lua shows as
addresses); --redis-server PATH takes another build (e.g. Redis's source built with `make`). The variants are made by
replacing exact lines of the script's text: when the script changes, a replacement that no
longer matches stops this program, naming it (update PARTS below).

A benchmark: it prints figures and never fails because of one.
"""
import csv
import hashlib
import os
import random
import re
import socket
import struct
import subprocess
import sys
import tempfile
import time

sys.dont_write_bytecode = True

# The decide path's parts. (name, what it measures, kind, replacements): twice: the part runs
# once more (cost = variant - production); without: the part is left out (cost = production -
# variant); floor: a library that returns at once (its cost is the variant's own). Each
# replacement (old, new) must match exactly once; "{old}" in new stands for old.
PER_CALL = "per call"
PARTS = [
    ("floor", "the call alone: KEYS and ARGV given to the Lua, a reply of 2 + 4 integers per check",
     "floor", [("  bind()\n  local mode, blob = argv[1], argv[3]\n",
                "  bind()\n  do\n    local o, nk = {0, 0}, #keys\n    for i = 1, nk do\n"
                "      local j = 2 + 4 * (i - 1)\n      o[j + 1], o[j + 2], o[j + 3], o[j + 4] = 1, 0, 0, 0\n"
                "    end\n    return o\n  end\n  local mode, blob = argv[1], argv[3]\n")]),
    ("floor: 2 integers", "the same, a reply of 2 integers (the difference: the reply's 4 per check)",
     "floor", [("  bind()\n  local mode, blob = argv[1], argv[3]\n",
                "  bind()\n  do return {0, 0} end\n  local mode, blob = argv[1], argv[3]\n")]),
    ("floor + GET + SET", "the call alone plus redis.call GET and SET ... PX of each key (no decision)",
     "floor", [("  bind()\n  local mode, blob = argv[1], argv[3]\n",
                "  bind()\n  do\n    local o, nk = {0, 0}, #keys\n    for i = 1, nk do\n"
                "      local key = keys[i]\n      local s = call('GET', key)\n"
                "      call('SET', key, s or string.rep('\\0', 24), 'PX', '86400000')\n"
                "      local j = 2 + 4 * (i - 1)\n      o[j + 1], o[j + 2], o[j + 3], o[j + 4] = 1, 0, 0, 0\n"
                "    end\n    return o\n  end\n  local mode, blob = argv[1], argv[3]\n")]),
    ("TIME", "redis.call('TIME') and its conversion, once per call", "twice " + PER_CALL,
     [("  local now = clock(argv)\n  if not now then return redis.error_reply('ERR ratelimit script: bad time') end\n"
       "  local marker\n", "  clock(argv)\n{old}")]),
    ("shape + first_bad", "the two passes over the checks' argument before deciding, once per call",
     "twice " + PER_CALL, [("  local ngroups, nkeys = shape(blob)\n", "  shape(blob)\n{old}"),
                           ("    local bad = first_bad(blob)\n", "    first_bad(blob)\n{old}")]),
    ("record unpack", "struct.unpack of the check's 13 doubles", "twice",
     [("          local algo, req, per, burst, refill, tok, depth, wsc, cost, at, dl, mu, bl =\n"
       "            sunpack('<ddddddddddddd', blob, q)\n", "          sunpack('<ddddddddddddd', blob, q)\n{old}")]),
    ("record checks", "the check's 20 comparisons (a bad record fails the call)", "twice",
     [("          local key = keys[k + i]\n          local units, refund_it",
       "          if not (algo >= 0 and algo <= 6 and algo % 1 == 0 and req >= 1 and per >= 1 and burst >= 0"
       " and refill >= 1\n                  and tok >= 1 and depth >= 1 and wsc >= 1 and cost >= -1 and dl >= -1"
       " and mu >= -1\n                  and (algo < 6 or req <= 1000000) and bl >= 0 and bl % 1 == 0) then\n"
       "            return redis.error_reply('ERR ratelimit script: bad check ' .. (k + i))\n          end\n{old}")]),
    ("GET", "redis.call('GET') of the key's state", "twice",
     [("              s = pget('GET', key)\n", "              pget('GET', key)\n{old}")]),
    ("no GET", "the same, left out (the state read as a fresh key's: the first GET's cache misses too)",
     "without", [("              s = pget('GET', key)\n", "              s = nil\n")]),
    ("state unpack", "struct.unpack of the state's 3 doubles", "twice",
     [("            if s then a, b, c = sunpack('<ddd', s) end\n",
       "            if s then sunpack('<ddd', s) end\n{old}")]),
    ("decide", "decide_gcra and bucket_decide: the arithmetic", "twice",
     [("              ok, rem, reset, retry, w, x, y, z = decide_gcra(a, b, now, cost, burst, refill, tok, depth, dl, mu)\n",
       "              decide_gcra(a, b, now, cost, burst, refill, tok, depth, dl, mu)\n{old}")]),
    ("commit", "struct.pack of the new state, its TTL (ttl_ms), both kept in the batch's tables", "twice",
     [("              if w then commit(S, TTL, Z, key, algo, units, algo == 6 and per or reset, x, y, z) end\n",
       "{old}{old}")]),
    ("reply fill", "the check's 4 values into the reply's table", "twice",
     [("          out[j + 1], out[j + 2], out[j + 3], out[j + 4] = code, rem, reset, retry\n", "{old}{old}")]),
    ("SET", "redis.call('SET', key, state, 'PX', ms) at the end of the call, and the TTL's string.format", "twice",
     [("    for key, ms in pairs(TTL) do call('SET', key, S[key], 'PX', fmt('%d', ms)) end\n", "{old}{old}")]),
    ("no SET", "the same, left out (the keys keep their state)", "without",
     [("    for key, ms in pairs(TTL) do call('SET', key, S[key], 'PX', fmt('%d', ms)) end\n", "")]),
    ("SET format", "string.format('%d', ms) of the TTL alone", "twice",
     [("    for key, ms in pairs(TTL) do call('SET', key, S[key], 'PX', fmt('%d', ms)) end\n",
       "    for key, ms in pairs(TTL) do fmt('%d', ms) call('SET', key, S[key], 'PX', fmt('%d', ms)) end\n")]),
]


# Prototypes of issue 33's cuts (--protos): production with one change each, then all together.
# They decide as production does on the bench's batches (gcra, groups of one check, one policy),
# not in general: each says what a real change would need.
RECORD = ("          local algo, req, per, burst, refill, tok, depth, wsc, cost, at, dl, mu, bl =\n"
          "            sunpack('<ddddddddddddd', blob, q)\n"
          "          if not (algo >= 0 and algo <= 6 and algo % 1 == 0 and req >= 1 and per >= 1 and burst >= 0"
          " and refill >= 1\n"
          "                  and tok >= 1 and depth >= 1 and wsc >= 1 and cost >= -1 and dl >= -1 and mu >= -1\n"
          "                  and (algo < 6 or req <= 1000000) and bl >= 0 and bl % 1 == 0) then  -- kMaxConcurrency:"
          " bounds a call's slots\n"
          "            return redis.error_reply('ERR ratelimit script: bad check ' .. (k + i))\n"
          "          end\n")
LOOP_HEAD = "  local size, p, k, o = #blob, 1, 0, 2\n"
SET_LOOP = "    for key, ms in pairs(TTL) do call('SET', key, S[key], 'PX', fmt('%d', ms)) end\n"
BATCH_TABLES = "  if ngroups > 1 then\n    S, TTL = {}, {}\n"
RETURN = "  if marker then remember(marker, out) end\n  return out\nend\nredis.register_function"
COMMIT_S = "    S[key], TTL[key] = spack('<ddd', x, y, z), ttl_ms(reset)\n"
READ_S = "            if s then a, b, c = sunpack('<ddd', s) end\n"
P_BINARY = [(RETURN, "  if marker then remember(marker, out) end\n  return spack('<' .. string.rep('d', #out), unpk(out))\n"
                     "end\nredis.register_function")]
P_HEADER = [("  local ngroups, nkeys = shape(blob)\n", "  local ngroups, nkeys = #keys, #keys\n"),
            ("    local bad = first_bad(blob)\n", "    local bad = nil\n")]
P_POLICY = [(LOOP_HEAD, "  local P1, P2, P3, P4, P5, P6, P7, P8, _, _, P11, P12, P13 = sunpack('<ddddddddddddd', blob, 9)\n"
                        "  if not (P1 >= 0 and P1 <= 6 and P1 % 1 == 0 and P2 >= 1 and P3 >= 1 and P4 >= 0 and P5 >= 1\n"
                        "          and P6 >= 1 and P7 >= 1 and P8 >= 1 and P11 >= -1 and P12 >= -1\n"
                        "          and (P1 < 6 or P2 <= 1000000) and P13 >= 0 and P13 % 1 == 0) then\n"
                        "    return redis.error_reply('ERR ratelimit script: bad policy')\n  end\n{old}"),
            (RECORD, "          local algo, req, per, burst, refill, tok, depth, wsc, dl, mu, bl =\n"
                     "            P1, P2, P3, P4, P5, P6, P7, P8, P11, P12, P13\n"
                     "          local cost, at = sunpack('<dd', blob, q + 64)\n"
                     "          if not (cost >= -1) then return redis.error_reply('ERR ratelimit script: bad check') end\n")]
P_MGET = [(BATCH_TABLES, "{old}    local got = call('MGET', unpk(keys))\n"
                         "    for i = 1, #keys do\n      local v = got[i]\n"
                         "      if not v or #v == 24 then S[keys[i]] = v end\n    end\n")]
P_TTLNUM = [(SET_LOOP, "    for key, ms in pairs(TTL) do call('SET', key, S[key], 'PX', ms) end\n")]
P_PACK_ONCE = [(COMMIT_S, "    local e = S[key]\n    if e and #e == 3 then e[1], e[2], e[3] = x, y, z else S[key] = {x, y, z} end\n"
                          "    TTL[key] = reset\n"),
               (READ_S, "            if s and #s == 3 then a, b, c = s[1], s[2], s[3] elseif s then a, b, c = sunpack('<ddd', s)"
                        " end\n"),
               (SET_LOOP, "    for key, r in pairs(TTL) do\n      local e = S[key]\n"
                          "      call('SET', key, spack('<ddd', e[1], e[2], e[3]), 'PX', fmt('%d', ttl_ms(r)))\n    end\n")]
P_ALL_SET = [(SET_LOOP, "    for key, r in pairs(TTL) do\n      local e = S[key]\n"
                        "      call('SET', key, spack('<ddd', e[1], e[2], e[3]), 'PX', ttl_ms(r))\n    end\n")]
# A lean path for the common batch: every check gcra without delay, block or calendar, one policy
# for the call (a real one: a header naming the policies and what the batch holds, so that the
# Lua neither pre-scans nor re-checks each record), decided inline (no Lua call per check), each
# key's state kept as numbers and written once, the reply's values as production's. READ: how
# the states come: GET per distinct key ("get") or one MGET of the batch's keys ("mget").
# COMPACT: the reply's values per check as 2 (allowed: remaining * 4 + code, reset) or 3
# (rejected: and retry) integers instead of 4. SETRANGE: a key whose expiry (kept in the state's
# third double, which gcra does not use) already covers the new state is written in place
# (SETRANGE of its first 16 bytes: the TTL stays), else SET ... PX twice the TTL needed (so that
# a key used steadily is seldom SET).
def lean(read, compact, setrange=False):
    fetch = {"get": "        local v = pget('GET', key)\n",
             "mget": "        local v = got[i]\n"}[read]
    reply = ("      if code == 1 then\n        out[o + 1], out[o + 2] = rem * 4 + code, reset\n        o = o + 2\n"
             "      else\n        out[o + 1], out[o + 2], out[o + 3] = rem * 4 + code, reset, retry\n        o = o + 3\n"
             "      end\n") if compact else (
             "      out[o + 1], out[o + 2], out[o + 3], out[o + 4] = code, rem, reset, retry\n      o = o + 4\n")
    return [("  local ngroups, nkeys = shape(blob)\n", """  if mode == 'decide' and #argv == 3 then
    local nk = #keys
    local algo, req, per, burst, refill, tok, depth = sunpack('<ddddddd', blob, 9)
    local now = clock(argv)
    local horizon = (depth - depth % refill) / refill + 2
    local S, W = {}, {}
""" + ("    local got = call('MGET', unpk(keys))\n" if read == "mget" else "") + """    local out, o, admitted = {0, now}, 2, 0
    for i = 1, nk do
      local key = keys[i]
      local cost = sunpack('<d', blob, 112 * i - 39)
      local st = S[key]
      if not st then
""" + fetch + """        if v then st = {sunpack('<ddd', v)} else st = {0, 0} end
        S[key] = st
      end
      local a, b = st[1], st[2]
      local ahead, level, beyond = a - now, 0, 0
      if ahead >= 0 then
        if ahead > horizon then
          beyond = ahead - horizon
          ahead = horizon
        end
        level = ahead * refill + b
      end
      local code, rem, retry, after = 0, 0, 0, level
      if cost == 0 then
        code = 1
      elseif cost > burst + 1 then
        retry = -1
      else
        local need = level + cost * tok
        if need <= depth then
          code, after = 1, need
        else
          local over = need - depth
          local r = over % refill
          retry = (over - r) / refill + beyond
          if r ~= 0 then retry = retry + 1 end
        end
      end
      if after < depth then
        local left = depth - after
        rem = (left - left % tok) / tok
      end
      local r = after % refill
      local reset = (after - r) / refill + beyond
      if r ~= 0 then reset = reset + 1 end
      if code == 1 then
        admitted = admitted + 1
        if after ~= level then
          st[1], st[2] = now + (after - r) / refill, r
          W[key] = reset
        end
      end
""" + reply + """    end
    out[1] = admitted
""" + ("""    for key, reset in pairs(W) do
      local st = S[key]
      if st[3] and st[3] >= now + reset then
        call('SETRANGE', key, 0, spack('<dd', st[1], st[2]))
      else
        call('SET', key, spack('<ddd', st[1], st[2], now + 2 * reset + 1000), 'PX', fmt('%d', ttl_ms(2 * reset + 1000)))
      end
    end
""" if setrange else """    for key, reset in pairs(W) do
      local st = S[key]
      call('SET', key, spack('<ddd', st[1], st[2], 0), 'PX', fmt('%d', ttl_ms(reset)))
    end
""") + """    return out
  end
{old}""")]


PROTOS = [
    ("proto: binary reply", "the reply as one string of doubles (nginx unpacks it) instead of 2 + 4n integers", P_BINARY),
    ("proto: header", "the batch's counts sent in a header (no shape and first_bad passes)", P_HEADER),
    ("proto: policy once", "the policy unpacked and checked once per call, per check only cost and at", P_POLICY),
    ("proto: MGET", "the batch's states read by one MGET instead of a GET per key", P_MGET),
    ("proto: TTL number", "SET's PX given as a number (Redis formats it) instead of string.format", P_TTLNUM),
    ("proto: pack once", "a key's state kept as numbers within the call, packed once at its SET", P_PACK_ONCE),
    ("proto: all", "all of the above", P_BINARY + P_HEADER + P_POLICY + P_MGET + P_PACK_ONCE[:2] + P_ALL_SET),
    ("proto: lean", "a lean path for batches of gcra checks of one policy (header), decided inline, GET per distinct key",
     lean("get", False)),
    ("proto: lean + MGET", "the same, the batch's states read by one MGET", lean("mget", False)),
    ("proto: lean 2-3 values", "the lean path, its reply 2 integers per allowed check, 3 per rejected one",
     lean("get", True)),
    ("proto: lean + MGET 2-3 values", "the lean path with MGET and the compact reply", lean("mget", True)),
    ("proto: lean + MGET 2-3 values SETRANGE", "the same, a key whose TTL covers its new state written in place "
     "(SETRANGE), else SET ... PX twice the TTL needed", lean("mget", True, True)),
]


CLOCK = "local function clock()\n  local t = call('TIME')\n  return tonum(t[1]) * 1000000 + tonum(t[2])\nend\n"


class Resp:
    """a minimal RESP client (check_protos)"""

    def __init__(self, port):
        self.s = socket.create_connection(("127.0.0.1", port), timeout=10)
        self.f = self.s.makefile("rb")

    def call(self, *args):
        out = b"*%d\r\n" % len(args)
        for a in args:
            a = a if isinstance(a, bytes) else str(a).encode()
            out += b"$%d\r\n%s\r\n" % (len(a), a)
        self.s.sendall(out)
        return self.read()

    def read(self):
        line = self.f.readline().rstrip(b"\r\n")
        t, rest = line[:1], line[1:]
        if t == b"-":
            raise RuntimeError(rest.decode())
        if t in (b"+", b":"):
            return int(rest) if t == b":" else rest.decode()
        if t == b"$":
            n = int(rest)
            return None if n < 0 else self.f.read(n + 2)[:-2]
        if t == b"*":
            return [self.read() for _ in range(int(rest))]
        raise RuntimeError("bad reply %r" % line)


def check_protos(text, server):
    """each prototype against production on the same calls (clock from ARGV[2]): True if all agree"""
    port = socket.socket()
    port.bind(("127.0.0.1", 0))
    number = port.getsockname()[1]
    port.close()
    d = tempfile.mkdtemp(prefix="rlcheck.")
    proc = subprocess.Popen([server, "--port", str(number), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
                             "--dir", d], stdout=subprocess.DEVNULL)
    try:
        for _ in range(100):
            try:
                r = Resp(number)
                break
            except OSError:
                time.sleep(0.05)
        libs = {}
        for name, _, repls in [("production", "", [])] + PROTOS:
            lib = make_variant(text, repls + [(CLOCK, "local function clock(argv) return tonum(argv[2]) end\n")],
                               "check " + name)
            libs[name] = r.call("FUNCTION", "LOAD", "REPLACE", lib)
        # gcra 10/s burst 3 (refill 1, token 100000, depth 400000), cost 1: admits and rejects
        rec = struct.pack("<13d", 0, 10, 1000000, 3, 1, 100000, 400000, 1000000, 1, 0, -1, -1, 0)
        rng = random.Random(7)
        ok = {name: 0 for name in libs}
        bad = {name: 0 for name in libs}
        now = 1700000000000000
        for _ in range(300):
            now += rng.randrange(0, 300000)
            n = rng.randrange(1, 17)
            keys = ["k%d" % rng.randrange(40) for _ in range(n)]
            blob = b"".join(struct.pack("<d", 1) + rec for _ in keys)
            want = None
            for name, fn in libs.items():
                got = r.call("FCALL", fn, len(keys), *["{%s}%s" % (name, k) for k in keys], "decide", now, blob)
                if isinstance(got, bytes):   # the binary reply: doubles
                    got = [int(x) for x in struct.unpack("<%dd" % (len(got) // 8), got)]
                if "2-3 values" in name:     # the compact reply, as production's
                    full, j = got[:2], 2
                    while j < len(got):
                        code, rem = got[j] % 4, got[j] // 4
                        if code == 1:
                            full += [code, rem, got[j + 1], 0]
                            j += 2
                        else:
                            full += [code, rem, got[j + 1], got[j + 2]]
                            j += 3
                    got = full
                if name == "production":
                    want = got
                elif got == want:
                    ok[name] += 1
                else:
                    bad[name] += 1
        print("Prototypes against production, 300 calls (1-16 checks of 40 keys, gcra 10/s burst 3, clock from the "
              "call):")
        for name, _, _ in PROTOS:
            print("  %-24s %s (%d calls the same, %d not)" % (name, "decides as production" if not bad[name]
                                                                else "DIFFERS", ok[name], bad[name]))
        return not any(bad.values())
    finally:
        proc.terminate()
        proc.wait()
        subprocess.run(["rm", "-rf", d])


def make_variant(text, repls, name):
    """the library with the replacements made, renamed (a name of production's length)"""
    for old, new in repls:
        n = text.count(old)
        if n != 1:
            sys.exit("lua_parts.py: part %r: its line matches %d times in the script, not once "
                     "(the script changed: update PARTS in tests/bench/lua_parts.py):\n%s" % (name, n, old))
        text = text.replace(old, new.replace("{old}", old))
    return rename(text, name)


def rename(text, name):
    m = re.match(r"#!lua name=(\S+)\n", text)
    if not m:
        sys.exit("lua_parts.py: not a function library (no #!lua name=...)")
    old = m.group(1)
    new = ("ratelimit_" + hashlib.sha1(name.encode()).hexdigest())[:len(old)]
    return text.replace(old, new)


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    root = os.path.dirname(os.path.dirname(here))
    binary = os.environ.get("RL_LUA_BENCH", os.path.join(root, "build/bench/bench/rl_redis_lua_bench"))
    args = sys.argv[1:]
    protos, passed = [], []
    grind = "--callgrind" in args
    if grind:
        args.remove("--callgrind")
    with_protos = "--protos" in args
    if with_protos:
        args.remove("--protos")
    only = None  # --only A,B: only the parts and prototypes whose names hold one of those
    if "--only" in args:
        k = args.index("--only")
        only = args[k + 1].split(",")
        del args[k:k + 2]
    checking = "--check-protos" in args
    if checking:
        args.remove("--check-protos")
    opts = {"--rounds": "7", "--checks": "32000", "--groups": "16", "--keys-count": "1000000"}
    if grind:
        opts.update({"--rounds": "1", "--checks": "3200", "--keys-count": "100000"})
    server = "redis-server"
    i = 0
    while i < len(args):
        a = args[i]
        if i + 1 >= len(args):
            sys.exit("lua_parts.py: %s needs a value" % a)
        v = args[i + 1]
        if a == "--proto":
            protos.append(v.split("=", 1))
        elif a == "--redis-server":
            server = v
        elif a in opts:
            opts[a] = v
        else:
            passed += [a, v]
        i += 2
    tmp = tempfile.mkdtemp(prefix="rlparts.")
    lib = os.path.join(tmp, "production.lua")
    subprocess.run([binary, "--dump-library", lib], check=True)
    text = open(lib).read()
    if checking:
        sys.exit(0 if check_protos(text, server) else 1)
    # --form general: the variants change the general loop, which production's batches here (gcra,
    # one policy, groups of one check) would otherwise skip for the lean form.
    cmd = [binary, "--algos", "gcra", "--quota", "run", "--raw", "--lenient", "--form", "general",
           "--csv", os.path.join(tmp, "out.csv")]
    for k, v in opts.items():
        cmd += [k, v]
    cmd += passed
    def variant(name, repls):
        """the library with those replacements, measured as NAME (unless --only leaves it out)"""
        if only is not None and not any(o in name for o in only):
            return False
        f = os.path.join(tmp, "v%d.lua" % len(cmd))
        with open(f, "w") as out:
            out.write(make_variant(text, repls, name))
        cmd.extend(["--fcall", "%s=%s" % (name, f)])
        return True

    for name, _, _, repls in PARTS:
        variant(name, repls)
    for name, _, repls in PROTOS if with_protos else []:
        if variant(name, repls):
            protos.append((name, None))
    for name, path in protos:
        if path is None:
            continue
        f = os.path.join(tmp, "p%d.lua" % len(cmd))
        with open(f, "w") as out:
            out.write(rename(open(path).read(), "proto " + name))
        cmd += ["--fcall", "%s=%s" % (name, f)]
    env = dict(os.environ)
    if grind:
        cmd += ["--hook", grind_setup(tmp, server, env)]
    print("Running: " + " ".join(cmd), file=sys.stderr, flush=True)
    raw = subprocess.run(cmd, check=True, capture_output=True, text=True, env=env).stdout
    with open(os.path.join(tmp, "out.csv")) as f:
        rows = list(csv.DictReader(f))
    if grind:
        grind_report(tmp, opts, protos, server)
    else:
        report(rows, opts, protos, raw)
    if os.environ.get("KEEP") == "1":
        print("kept " + tmp, file=sys.stderr)
    else:
        subprocess.run(["rm", "-rf", tmp])


def ways_table(loads, have, unit, cell):
    """production, EVALSHA, Redis's own GET+SET and the floors measured (have): cell(workload, way)"""
    print("| way | what | " + " | ".join("%s: %s" % (w, unit) for w in loads) + " |")
    print("| --- | --- |" + " ---: |" * len(loads))
    ref = [("FCALL", "production, as nginx calls it"), ("EVALSHA", "production, as EVAL (its closures built per call)"),
           ("GET+SET", "no script: a GET and a SET ... PX per key, pipelined (Redis's own commands)")]
    for way, what in ref + [(n, w) for n, w, k, _ in PARTS if k == "floor"]:
        if way in have:
            print("| %s | %s | %s |" % (way, what, " | ".join(cell(w, way) for w in loads)))


def proto_table(protos, loads, value, unit, spec):
    """the prototypes against production (FCALL): value(workload, way) per check"""
    if not protos:
        return
    what = {name: w for name, w, _ in PROTOS}
    print()
    print("Prototypes (--protos: production's library with one change; --proto: given), against production:")
    print()
    print("| prototype | what | " + " | ".join("%s: %s per check (vs production)" % (w, unit) for w in loads) + " |")
    print("| --- | --- |" + " ---: |" * len(loads))
    for name, _ in protos:
        print("| %s | %s | %s |" % (name, what.get(name, "given"), " | ".join(
            (spec + " (%.2fx)") % (value(w, name), value(w, name) / value(w, "FCALL")) for w in loads)))


def grind_setup(tmp, server, env):
    """a redis-server first in PATH that runs the real one under callgrind (counting from the
    start, dumping on request), and the hook that zeroes its counters and dumps them, each dump
    named after its workload and way; returns the hook's path"""
    for c in ("valgrind", "callgrind_control"):
        if subprocess.run(["sh", "-c", "command -v " + c], capture_output=True).returncode != 0:
            sys.exit("lua_parts.py: --callgrind needs %s (package valgrind)" % c)
    real = server if "/" in server else subprocess.run(["sh", "-c", "command -v " + server], capture_output=True,
                                                       text=True).stdout.strip()
    if not real:
        sys.exit("lua_parts.py: no %s" % server)
    bindir = os.path.join(tmp, "bin")
    os.mkdir(bindir)
    with open(os.path.join(bindir, "redis-server"), "w") as f:
        # counting only while Redis serves the commands (reads, parses and runs them; writes the
        # replies): serverCron's periodic work would otherwise count per second, which callgrind
        # stretches 50-fold
        f.write("#!/bin/sh\necho $$ >%s/redis.pid\nexec valgrind --tool=callgrind --callgrind-out-file=%s/cg.out "
                "--dump-instr=no --collect-atstart=no --toggle-collect=readQueryFromClient "
                "--toggle-collect=handleClientsWithPendingWritesUsingThreads %s \"$@\" 2>>%s/valgrind.log\n"
                % (tmp, tmp, os.path.abspath(real), tmp))
    hook = os.path.join(tmp, "hook.sh")
    with open(hook, "w") as f:
        f.write("""#!/bin/sh
# begin: zero Redis's counters; end: dump them as dump.N, its workload, way and checks beside it
set -e
pid=$(cat {t}/redis.pid)
if [ "$1" = begin ]; then callgrind_control -z $pid >/dev/null; exit 0; fi
rm -f {t}/cg.out.*
callgrind_control -d $pid >/dev/null
n=$(cat {t}/n 2>/dev/null || echo 0)
mv "$(ls -t {t}/cg.out.* | head -1)" {t}/dump.$n
printf '%s\t%s\t%s\n' "$RL_WORKLOAD" "$RL_WAY" "$RL_CHECKS" >{t}/dump.$n.name
echo $((n + 1)) >{t}/n
""".format(t=tmp))
    for f in (hook, os.path.join(bindir, "redis-server")):
        os.chmod(f, 0o755)
    env["PATH"] = bindir + ":" + env.get("PATH", "")
    return hook


def grind_report(tmp, opts, protos, server):
    """the instruction counts of the dumps grind_setup's hook made (the last of each workload
    and way: the bench's warm-up pass comes first)"""
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import callgrind_parts as cp
    dumps = {}
    n = int(open(os.path.join(tmp, "n")).read())
    for i in range(n):
        load, way, checks = open(os.path.join(tmp, "dump.%d.name" % i)).read().rstrip("\n").split("\t")
        dumps[(load, way)] = (os.path.join(tmp, "dump.%d" % i), int(checks))
    loads = []
    for load, way in dumps:
        if load not in loads and way == "FCALL":  # (the fill before measuring has EVALSHA only)
            loads.append(load)
    ir = {k: cp.parse(d)[2] / c for k, (d, c) in dumps.items() if k[0] in loads}
    g = int(opts["--groups"])
    print("Redis's instructions per check (callgrind, the whole redis-server: %s; gcra, batches of %d single-check"
          % (server, g))
    print("groups, run.sh's quotas: every check admitted; random keys among %s, all existing; %s checks per way):"
          % (opts["--keys-count"], opts["--checks"]))
    print()
    have = {way for _, way in ir}
    ways_table(loads, have, "Ir per check", lambda w, way: "%.0f" % ir[(w, way)])
    proto_table(protos, loads, lambda w, way: ir[(w, way)], "Ir", "%.0f")
    print()
    print("The parts of production's instructions per check (\"twice\": the variant's minus production's, \"without\":")
    print("production's minus the variant's):")
    print()
    print("| part | measured | what | " + " | ".join("%s: Ir per check (share of production)" % w for w in loads) + " |")
    print("| --- | --- | --- |" + " ---: |" * len(loads))
    for name, what, kind, _ in PARTS:
        if kind == "floor" or name not in have:
            continue
        cells = []
        for w in loads:
            d = ir[(w, name)] - ir[(w, "FCALL")]
            if kind == "without":
                d = -d
            cells.append("%.0f (%.0f%%)" % (d, 100 * d / ir[(w, "FCALL")]))
        print("| %s | %s | %s | %s |" % (name, kind, what, " | ".join(cells)))
    print()
    print("Production (FCALL) and Redis's own GET + SET, by function (callgrind_parts.py: each function's own")
    print("instructions in its part, helpers such as the allocator and sds strings in their callers'), per check:")
    print()
    cols = [("%s %s" % (way, w), dumps[(w, way)][0], dumps[(w, way)][1]) for way in ("FCALL", "GET+SET") for w in loads]
    cols += [("%s %s" % (name, w), dumps[(w, name)][0], dumps[(w, name)][1])
             for name, _ in protos if name.startswith("proto: lean") and "2-3" in name and "MGET" in name
             for w in loads if (w, name) in dumps]
    cp.table("redis", cols, "check")


def report(rows, opts, protos, raw):
    val = {(r["workload"], r["way"]): r for r in rows}
    loads = []
    for r in rows:
        if r["workload"] not in loads:
            loads.append(r["workload"])
    g = int(opts["--groups"])

    def get(w, way, k="cmd"):
        return float(val[(w, way)][k])

    print("Redis's time per check in the Lua, by part (FCALL of variants of the production library; gcra, batches of")
    print("%d single-check groups, run.sh's quotas: every check admitted; random keys among %s, all existing;"
          % (g, opts["--keys-count"]))
    print("%s rounds of %s checks per way, medians). cmd: us per check inside the call (INFO commandstats usec; the Lua"
          % (opts["--rounds"], opts["--checks"]))
    print("and the commands it runs); cpu: Redis's main-thread CPU us per check (INFO cpu: parsing and network too);")
    print("in: of cmd, inside the commands the Lua ran; calls: those commands per check.")
    print()
    have = {way for _, way in val}
    ways_table(loads, have, "cmd / cpu us per check, in, calls", lambda w, way: "%.2f / %.2f, %.2f, %.2f" % (
        get(w, way), get(w, way, "cpu"), get(w, way, "in"), get(w, way, "calls")))
    proto_table(protos, loads, get, "cmd us", "%.2f")
    print()
    print("The parts of production's time per check (cmd, us; \"twice\": the variant's minus production's, \"without\":")
    print("production's minus the variant's; per call: divided by the %d checks of a call):" % g)
    print()
    print("| part | measured | what | " + " | ".join("%s: us per check (share of production)" % w for w in loads) + " |")
    print("| --- | --- | --- |" + " ---: |" * len(loads))
    total = {w: 0.0 for w in loads}
    for name, what, kind, _ in PARTS:
        if kind == "floor" or name not in have:
            continue
        cells = []
        for w in loads:
            d = get(w, name) - get(w, "FCALL")
            if kind == "without":
                d = -d
            prod = get(w, "FCALL")
            cells.append("%.2f (%.0f%%)" % (d, 100 * d / prod if prod else 0))
            if kind.startswith("twice") and name != "SET format":
                total[w] += d
        print("| %s | %s | %s | %s |" % (name, kind, what, " | ".join(cells)))
    if "floor" in have:
        cells = []
        for w in loads:
            floor, prod = get(w, "floor"), get(w, "FCALL")
            cells.append("%.2f + %.2f = %.2f of %.2f" % (floor, total[w], floor + total[w], prod))
        print("| floor + the parts measured twice | | the call alone, and each part above once | %s |" % " | ".join(cells))
    print()
    print("The bench's own table:")
    print()
    for line in raw.splitlines():
        print("    " + line)


if __name__ == "__main__":
    main()
