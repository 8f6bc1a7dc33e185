#!/usr/bin/env python3
"""A callgrind dump's instructions split into parts of the work (issue 33's profiles).

    python3 tests/bench/callgrind_parts.py nginx|redis DUMP [N]   the parts of DUMP, per N (requests, checks)
    python3 tests/bench/callgrind_parts.py nginx|redis --table NAME=DUMP:N...   a Markdown table, a
                                           column per dump (its instructions per N), a row per part

Each function is given a part by its name (or its object's: a library whose symbols are
stripped, as Debian's hiredis, goes whole into one part) from the rules below; a helper
(TRANSPARENT: libc's malloc and memcpy, nginx's pools and printf, Redis's allocator and sds
strings...) or a function no rule names is its callers' work: its own instructions go to its
callers' parts in proportion to what each call of it cost (callgrind's inclusive cost of each
call edge), up the call graph until a named caller. Instructions are
what callgrind counts: user space only (no kernel: send, receive, wake-ups), no cache misses.
Used by instructions.sh (PARTS=on) and lua_parts.py (--callgrind); standard library only.
"""
import re
import sys

# (part, regular expression on "object:function") in order: the first that matches names it.
NGINX = [
    ("parse the reply (hiredis; a decide reply's integers: resp_ints)", r"libhiredis|:(?:\(anonymous namespace\)::)?"
                                 r"(create_integer|create_array|create_string"
                                 r"|create_nil|reply_object|arena_alloc|arena_reset|free_object)\b|"
                                 r":rl::parse_int_array|resp_ints\.cpp"),
    ("module: build the command", r":rl::(write_batch_command|batch_command_bound|batch_command_len|redis_key|"
                                  r"script_call_head|Resp::|\(anonymous namespace\)::script_command|"
                                  r"\(anonymous namespace\)::write_group)|:\(anonymous namespace\)::checks_of|"
                                  r":rl_redis_scratch|resp_writer\.h"),
    ("module: queue, batch, send (the connection's buffer)", r":\(anonymous namespace\)::(send_batch|queue_call|"
                                  r"call_for|batch_alloc|batch_free|enqueue|op_alloc|op_free|out_reserve|write_some|"
                                  r"on_flush|arm_watchdog)\b|:rl_node_send|:rl_conn_send|:rl_node_can_take|"
                                  r":rl_conn_schedule_flush|:rl_redis_request_fill|:rl_conn_usable|:rl_node_script|"
                                  r":rl_metrics_batch|:rl_held_next_seq|:rl_held_owner"),
    ("module: read the socket, hand replies over", r":\(anonymous namespace\)::(on_read|take_replies|take_bytes|"
                                                   r"feed_reader|keep_start|op_replied|deliver|reader_idle|room)\b|"
                                                   r":rl_metrics_round_trip|:rl_metrics_in_flight"),
    ("module: decode the reply into the results", r":\(anonymous namespace\)::(take_batch|on_batch_reply|"
                                                  r"call_settled|on_batch_ints|batch_back)\b|:rl::decode_batch_reply|:rl_node_reply|"
                                                  r":rl_held_clock|:rl_rejected_remember|:rl_rejected_now"),
    ("module: the Redis store's request side (send, suspend, end)", r":\(anonymous namespace\)::(redis_remote|"
                                  r"rejected_here|redis_end|redis_decided|redis_give_back|abandon|redis_timed_out)\b|"
                                  r":rl_rejected_check"),
    ("module: decide in shared memory", r":rl::(decide|gcra|bucket|table_|slot_|token|leaky|fixed|sliding|"
                                        r"log_|policy_)|store_shm|:rl_shm_|:\(anonymous namespace\)::(shm_|lock_zones|"
                                        r"unlock_zones)|:rl_store_decide_local|:rl_store_slot"),
    ("module: key, headers, the rest", r"ngx_http_ratelimit_module\.so"),
    ("nginx: timers, posted events, epoll", r":ngx_(event_|epoll_|rbtree_|process_events|add_timer|del_timer|"
                                            r"post_event|delete_posted|event_expire|time_update|gmtime|"
                                            r"handle_read_event|handle_write_event)"),
    ("nginx: the HTTP request (read, parse, phases, response, write)", r"/nginx:|nginx$"),
]

REDIS = [
    ("read the socket, parse the command", r":(readQueryFromClient|processInputBuffer|processMultibulkBuffer|"
                                           r"processInlineBuffer|connSocketRead|connRead|resetClient|"
                                           r"freeClientArgv|commandProcessed|processCommandAndResetClient)$"),
    ("replies: into buffers (the client's, and each redis.call's into the script's client), written",
     r":(_addReply|addReply|setDeferred|writeToClient|_writeToClient|"
                                  r"handleClientsWithPendingWrites|connSocketWrite|prepareClientToWrite|"
                                  r"clientHasPendingReplies|writevToClient)"),
    ("dispatch (processCommand, call; the script's commands' too)", r":(processCommand|call|lookupCommand|"
                                  r"lookupCommandOrOriginal|lookupCommandLogic|lookupSubcommand|"
                                  r"getNodeByQuery|ACLCheckAllPerm|ACLCheckAllUserCommandPerm|ACLSelectorCheck|"
                                  r"updateCommandLatencyHistogram|latencyAddSample|commandCheck|"
                                  r"replicationFeed|propagate|alsoPropagate|afterCommand|postExecutionUnitOperations|"
                                  r"blockedBeforeSleep|trackingHandlePendingKeyInvalidations|"
                                  r"execCommandPropagate|isInsideYieldingLongCommand)\w*$"),
    ("GET, SET ... PX, TIME themselves (lookups, the value, the expiry)", r":(getCommand|getGenericCommand|"
                                  r"setCommand|setGenericCommand|parseExtendedStringArgumentsOrReply|timeCommand|"
                                  r"lookupKey|dbAdd|dbSetValue|setKey|setExpire|getExpire|expireIfNeeded|keyIsExpired|"
                                  r"dictFind|dictAdd|dictReplace|dictAddRaw|dictFreeUnlinkedEntry|dictGenHashFunction|"
                                  r"siphash|dictSdsKeyCompare|dictSdsHash|tryObjectEncoding|signalModifiedKey|"
                                  r"notifyKeyspaceEvent|checkType|touchWatchedKey|dbUnshareStringValue|"
                                  r"mstime|ustime|getTimeoutFromObjectOrReply|getLongLongFromObject|"
                                  r"string2ll|getKeysFromCommand|\w*GetKeys)\w*$"),
    ("FCALL: the call's setup (KEYS and ARGV into Lua, run context)", r":(fcallCommand|fcallCommandGeneric|"
                                  r"luaCallFunction|luaEngineCall|scriptPrepareForRun|scriptResetRun|"
                                  r"luaCreateArray|luaSetErrorMetatable|luaSaveOnRegistry|luaGetFromRegistry|"
                                  r"scriptIsTimedout|functionsLibCtx\w*|fcallGetCommandFlags|"
                                  r"scriptSetRepl|luaSetGlobalArray|evalGenericCommand|evalShaCommand|"
                                  r"luaCreateFunction|evalCalcFunctionName|evalsha\w*)\w*$"),
    ("redis.call: Lua arguments to a Redis command", r":(luaRedisCallCommand|luaRedisPCallCommand|"
                                  r"luaRedisGenericCommand|luaArgsToRedisArgv|freeLuaRedisArgv|scriptCall|"
                                  r"scriptVerify\w*|luaRedisSetResp|createClient|luaError|luaPushError)\w*$"),
    ("redis.call: the reply into Lua", r":(redisProtocolToLuaType\w*|callReply\w*|parseReply|"
                                       r"parse\w*Reply|resp_parser|luaReplyTo\w*|\w*ToLua\w*)$"),
    ("the script's reply to RESP", r":(luaReplyToRedisReply|luaRedisReplyHandler|luaReply\w*)$"),
    ("struct.pack / struct.unpack", r":(b_pack|b_unpack|b_size|getnum|optsize|gettoalign|controloptions|"
                                    r"putinteger|getinteger|correctbytes|luaopen_struct)$"),
    ("string.format", r":(str_format|addquoted|scanformat|addintlen)$"),
    ("Lua: garbage collector", r":(luaC_\w+|singlestep|propagatemark|propagateall|sweeplist|sweepwholelist|"
                               r"markroot|atomic|traverse\w+|reallymarkobject|freeobj|luaE_freethread|"
                               r"cleartable|markmt|checkSizes|GCTM|luaF_freeproto|luaF_freeclosure|"
                               r"luaH_free|luaS_freeall|remarkupvals|marktmu)$"),
    ("Lua: tables", r":(luaH_\w+|rehash|resize|numusearray|numusehash|setnodevector|countint|"
                    r"computesizes|mainposition|getfreepos|newkey|luaO_rawequalObj|arrayindex|"
                    r"hashnum|unbound_search)$"),
    ("Lua: strings (interning)", r":(luaS_\w+|luaO_str2d|luaV_tostring|luaO_pushvfstring|luaO_pushfstring)$"),
    ("Lua: the interpreter (luaV_execute, calls, the API)", r":(luaV_\w+|luaD_\w+|luaF_\w+|lua_\w+|luaL_\w+|"
                                                           r"index2adr|luaT_\w+|callTMres|call_binTM|"
                                                           r"Arith|luaO_\w+|adjust_varargs|luaG_\w+|f_call|"
                                                           r"resume|tryfuncTM|precall\w*|luaB_\w+|"
                                                           r"luaV_execute)$"),
    ("event loop, cron, expiry, the rest", r"."),
]

# Helpers of every part: their cost is their callers'.
# (a function of no known object, or known only by its address in Redis: a PLT stub, a stripped
# helper, is its caller's work too)
LIBS = r"/(libc|ld-linux|libstdc\+\+|libgcc_s|libm|libjemalloc)[.-]|^\?\?\?:"
TRANSPARENT = {
    "nginx": LIBS + r"|:ngx_(palloc|pnalloc|pcalloc|palloc_small|palloc_large|alloc|calloc|memalign|pfree|"
                    r"cpystrn|vslprintf|sprintf|snprintf|slprintf|sprintf_num|atoi|hextoi|strlow|"
                    r"pstrdup)$",
    "redis": LIBS + r"|:(je_\w+|zmalloc\w*|zfree\w*|zcalloc\w*|zrealloc\w*|ztry\w+|zmalloc_usable\w*|"
                    r"sds\w+|_sds\w+|createObject|createStringObject|createRawStringObject|"
                    r"createEmbeddedStringObject|decrRefCount|incrRefCount|freeStringObject|"
                    r"ll2string|ull2string|string2l|memtest\w*|listAddNode\w*|listDelNode|listRelease|"
                    r"listCreate|listEmpty|luaM_realloc_|luaM_growaux_|l_alloc|0x[0-9a-f]+)$",
}
RULES = {"nginx": NGINX, "redis": REDIS}
NAME = re.compile(r"^(\w+)=\((\d+)\)(?: (.*))?$")


def parse(path):
    """(self cost per function, inclusive cost per call edge, total) of a callgrind dump:
    functions named "object:function" """
    names = {"ob": {}, "fn": {}}
    self_cost, edges = {}, {}
    ob = cob = fn = cfn = None
    in_call = False
    total = 0
    with open(path, errors="replace") as f:
        for line in f:
            c = line[0]
            if c.isdigit() or c in "+-*":
                v = line.split()
                cost = int(v[1]) if len(v) > 1 else 0
                if in_call:
                    edges[(fn, cfn)] = edges.get((fn, cfn), 0) + cost
                    in_call = False
                elif fn is not None:
                    self_cost[fn] = self_cost.get(fn, 0) + cost
                continue
            m = NAME.match(line.rstrip("\n"))
            if m and m.group(1) in ("ob", "cob", "fn", "cfn"):
                kind, key, text = m.groups()
                table = names["ob" if kind in ("ob", "cob") else "fn"]
                if text is not None:
                    table[key] = re.sub(r"'\d+$", "", text)  # callgrind's recursion depth: the same function
                text = table.get(key, "?")
                if kind == "ob":
                    ob = cob = text
                elif kind == "cob":
                    cob = text
                elif kind == "fn":
                    fn, cob = "%s:%s" % (ob, text), ob
                else:
                    cfn = "%s:%s" % (cob, text)
                continue
            if line.startswith("calls="):
                in_call = True
            elif line.startswith("summary:") or line.startswith("totals:"):
                total = int(line.split()[1])
    return self_cost, edges, total


def split(prof, which):
    """{part: instructions}: each function's own cost in its part, or in its callers' (see the
    module's doc); which: "nginx" or "redis" (RULES)"""
    self_cost, edges, _ = prof
    compiled = [(part, re.compile(rx)) for part, rx in RULES[which]]
    helper = re.compile(TRANSPARENT[which])
    callers = {}
    for (a, b), cost in edges.items():
        if a != b:
            callers.setdefault(b, []).append((a, cost))

    def part_of(f):
        for part, rx in compiled:
            if rx.search(f):
                return part
        return None

    shares = {}
    busy = set()  # on the current path up the callers: a cycle's edge is left out

    def share(f):
        """{part: fraction} of f's own cost"""
        if f in shares:
            return shares[f]
        p = None if helper.search(f) else part_of(f)
        if p is not None:
            shares[f] = {p: 1.0}
            return shares[f]
        busy.add(f)
        cs = [(a, c) for a, c in callers.get(f, []) if a not in busy]
        tot = sum(c for _, c in cs)
        if not cs or tot == 0:
            out = {p or "(no caller)": 1.0}
        else:
            out = {}
            for a, c in cs:
                for q, x in share(a).items():
                    out[q] = out.get(q, 0.0) + x * c / tot
        busy.discard(f)
        shares[f] = out
        return out

    parts = {}
    for f, cost in self_cost.items():
        for q, x in share(f).items():
            parts[q] = parts.get(q, 0.0) + cost * x
    return parts


def table(which, columns, unit="request", out=sys.stdout):
    """columns: [(name, dump, n)]: a Markdown table of each dump's parts per n, parts in the order
    of the rules, and each column's total"""
    got = [(name, split(parse(dump), which), n) for name, dump, n in columns]
    order = [part for part, _ in RULES[which]] + ["(no caller)"]
    print("| part | " + " | ".join("%s: Ir per %s" % (name, unit) for name, _, _ in got) + " |", file=out)
    print("| --- |" + " ---: |" * len(got), file=out)
    for part in order:
        if not any(parts.get(part, 0) / n >= 0.5 for _, parts, n in got):
            continue
        print("| %s | %s |" % (part, " | ".join("%.0f" % (parts.get(part, 0) / n) for _, parts, n in got)), file=out)
    print("| total | %s |" % " | ".join("%.0f" % (sum(parts.values()) / n) for _, parts, n in got), file=out)


def main():
    if len(sys.argv) < 3 or sys.argv[1] not in RULES:
        sys.exit("usage: callgrind_parts.py nginx|redis DUMP [N] | --table NAME=DUMP:N...")
    if sys.argv[2] == "--table":
        cols = []
        for a in sys.argv[3:]:
            name, _, rest = a.partition("=")
            dump, _, n = rest.rpartition(":")
            cols.append((name, dump, float(n)))
        table(sys.argv[1], cols, "request" if sys.argv[1] == "nginx" else "check")
        return
    prof = parse(sys.argv[2])
    n = float(sys.argv[3]) if len(sys.argv) > 3 else 1.0
    parts = split(prof, sys.argv[1])
    total = sum(parts.values())
    for part, cost in sorted(parts.items(), key=lambda x: -x[1]):
        print("%10.0f  %5.1f%%  %s" % (cost / n, 100 * cost / total if total else 0, part))
    print("%10.0f  100.0%%  total (summary %d)" % (total / n, prof[2] / n))


if __name__ == "__main__":
    main()
