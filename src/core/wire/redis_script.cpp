// The Lua source, in pieces named after the src/core files they mirror, assembled two ways:
// as the EVAL script (its body runs on every call) and as a Redis Function library (its top
// level runs once, at FUNCTION LOAD; each FCALL runs only the registered function). Both
// carry the same local functions; the two test/production variants differ only in `clock`.
// Kept in C++ string literals because nginx's build compiles only .cpp files.
//
// Written for Redis's cost (measured with tests/bench/redis_lua.sh): no table per check
// (multiple return values instead); one struct.unpack of doubles per check instead of ten
// tonumber()s; in a batch, each state read once (GET) and written once (SET ... PX), and each
// concurrency key read once (ZCOUNT) and written once (ZREMRANGEBYSCORE, ZADD, PEXPIRE); `run`
// dispatches and reads the states itself, as each Lua call on a check's path costs a few
// percent of it. Under EVAL every local function is a new closure on every call (about 3 us
// of Redis's time per call for the 26 of them), which FCALL does not pay: FCALL is the way to
// call it where the server has Functions.
#include "core/wire/redis_script.h"

#include <cstddef>

#include "core/wire/sha1.h"

namespace rl {

namespace {

constexpr char kHead[] = R"lua(-- ngx_http_ratelimit_module: decides the limits of a batch of requests (groups, in order, each
-- all or nothing), or refunds a request's, atomically. Layout: src/core/wire/redis_command.h.
-- One section per file of src/core, the same functions with the same integer operations in
-- the same order. All values are integers below 2^52 held in doubles: +, - and * are exact,
-- and so is floor(a / b) for 0 <= a, 0 < b, a + b < 2^53 (the rounded quotient never reaches
-- the next integer). So is a % b (Lua: a - floor(a / b) * b, floored like window_start), and
-- then (a - a % b) / b is C++'s a / b: the hot paths write it so, as the VM computes it
-- without the cost of a call to math.floor. Never tostring a number beyond 14 digits (Lua 5.1
-- keeps 14): numbers go out through struct.pack or string.format('%d').
--
-- Algorithms: 0 gcra, 1 token, 2 leaky, 3 sliding, 4 fixed, 5 log, 6 concurrency. A check is a
-- record of 13 doubles (104 bytes, see redis_command.h); a hash algorithm's state is 3: a, b, c
-- of rl::State.
-- A decide_* function returns the decision (allowed, remaining, reset, retry) and then
-- whether admitting it changes the state (w) and to what (x, y, z); a bucket's delay is left
-- in `shaped`.

-- A library's top level sees only `redis`: each call binds the rest first.
local floor, fmt, sunpack, spack, call, pget, tonum, unpk
local function bind()
  floor, fmt, sunpack, spack = math.floor, string.format, struct.unpack, struct.pack
  call, pget, tonum, unpk = redis.call, redis.pcall, tonumber, unpack
end
)lua";

constexpr char kBucket[] = R"lua(
-- bucket.cpp ---------------------------------------------------------------------------------

local function bucket_drain(level, elapsed, refill)
  if elapsed <= 0 or level <= 0 then
    if level > 0 then return level end
    return 0
  end
  if elapsed > (level - level % refill) / refill then return 0 end  -- compare before multiplying
  return level - elapsed * refill
end

-- delay.cpp: the delay of the last bucket_decide (an upvalue, so that every decide_* keeps
-- its return values); dl = delay_level, mu = max_delay_units, -1 for none.
local shaped = 0

-- The decision, and the level after it.
local function bucket_decide(level, cost, burst, refill, tok, depth, dl, mu)
  local ok, retry, after = false, 0, level
  if cost == 0 then
    ok = true  -- only reports, even on a bucket left over-full by a clock that went back
  elseif cost > burst + 1 or (mu >= 0 and cost * tok - dl - mu > 0) then
    retry = -1  -- beyond the burst, or waits too long even on an empty bucket
  else
    -- Admitted once the level fits both the burst and max_delay: the later of the two.
    local need = level + cost * tok
    local over, late = need - depth, 0
    if mu >= 0 then late = need - dl - mu end
    if over <= 0 and late <= 0 then
      ok, after = true, need
      if dl >= 0 and after > dl then
        local x = after - dl
        local r = x % refill  -- ceil_div
        shaped = (x - r) / refill
        if r ~= 0 then shaped = shaped + 1 end
      end
    else
      if late > over then over = late end
      local r = over % refill  -- ceil_div
      retry = (over - r) / refill
      if r ~= 0 then retry = retry + 1 end
    end
  end
  local rem = 0
  if after < depth then
    local left = depth - after
    rem = (left - left % tok) / tok
  end
  local r = after % refill  -- ceil_div
  local reset = (after - r) / refill
  if r ~= 0 then reset = reset + 1 end
  return ok, rem, reset, retry, after
end
)lua";

constexpr char kGcra[] = R"lua(
-- gcra.cpp: a = TAT in whole microseconds, b = its remainder in 1/refill microseconds ---------

local function decide_gcra(a, b, now, cost, burst, refill, tok, depth, dl, mu)
  local ahead, level, beyond = a - now, 0, 0
  if ahead >= 0 then
    -- A TAT far ahead only happens when the clock went back: cap the product, and count the
    -- excess as extra waiting time.
    local horizon = (depth - depth % refill) / refill + 2
    if ahead > horizon then
      beyond = ahead - horizon
      ahead = horizon
    end
    level = ahead * refill + b
  end
  local ok, rem, reset, retry, after = bucket_decide(level, cost, burst, refill, tok, depth, dl, mu)
  reset = reset + beyond
  if not ok and retry ~= -1 then retry = retry + beyond end
  if after == level then return ok, rem, reset, retry, false end
  local r = after % refill
  return ok, rem, reset, retry, true, now + (after - r) / refill, r, 0
end
)lua";

constexpr char kToken[] = R"lua(
-- token_bucket.cpp: a = tokens in scaled units, b = last refill, c = 1 once seen (else full) --

local function decide_token(a, b, c, now, cost, burst, refill, tok, depth, dl, mu)
  local level = 0
  if c ~= 0 then
    local tokens = a
    if tokens > depth then tokens = depth end
    level = bucket_drain(depth - tokens, now - b, refill)
  end
  local ok, rem, reset, retry, after = bucket_decide(level, cost, burst, refill, tok, depth, dl, mu)
  if after == level and c ~= 0 then return ok, rem, reset, retry, false end
  local last = now
  if c ~= 0 and b > now then last = b end  -- never move the refill time back
  return ok, rem, reset, retry, true, depth - after, last, 1
end
)lua";

constexpr char kLeaky[] = R"lua(
-- leaky_bucket.cpp: a = level in scaled units, b = last leak ---------------------------------

local function decide_leaky(a, b, now, cost, burst, refill, tok, depth, dl, mu)
  local level = bucket_drain(a, now - b, refill)
  local ok, rem, reset, retry, after = bucket_decide(level, cost, burst, refill, tok, depth, dl, mu)
  if after == level then return ok, rem, reset, retry, false end
  local last = now
  if b > now then last = b end  -- never move the leak time back
  return ok, rem, reset, retry, true, after, last, 0
end
)lua";

constexpr char kFixed[] = R"lua(
-- fixed_window.cpp: a = window start, b = count, c = time of the last counted admission -------

-- cs, ce, cn: a calendar window [cs, ce) holding now and the next one's end (calendar.h), or
-- nil: windows aligned to per.
local function decide_fixed(a, b, c, now, cost, req, per, cs, ce, cn)
  local start
  if cs then start = cs else start = now - now % per end  -- window_start
  local last = a
  if c > a then last = c end
  local count, till = 0, now
  if start <= last then
    -- The same window, or the clock went back: keep counting until the last one's window passed.
    count = b
    if count > req then count = req end
    if last > now then till = last end
  end
  local fresh_in
  if not cs then
    fresh_in = till - till % per + per - now
  elseif till < ce then  -- calendar_end
    fresh_in = ce - now
  elseif till < cn then
    fresh_in = cn - now
  else
    fresh_in = till + 1 + (cn - ce) - now
  end
  local ok, retry = false, 0
  if cost > req then
    retry = -1
  elseif count + cost <= req then
    ok = true
  else
    retry = fresh_in  -- the next window is fresh
  end
  local after, reset = count, 0
  if ok then after = count + cost end
  if after > 0 then reset = fresh_in end
  if ok and cost > 0 then return ok, req - after, reset, retry, true, start, after, till end
  return ok, req - after, reset, retry, false
end
)lua";

constexpr char kSliding[] = R"lua(
-- sliding_window.cpp: a = last admission counted, b = previous window's count, c = a's window's

-- floor((per - elapsed) * wsc / per): the previous window's weight, in 1/wsc (per: this
-- window's length).
local function weight_at(per, wsc, elapsed)
  local left = per - elapsed
  if wsc == per then return left end
  left = left * wsc
  return (left - left % per) / per
end

-- The first elapsed time in [from, per) at which prev * weight + (cur + cost) * wsc fits
-- req * wsc, or -1 if none does in this window.
local function first_fit(req, per, wsc, prev, cur, cost, from)
  local room = (req - cur - cost) * wsc  -- what prev * weight may use
  if room < 0 then return -1 end
  if prev == 0 then return from end
  local wmax = floor(room / prev)  -- the largest weight that fits
  if wmax >= wsc then return from end
  local at
  if wsc == per then
    at = per - wmax
  else
    local m = (wmax + 1) * per
    local d = floor(m / wsc)  -- ceil_div
    if m - d * wsc ~= 0 then d = d + 1 end
    at = per - d + 1
  end
  if at < from then at = from end
  if at < per then return at end
  return -1
end

-- cp, cs, ce, cn: calendar windows [cp, cs), [cs, ce) holding now, [ce, cn) (calendar.h), or
-- nil: windows aligned to per.
local function decide_sliding(a, b, c, now, cost, req, per, wsc, cp, cs, ce, cn)
  local following, start = per, 0
  if cs then
    per, following, start = ce - cs, cn - ce, cs
  else
    start = now - now % per  -- window_start
  end
  local prev, cur, back = b, c, 0
  if prev > req then prev = req end
  if cur > req then cur = req end
  local stored = 0
  if not cs then stored = a - a % per end  -- a's window
  local last = 0
  if cs then
    if a >= cs then
      last = a  -- this window or a later one (the clock went back): counted as this one's
    elseif a >= cp then
      prev, cur = cur, 0
    else
      prev, cur = 0, 0
    end
  elseif start <= stored then
    -- The same window, or the clock went back: count from the stored window's start.
    if now < stored then
      back = stored - now
      now = stored
    end
    start = stored
    last = a
  elseif start == stored + per then
    prev, cur = cur, 0
  else
    prev, cur = 0, 0
  end
  local elapsed = now - start
  local weighted = prev * weight_at(per, wsc, elapsed)
  local ok, retry = false, 0
  if cost == 0 then
    ok = true
  elseif cost > req then
    retry = -1
  elseif weighted + (cur + cost) * wsc <= req * wsc then
    ok = true
  else
    local at = first_fit(req, per, wsc, prev, cur, cost, elapsed)
    if at >= 0 then
      retry = at - elapsed
    else
      at = first_fit(req, following, wsc, cur, 0, cost, 0)  -- the next window: cur becomes prev
      if at >= 0 then retry = per - elapsed + at else retry = per - elapsed + following end
    end
  end
  local after, rem, reset = cur, 0, 0
  if ok then after = cur + cost end
  local left = req * wsc - weighted - after * wsc
  if left > 0 then rem = (left - left % wsc) / wsc end
  if after > 0 then
    reset = per - elapsed + following
  elseif prev > 0 then
    reset = per - elapsed
  end
  if reset > 0 then reset = reset + back end
  if not ok and retry ~= -1 then retry = retry + back end
  if last < now then last = now end
  if ok and cost > 0 then return ok, rem, reset, retry, true, last, prev, after end
  return ok, rem, reset, retry, false
end
)lua";

constexpr char kLog[] = R"lua(
-- sliding_log.cpp: the key is a list of the ring's live entries, oldest first; list index
-- `first` plays the ring's head, the last entry is the newest time (the state's c) ------------

-- Returns w, x = the first live index, y = the stamp of what it admits.
local function decide_log(key, now, cost, req, per)
  local len = call('LLEN', key)
  local first = 0
  if len > req then first = len - req end  -- after a policy change, the newest req count
  local count = len - first
  -- The C++ walks past expired entries from the head. Entries are sorted, so the expired ones
  -- are a prefix: bisect for its end instead of reading them all.
  if count > 0 and now - tonum(call('LINDEX', key, first)) >= per then
    local lo, hi = first + 1, len  -- before lo: expired; hi: live, or the end
    while lo < hi do
      local mid = floor((lo + hi) / 2)
      if now - tonum(call('LINDEX', key, mid)) >= per then lo = mid + 1 else hi = mid end
    end
    count = count - (lo - first)
    first = lo
  end
  local newest = 0
  if count > 0 then newest = tonum(call('LINDEX', key, -1)) end
  -- Time only moves forward in the log: a clock that went back records at the newest time.
  local stamp = now
  if count > 0 and newest > now then stamp = newest end
  local ok, retry = false, 0
  if cost == 0 then
    ok = true
  elseif cost > req then
    retry = -1
  elseif count + cost <= req then
    ok = true
  else
    -- The oldest (count + cost - req) entries must expire first.
    retry = tonum(call('LINDEX', key, first + count + cost - req - 1)) + per - now
  end
  local after, reset = count, 0
  if ok then after = count + cost end
  if ok and cost > 0 then newest = stamp end
  if after > 0 then reset = newest + per - now end
  return ok, req - after, reset, retry, first > 0 or (ok and cost > 0), first, stamp
end

-- Drops what expired (the entries before `first`) and appends `cost` entries of `stamp`.
local function commit_log(key, first, stamp, cost, ttl)
  if first > 0 then call('LTRIM', key, first, -1) end
  stamp = fmt('%d', stamp)
  if cost == 1 then
    call('RPUSH', key, stamp)
  elseif cost > 1 then
    local args, left = {}, cost
    while left > 0 do
      local m = left
      if m > 1000 then m = 1000 end  -- unpack has a stack limit
      for e = 1, m do args[e] = stamp end
      for e = m + 1, #args do args[e] = nil end
      call('RPUSH', key, unpk(args))
      left = left - m
    end
  end
  if ttl then call('PEXPIRE', key, fmt('%d', ttl)) end
end
)lua";

constexpr char kConcurrency[] = R"lua(
-- concurrency.cpp: the key is a sorted set of the slots taken, member "<owner>.<seq + i>" for
-- slot i of a check (owner and seq come in the record's burst and at), scored by its expiry ----

-- The slots taken: the members not expired (score > now). Only reads: an admission drops the
-- expired ones (commit), so a rejection or a bad record writes nothing.
local function taken_slots(key, now)
  return call('ZCOUNT', key, '(' .. fmt('%d', now), '+inf')
end

-- The decision on taking `cost` slots of the `taken` ones.
local function decide_concurrency(taken, cost, req)
  local ok, retry = false, 0
  if cost > req then
    retry = -1
  elseif cost == 0 or taken + cost <= req then
    ok = true
  else
    retry = 1000000  -- kConcurrencyRetryUs
  end
  local after, rem = taken, 0
  if ok then after = taken + cost end
  if after < req then rem = req - after end
  return ok, rem, 0, retry, ok and cost > 0
end

-- ZADD <score> <member> or ZREM <member> (score nil) of a check's n slots; what it returns.
local function slots(cmd, key, score, owner, seq, n)
  if n == 1 then
    if score then return call(cmd, key, score, fmt('%d.%d', owner, seq)) end
    return call(cmd, key, fmt('%d.%d', owner, seq))
  end
  local args, done, i = {}, 0, 0
  while i < n do
    local e = 0
    while i < n and e < 1000 do  -- unpack has a stack limit
      if score then
        e = e + 1
        args[e] = score
      end
      e = e + 1
      args[e] = fmt('%d.%d', owner, seq + i)
      i = i + 1
    end
    for x = e + 1, #args do args[x] = nil end
    done = done + call(cmd, key, unpk(args))
  end
  return done
end
)lua";

constexpr char kRefund[] = R"lua(
-- refund.cpp: a state after giving back `cost` units admitted at `at` (the same values when
-- nothing changes) -----------------------------------------------------------------------------

local function drop(v, n)
  if v > n then return v - n end
  return 0
end

local function refund_gcra(a, b, c, now, units, refill, depth)
  local ahead = a - now
  if ahead < 0 then return a, b, c end  -- the TAT has passed: the bucket is already empty
  local horizon, beyond = (depth - depth % refill) / refill + 2, 0
  if ahead > horizon then
    beyond = ahead - horizon
    ahead = horizon
  end
  local after = drop(ahead * refill + b, units)
  local r = after % refill
  return now + beyond + (after - r) / refill, r, c
end

local function refund_token(a, b, c, now, units, refill, depth)
  if c == 0 then return a, b, c end  -- a fresh key's bucket is full
  local tokens = a
  if tokens > depth then tokens = depth end
  local level = bucket_drain(depth - tokens, now - b, refill)
  local after = drop(level, units)
  if after == level then return a, b, c end  -- already full: keep the refill time
  if b < now then b = now end
  return depth - after, b, c
end

local function refund_leaky(a, b, c, now, units, refill)
  local level = bucket_drain(a, now - b, refill)
  local after = drop(level, units)
  if after == level then return a, b, c end
  if b < now then b = now end
  return after, b, c
end

-- The start of the window holding t: aligned, or the known calendar window's (-1 beyond them).
local function start_of(t, per, cp, cs, ce, cn)
  if not cs then return t - t % per end
  if t >= cs and t < ce then return cs end
  if t >= cp and t < cs then return cp end
  if t >= ce and t < cn then return ce end
  return -1
end

local function refund_fixed(a, b, c, at, cost, per, cp, cs, ce, cn)
  local w = start_of(at, per, cp, cs, ce, cn)
  if w >= 0 and w == a then b = drop(b, cost) end
  return a, b, c
end

local function refund_sliding(a, b, c, at, cost, per, cp, cs, ce, cn)
  local w = start_of(at, per, cp, cs, ce, cn)
  local stored = start_of(a, per, cp, cs, ce, cn)
  if w < 0 or stored < 0 then return a, b, c end
  local before = stored - per
  if cs then  -- calendar_before
    if stored == cs then before = cp elseif stored == ce then before = cs else before = -1 end
  end
  if w == stored then
    c = drop(c, cost)
  elseif w == before then
    b = drop(b, cost)
  end
  return a, b, c
end

local function refund(algo, a, b, c, now, at, cost, per, burst, refill, tok, depth, cp, cs, ce, cn)
  -- What a request of `cost` poured into a bucket; a bucket never held more than burst + 1.
  local units = cost
  if units > burst + 1 then units = burst + 1 end
  units = units * tok
  if algo == 0 then return refund_gcra(a, b, c, now, units, refill, depth) end
  if algo == 1 then return refund_token(a, b, c, now, units, refill, depth) end
  if algo == 2 then return refund_leaky(a, b, c, now, units, refill) end
  if algo == 3 then return refund_sliding(a, b, c, at, cost, per, cp, cs, ce, cn) end
  return refund_fixed(a, b, c, at, cost, per, cp, cs, ce, cn)
end

-- Removes up to `cost` entries equal to `at` (adjacent: entries are sorted); whether it did.
local function refund_log(key, at, cost)
  return call('LREM', key, -cost, fmt('%d', at)) > 0
end
)lua";

constexpr char kCallMemory[] = R"lua(
-- redis_command.h, sync_command.h: a call's id (ARGV[4]). A call sent again because its reply
-- was lost gets the reply it had, kept under "<KEYS[1]>:call:<id>" (KEYS[1]'s hash tag: its
-- slot), and changes nothing. recall: the marker (nil: no id) and, if the call ran, its reply.
local function recall(keys, id)
  if not id or #id == 0 or #keys == 0 then return nil end
  local marker = keys[1] .. ':call:' .. id
  local m = call('GET', marker)
  if not m then return marker end
  local again = {}
  for i = 1, #m / 8 do again[i] = sunpack('<d', m, 8 * i - 7) end
  return marker, again
end

-- kCallMemoryMs.
local function remember(marker, out)
  if marker then call('SET', marker, spack('<' .. string.rep('d', #out), unpk(out)), 'PX', '10000') end
end
)lua";

constexpr char kDecide[] = R"lua(
-- decide.cpp, and the Redis side of it: storage, groups, batches ------------------------------
-- (run dispatches and reads the states itself: a Lua call per check costs a few percent of it)

-- After reset (us) the state is worth a fresh key's: the key expires then (rounded up to the
-- millisecond, plus one), so idle keys leave nothing behind.
local function ttl_ms(reset)
  local r = reset % 1000
  local ms = (reset - r) / 1000 + 1
  if r ~= 0 then ms = ms + 1 end
  return ms
end

-- Admits one check: what its decide_* returned as w = true, x, y, z. A batch (S) keeps its hash
-- states, and the TTL of each from its last change, to write each key once, at the end; and so
-- its concurrency keys (Z: see run), whose count it keeps; a log is written at once, so that
-- the next groups read it. reset: when the key is worth a fresh one (for the concurrency, the
-- hold; x, y, z: score, owner, seq).
local function commit(S, TTL, Z, key, algo, cost, reset, x, y, z)
  if algo == 6 and Z then
    local e, score = Z[key], fmt('%d', x)
    local m = e[3]
    e[1], e[2] = e[1] + cost, ttl_ms(reset)
    for i = 0, cost - 1 do
      if m == 4000 then  -- unpack has a stack limit: the slots so far go now (any order will do)
        call('ZADD', key, unpk(e, 4, 3 + m))
        m = 0
      end
      e[m + 4], e[m + 5] = score, fmt('%d.%d', y, z + i)
      m = m + 2
    end
    e[3] = m
  elseif algo == 6 then
    call('ZREMRANGEBYSCORE', key, '-inf', fmt('%d', x - reset))  -- x - reset: now
    slots('ZADD', key, fmt('%d', x), y, z, cost)
    call('PEXPIRE', key, fmt('%d', ttl_ms(reset)))
  elseif algo == 5 then
    local ttl
    if reset > 0 then ttl = ttl_ms(reset) end
    commit_log(key, x, y, cost, ttl)
  elseif S then
    S[key], TTL[key] = spack('<ddd', x, y, z), ttl_ms(reset)
  else
    call('SET', key, spack('<ddd', x, y, z), 'PX', fmt('%d', ttl_ms(reset)))  -- a string: Redis formats numbers slowly
  end
end

-- The numbers of groups and of checks in the checks argument, or nil if it is malformed.
local function shape(blob)
  local size, p, nchecks, ngroups = #blob, 1, 0, 0
  while p <= size do
    local n = -1
    if p + 7 <= size then n = sunpack('<d', blob, p) end
    if not (n >= 0 and n == floor(n) and p + 7 + n * 104 <= size) then return nil end
    p = p + 8 + n * 104
    nchecks = nchecks + n
    ngroups = ngroups + 1
  end
  return ngroups, nchecks
end

-- Each record is checked before its group decides: a bad one fails the call, and a single
-- group then has written nothing. A batch writes its hash states and its concurrency keys at
-- the end, but a log as soon as its group is admitted, and a concurrency key's slots beyond
-- 2000 or a refund's at once: a batch with either (or a bad algorithm) checks all its records
-- first, so that it never stops halfway. The number of its first bad check, if any.
local function first_bad(blob)
  local size, p, full = #blob, 1, false
  while p <= size and not full do
    local n = sunpack('<d', blob, p)
    p = p + 8
    for _ = 1, n do
      local algo = sunpack('<d', blob, p)
      if not (algo >= 0 and algo < 5) then full = true end
      p = p + 104
    end
  end
  local k = 0
  p = 1
  while full and p <= size do
    local n = sunpack('<d', blob, p)
    p = p + 8
    for _ = 1, n do
      local algo, req, per, burst, refill, tok, depth, wsc, cost, _, dl, mu, bl = sunpack('<ddddddddddddd', blob, p)
      k = k + 1
      if not (algo >= 0 and algo <= 6 and algo % 1 == 0 and req >= 1 and per >= 1 and burst >= 0 and refill >= 1
              and tok >= 1 and depth >= 1 and wsc >= 1 and cost >= -1 and dl >= -1 and mu >= -1
              and (algo < 6 or req <= 1000000) and bl >= 0 and bl % 1 == 0) then
        return k
      end
      p = p + 104
    end
  end
  return nil
end

-- The call (KEYS and ARGV of redis_command.h).
local function run(keys, argv)
  bind()
  local mode, blob = argv[1], argv[3]
  local refunding, charging = mode == 'refund', mode == 'charge'
  -- ARGV[4]: a charge's or a refund's call id.
  if (mode ~= 'decide' and not refunding and not charging) or (#argv ~= 3 and (#argv ~= 4 or mode == 'decide')) then
    if mode == 'sync' or mode == 'hosts' then
      -- Sync zones: a function literal (below), so that only such a call builds its closures.
      return ()lua";

// The rest of run, after the sync modes' function literal.
constexpr char kDecideAfterSync[] = R"lua()(keys, argv)
    end
    return redis.error_reply('ERR ratelimit script: bad arguments')
  end
  local ngroups, nkeys = shape(blob)
  if not ngroups or nkeys ~= #keys then return redis.error_reply('ERR ratelimit script: bad arguments') end
  if ngroups > 1 then
    local bad = first_bad(blob)
    if bad then return redis.error_reply('ERR ratelimit script: bad check ' .. bad) end
  end
  local now = clock(argv)
  if not now then return redis.error_reply('ERR ratelimit script: bad time') end
  local marker
  if argv[4] then
    local again
    marker, again = recall(keys, argv[4])
    if again then return again end
  end

  -- A single group's keys are distinct: it reads and writes them directly. A batch's
  -- concurrency key is read once (ZCOUNT) and written once, at the end (ZREMRANGEBYSCORE, ZADD,
  -- PEXPIRE): Z[key] = {slots taken (those read and those admitted since), the TTL of the last
  -- admission (false: none), m, then m ZADD arguments not written yet}. Not in a refund, whose
  -- ZREMs change the count.
  local S, TTL, Z
  if ngroups > 1 then
    S, TTL = {}, {}
    if not refunding then Z = {} end
  end
  local T  -- a group of several checks: what admitting each one writes, until all have allowed
  local out
  if nkeys == 1 then out = {0, now, 0, 0, 0, 0} else out = {0, now} end  -- sized at once for the common call
  local size, p, k, o = #blob, 1, 0, 2
  while p <= size do
    local n = nkeys  -- one group: known already
    if ngroups > 1 then n = sunpack('<d', blob, p) end
    p = p + 8
    local all, pass = true, 1
    repeat
      for i = 1, n do
        local q, j = p + (i - 1) * 104, o + 4 * (i - 1)
        -- pass 2: the group was rejected; its checks that allowed report a cost-0 request.
        if pass == 1 or out[j + 1] == 1 then
          local algo, req, per, burst, refill, tok, depth, wsc, cost, at, dl, mu, bl =
            sunpack('<ddddddddddddd', blob, q)
          if not (algo >= 0 and algo <= 6 and algo % 1 == 0 and req >= 1 and per >= 1 and burst >= 0 and refill >= 1
                  and tok >= 1 and depth >= 1 and wsc >= 1 and cost >= -1 and dl >= -1 and mu >= -1
                  and (algo < 6 or req <= 1000000) and bl >= 0 and bl % 1 == 0) then  -- kMaxConcurrency: bounds a call's slots
            return redis.error_reply('ERR ratelimit script: bad check ' .. (k + i))
          end
          local key = keys[k + i]
          -- A refund or a charge for an admission made before the key's reset (the API's DELETE,
          -- which keeps its time under "<prefix>{<zone>:<hash>}:reset"; bl: the admission's time)
          -- is the key's old life's: it changes nothing and reports as a cost-0 check. (In-flight
          -- slots need no such check: their members are the request's own.)
          local gone = false
          if (refunding or charging) and bl > 0 and algo < 6 then
            local base = key:match('^(.*}:)')
            local r = base and tonum(pget('GET', base .. 'reset') or '')
            gone = r ~= nil and r >= bl
          end
          local units, refund_it = cost, refunding and cost > 0 and not gone  -- refund: then whether it changed anything
          if pass == 2 or refunding or gone then cost = 0 end
          -- settle.h: kNeedOne (-1) is the verdict of one unit and the report of none; a charge
          -- takes what fits if not all of it does.
          local need, fitted = cost < 0, false
          if need then cost, units = 1, 0 end
          local ok, rem, reset, retry, w, x, y, z
          shaped = 0
          -- block.h: a live block rejects the check and changes nothing; pass 1 only.
          local bkey, code
          if bl > 0 and pass == 1 and not refunding and not charging then
            bkey = key .. ':block'
            local untl = tonum(call('GET', bkey) or '')
            if untl and untl > now then ok, rem, reset, retry, code = false, 0, untl - now, untl - now, 2 end
          end
          if code then
            w = false
          elseif algo < 5 then
            -- The state: 24 bytes, no key (a fresh state), or a hash {a, b, c} of the earlier
            -- layout. A batch keeps the states it read or changed in S (false: no key).
            local s
            if S then s = S[key] end
            if s == nil then
              s = pget('GET', key)
              if s and #s == 96 then
                s = string.sub(s, 1, 24)  -- a lease zone's shares follow (sync_command.h): not seen here
              elseif s and #s ~= 24 then
                -- The earlier layout (or WRONGTYPE from HMGET on anything else).
                local v = call('HMGET', key, 'a', 'b', 'c')
                s = spack('<ddd', tonum(v[1]) or 0, tonum(v[2]) or 0, tonum(v[3]) or 0)
              end
              if S then S[key] = s end
            end
            local a, b, c = 0, 0, 0
            if s then a, b, c = sunpack('<ddd', s) end
            -- A calendar window (calendar.h): burst 1, refill, tok, depth, dl = its bounds.
            local cp, cs, ce, cn
            if algo >= 3 and burst == 1 then cp, cs, ce, cn = refill, tok, depth, dl end
            if refund_it then
              local ra, rb, rc = refund(algo, a, b, c, now, at, units, per, burst, refill, tok, depth, cp, cs, ce, cn)
              refund_it = ra ~= a or rb ~= b or rc ~= c
              a, b, c = ra, rb, rc
            end
            -- A charge's token bucket is read under the debt policy (settle.h: debt_shift, in `at`).
            local shift = 0
            if charging and algo == 1 then shift = at end
            if c ~= 0 then a = a + shift end
            repeat
            local again = false
            if algo == 0 then  -- decide.cpp
              ok, rem, reset, retry, w, x, y, z = decide_gcra(a, b, now, cost, burst, refill, tok, depth, dl, mu)
            elseif algo == 1 then
              ok, rem, reset, retry, w, x, y, z = decide_token(a, b, c, now, cost, burst, refill, tok, depth, dl, mu)
            elseif algo == 2 then
              ok, rem, reset, retry, w, x, y, z = decide_leaky(a, b, now, cost, burst, refill, tok, depth, dl, mu)
            else
              if cs and not (now >= cs and now < ce) then  -- calendar_shift: Redis's clock decides
                if now >= ce and now < cn then
                  cp, cs, ce, cn = cs, ce, cn, cn + (cn - ce)
                elseif now >= cp and now < cs then
                  cp, cs, ce, cn = cp - (cs - cp), cp, cs, ce
                else
                  cs = false  -- more than a window away from nginx's clock: rejected, never
                end
              end
              if cs == false then
                ok, rem, reset, retry, w = false, 0, 0, -1, false
              elseif algo == 3 then
                ok, rem, reset, retry, w, x, y, z = decide_sliding(a, b, c, now, cost, req, per, wsc, cp, cs, ce, cn)
              else
                ok, rem, reset, retry, w, x, y, z = decide_fixed(a, b, c, now, cost, req, per, cs, ce, cn)
              end
            end
            if need and ok then
              need, cost, again, shaped = false, 0, true, 0
            elseif charging and not fitted and not ok and rem > 0 and rem < cost then
              cost, units, again, fitted = rem, rem, true, true  -- once, as settle.cpp
            end
            until not again
            if c ~= 0 then a = a - shift end
            if w then x = x - shift end
            if w and x == a and y == b and z == c then w = false end
            -- A refund that changed the state keeps it, with the TTL of the cost-0 decision on it.
            if refund_it then commit(S, TTL, Z, key, algo, 0, reset, a, b, c) end
          elseif algo == 5 then
            if refund_it then refund_it = refund_log(key, at, units) end
            repeat
            local again = false
            ok, rem, reset, retry, w, x, y = decide_log(key, now, cost, req, per)
            if need and ok then
              need, cost, again, shaped = false, 0, true, 0
            elseif charging and not fitted and not ok and rem > 0 and rem < cost then
              cost, units, again, fitted = rem, rem, true, true  -- once, as settle.cpp
            end
            until not again
            if refund_it then call('PEXPIRE', key, fmt('%d', ttl_ms(reset))) end
          else  -- a refund gives the slots back (what already expired is gone) and reports
            if refund_it then
              if units > 1000000 then units = 1000000 end  -- as the release writer
              slots('ZREM', key, nil, burst, at, units)
            end
            local taken
            if Z then
              local e = Z[key]
              if not e then
                e = {taken_slots(key, now), false, 0}
                Z[key] = e
              end
              taken = e[1]
            else
              taken = taken_slots(key, now)
            end
            ok, rem, reset, retry, w = decide_concurrency(taken, cost, req)
            if w then x, y, z = now + per, burst, at end
          end

          if gone then w = false end
          -- An allowed check's retry is 0: its slot carries the delay instead.
          if ok then retry = shaped end
          if not code then
            code = ok and 1 or 0
            if bkey and not ok then  -- rejected by itself: the block starts
              call('SET', bkey, fmt('%d', now + bl), 'PX', fmt('%d', ttl_ms(bl)))
              code = 3
            end
          end
          out[j + 1], out[j + 2], out[j + 3], out[j + 4] = code, rem, reset, retry
          if refunding then
            all = all and ok
          elseif pass == 1 then
            if not ok then
              all = false
            elseif n == 1 then
              if w then commit(S, TTL, Z, key, algo, units, algo == 6 and per or reset, x, y, z) end
            elseif all then
              if not T then T = {} end
              local t = 6 * (i - 1)
              T[t + 1], T[t + 2], T[t + 3], T[t + 4], T[t + 5], T[t + 6] = w, x, y, z, algo == 6 and per or reset, algo
            end
          end
        end
      end
      if pass == 1 and not all and n > 1 and not refunding then pass = 2 else pass = 0 end
    until pass == 0
    if all and n > 1 and not refunding then
      for i = 1, n do
        local t = 6 * (i - 1)
        if T[t + 1] then
          commit(S, TTL, Z, keys[k + i], T[t + 6], sunpack('<d', blob, p + (i - 1) * 104 + 64), T[t + 5], T[t + 2],
                 T[t + 3], T[t + 4])
        end
      end
    end
    if all then out[1] = out[1] + 1 end
    k = k + n
    o = o + 4 * n
    p = p + n * 104
  end
  if S then
    for key, ms in pairs(TTL) do call('SET', key, S[key], 'PX', fmt('%d', ms)) end
  end
  if Z then
    local t = fmt('%d', now)
    for key, e in pairs(Z) do
      if e[2] then
        call('ZREMRANGEBYSCORE', key, '-inf', t)
        if e[3] > 0 then call('ZADD', key, unpk(e, 4, 3 + e[3])) end
        call('PEXPIRE', key, fmt('%d', e[2]))
      end
    end
  end
  if marker then remember(marker, out) end
  return out
end
)lua";

constexpr char kSync[] = R"lua(
-- sync.cpp and sync_command.h: the calls of sync zones. Per item: give_back, apply_delta of
-- the delta clamped to Redis's clock, grant, then one write.
function(keys, argv)
  local now = clock(argv)
  if not now then return redis.error_reply('ERR ratelimit script: bad time') end
  if argv[1] == 'hosts' then
    local window = tonum(argv[3])
    if #keys ~= 1 or #argv ~= 4 or not window or window < 1 then
      return redis.error_reply('ERR ratelimit script: bad arguments')
    end
    call('ZADD', keys[1], fmt('%d', now), argv[4])
    call('ZREMRANGEBYSCORE', keys[1], '-inf', '(' .. fmt('%d', now - window))
    call('PEXPIRE', keys[1], fmt('%d', ttl_ms(2 * window)))
    return call('ZCARD', keys[1])
  end
  local blob = argv[3]
  if (#argv ~= 3 and #argv ~= 4) or #blob ~= 224 * #keys then
    return redis.error_reply('ERR ratelimit script: bad arguments')
  end
  -- A call id (ARGV[4], kCallMemory): a call sent again because its reply was lost is applied once.
  local marker, again = recall(keys, argv[4])
  if again then return again end

  local MAXD = 562949953421312  -- kMaxDebt = 2^49
  local function min(x, y)
    if x < y then return x end
    return y
  end
  local function cap(v)
    if v < 0 then return 0 end
    return min(v, MAXD)
  end

  -- A bucket's level at t (scaled, at most MAXD), however far over full.
  local function level_at(algo, a, b, c, t, refill, depth)
    if algo == 0 then
      local ahead = a - t
      if ahead < 0 then return 0 end
      if ahead > (MAXD - MAXD % refill) / refill then return MAXD end
      return min(ahead * refill + b, MAXD)
    end
    local level = a
    if algo == 1 then
      if c == 0 then return 0 end  -- a fresh key's bucket is full
      local tokens = a
      if tokens > depth then tokens = depth end
      level = depth - tokens
    end
    return bucket_drain(min(level, MAXD), t - b, refill)
  end

  local function with_level(algo, a, b, c, t, level, refill, depth)
    if algo == 0 then
      local r = level % refill
      return t + (level - r) / refill, r, c
    end
    if algo == 1 then
      if not (c ~= 0 and b > t) then b = t end
      return depth - level, b, 1
    end
    if b < t then b = t end
    return level, b, c
  end

  -- level + units * tok (units < 0: minus, never below empty), at most MAXD.
  local function pour(level, units, tok)
    if units >= 0 then
      local room = MAXD - level
      if units > (room - room % tok) / tok then return MAXD end
      return level + units * tok
    end
    if -units > (level - level % tok) / tok then return 0 end
    return level + units * tok
  end

  local function apply_delta(algo, a, b, c, now, units, dprev, dat, per, refill, tok, depth)
    if units == 0 and dprev == 0 then return a, b, c end
    if algo <= 2 then
      if units == 0 then return a, b, c end
      local t = min(dat, now)  -- poured at the last admission (never in the future)
      local level = level_at(algo, a, b, c, t, refill, depth)
      local after = pour(level, units, tok)
      if after == level then return a, b, c end
      return with_level(algo, a, b, c, t, after, refill, depth)
    end
    -- Windows: the newest window and the one before it, counts added per window.
    local scur, sprev = b, 0
    if algo == 3 then scur, sprev, a = c, b, a - a % per end  -- a sliding state's a: a time in its window
    local at = a
    if dat > at then at = dat end
    local cur, prev = 0, 0
    if a == at then
      cur, prev = scur, sprev
    elseif a == at - per then
      prev = scur
    end
    if dat == at then
      cur, prev = cur + units, prev + dprev
    elseif dat == at - per then
      prev = prev + units
    end
    if algo == 3 then return at, cap(prev), cap(cur) end
    return at, cap(cur), 0
  end

  local function give_back(algo, a, b, c, now, units, at, top, per, refill, tok, depth)
    if units <= 0 then return a, b, c end
    if algo == 3 then return refund_sliding(a, b, c, at, units, per) end
    if algo == 4 then return refund_fixed(a, b, c, at, units, per) end
    local level = level_at(algo, a, b, c, now, refill, depth)
    local mine = bucket_drain(top, now - at, refill)
    if level > mine then return a, b, c end  -- granted above them since: they drain instead
    local after = pour(level, -min(units, (mine - mine % tok) / tok), tok)
    if after == level then return a, b, c end
    return with_level(algo, a, b, c, now, after, refill, depth)
  end

  -- share.cpp: bucket leases as shares of the rate and of the burst. A book (after the state,
  -- 9 doubles): epoch_at, epoch_us, rate0, rate1, burst0, burst1, demand0, demand1, settled_at.
  local PARTS, DMAX = 65536, 16777216
  local function clamp(v, lo, hi)
    if v < lo then return lo end
    if v > hi then return hi end
    return v
  end
  local function ceil_div(x, y)
    local r = x % y
    return (x - r) / y + (r ~= 0 and 1 or 0)
  end
  -- The pool drains at the rate not shared (rounded down); dt is at most an epoch.
  local function drain_shared(level, dt, refill, shared)
    if dt <= 0 then return level end
    local m = dt * refill * (PARTS - clamp(shared, 0, PARTS))
    local drained = (m - m % PARTS) / PARTS
    if level > drained then return level - drained end
    return 0
  end

  -- The shares' way of one bucket item at t: settle, give back, pour the delta, grant.
  local function max_of(x, y)
    if x > y then return x end
    return y
  end

  local function share_key(algo, a, b, c, bk, t, burst, refill, tok, depth, units, want, need, hosts, sh)
    local ep, dem, wr0, wr1, wb0, wb1, bat, br0, br1, bb0, bb1 = unpk(sh)
    if bk[1] ~= 0 then
      local level = level_at(algo, a, b, c, bk[9], refill, depth)
      local u = bk[9]
      for k = 0, 1 do
        if u < t then
          local e = bk[1] + (k + 1) * bk[2]
          if u < e then
            local til = min(t, e)
            level = drain_shared(level, til - u, refill, bk[3 + k])
            if level < bk[5 + k] * tok then level = bk[5 + k] * tok end
            u = til
          end
        end
      end
      if u < t then level = bucket_drain(level, t - u, refill) end
      local w = t - t % bk[2]
      if w >= bk[1] + 2 * bk[2] then
        bk = {0, 0, 0, 0, 0, 0, 0, 0, 0}
      elseif w == bk[1] + bk[2] then
        bk = {w, bk[2], bk[4], 0, bk[6], 0, bk[8], 0, bk[9]}
      end
      if bk[3] == 0 and bk[4] == 0 and bk[5] == 0 and bk[6] == 0 and bk[7] == 0 and bk[8] == 0 then
        bk = {0, 0, 0, 0, 0, 0, 0, 0, 0}
      end
      if bk[1] ~= 0 then
        bk[9] = t
        if level < bk[5] * tok then level = bk[5] * tok end
      end
      a, b, c = with_level(algo, a, b, c, t, level, refill, depth)
    end
    if bk[1] ~= 0 and bat > 0 and ep == bk[2] then
      local brs, bbs = {br0, br1}, {bb0, bb1}
      for j = 0, 1 do
        local e, k = bat + j * bk[2], -1
        if e == bk[1] then k = 0 elseif e == bk[1] + bk[2] then k = 1 end
        if k >= 0 then
          bk[3 + k] = bk[3 + k] - clamp(brs[j + 1], 0, bk[3 + k])
          bk[5 + k] = bk[5 + k] - clamp(bbs[j + 1], 0, bk[5 + k])
        end
      end
    end
    if units ~= 0 then
      a, b, c = apply_delta(algo, a, b, c, t, units, 0, t, 1, refill, tok, depth)
      if bk[1] ~= 0 and level_at(algo, a, b, c, t, refill, depth) < bk[5] * tok then
        a, b, c = with_level(algo, a, b, c, t, bk[5] * tok, refill, depth)
      end
    end
    local granted, g = 0, {0, 0, 0, 0, 0}
    local X = 68719476736  -- 2^36: refill * epoch below it (share_fits)
    if ep > 0 and refill <= (X - X % ep) / ep then
      if bk[1] == 0 then bk = {t - t % ep, ep, 0, 0, 0, 0, 0, 0, t} end
      if bk[2] == ep then
        g[1] = bk[1]
        local cap = burst + 1
        local level = level_at(algo, a, b, c, t, refill, depth)
        if need > 0 and level < depth then
          local room = depth - level
          granted = min(min(need, cap), (room - room % tok) / tok)
          level = level + granted * tok
        end
        local d = clamp(dem, 0, DMAX)
        local wr, wb, asked = {wr0, wr1}, {wb0, wb1}, {}
        for k = 1, 2 do asked[k] = wr[k] > 0 or wb[k] > 0 end
        if asked[2] and need == 0 then bk[8] = min(bk[8] + d, 4503599627370496) end
        local total = bk[7]
        if bk[8] > total then total = bk[8] end
        if d > total then total = d end
        if total < 1 then total = 1 end
        if bk[7] == 0 then total = max_of(total, min(d * clamp(hosts, 1, 1048576), 4503599627370496)) end
        local part = ceil_div(PARTS * d, total)
        local rate_cap = part
        if 2 * PARTS >= 3 * total then rate_cap = PARTS end
        local bcap = (cap - cap % PARTS) / PARTS * part + ceil_div((cap % PARTS) * part, PARTS)
        for k = 1, 2 do
          if asked[k] then
            local q = min(min(clamp(wr[k], 0, PARTS), PARTS - bk[2 + k]), rate_cap)
            local n = min(min(clamp(wb[k], 0, cap), cap - bk[4 + k]), bcap)
            if q < 0 then q = 0 end
            local r = bk[2 + k] + q
            n = min(n, (cap - cap % PARTS) / PARTS * r + ceil_div((cap % PARTS) * r, PARTS) - bk[4 + k])
            if n < 0 then n = 0 end
            bk[2 + k], bk[4 + k] = bk[2 + k] + q, bk[4 + k] + n
            g[1 + k], g[3 + k] = q, n
          end
        end
        if want > 0 and g[4] > 0 and granted == need and level < depth then
          local room = depth - level
          local moved = min(min(want, g[4]), (room - room % tok) / tok)
          level = level + moved * tok
          granted = granted + moved
        end
        if level < bk[5] * tok then level = bk[5] * tok end
        a, b, c = with_level(algo, a, b, c, t, level, refill, depth)
      end
    end
    return a, b, c, bk, granted, g
  end

  -- Unshaped (-1: no delay_level, no max_delay), as grant() decides.
  local function decide_any(algo, a, b, c, cost, req, per, burst, refill, tok, depth, wsc)
    if algo == 0 then return decide_gcra(a, b, now, cost, burst, refill, tok, depth, -1, -1) end
    if algo == 1 then return decide_token(a, b, c, now, cost, burst, refill, tok, depth, -1, -1) end
    if algo == 2 then return decide_leaky(a, b, now, cost, burst, refill, tok, depth, -1, -1) end
    if algo == 3 then return decide_sliding(a, b, c, now, cost, req, per, wsc) end
    return decide_fixed(a, b, c, now, cost, req, per)
  end

  local out = {now}
  for i = 1, #keys do
    local o = 1 + (i - 1) * 224
    local algo, req, per, burst, refill, tok, depth, wsc, units, dprev, dat, want, need, hosts, back, back_at,
          back_top = sunpack('<ddddddddddddddddd', blob, o)
    local sh = {sunpack('<ddddddddddd', blob, o + 136)}
    if not (algo >= 0 and algo <= 4 and algo % 1 == 0 and req >= 1 and per >= 1 and burst >= 0 and refill >= 1
            and tok >= 1 and depth >= 1 and wsc >= 1 and want >= 0 and need >= 0 and hosts >= 1 and back >= 0) then
      return redis.error_reply('ERR ratelimit script: bad item ' .. i)
    end
    local key = keys[i]
    local s, a, b, c = pget('GET', key), 0, 0, 0
    local bk
    if s and (#s == 24 or #s == 96) then
      a, b, c = sunpack('<ddd', s)
      if #s == 96 then bk = {sunpack('<ddddddddd', s, 25)} end
    elseif s then  -- the earlier layout (a hash), or WRONGTYPE from HMGET on anything else
      local v = call('HMGET', key, 'a', 'b', 'c')
      a, b, c = tonum(v[1]) or 0, tonum(v[2]) or 0, tonum(v[3]) or 0
    end
    local a0, b0, c0 = a, b, c
    local o = #out
    if algo <= 2 and (bk or sh[1] > 0) then
      -- shares (share.cpp): the book's clock never goes back
      if not bk then bk = {0, 0, 0, 0, 0, 0, 0, 0, 0} end
      local t = now
      if bk[1] ~= 0 and bk[9] > t then t = bk[9] end
      local granted, g
      a, b, c, bk, granted, g = share_key(algo, a, b, c, bk, t, burst, refill, tok, depth, units - back, want, need, hosts, sh)
      local ok, rem, reset, retry = decide_any(algo, a, b, c, 0, req, per, burst, refill, tok, depth, wsc)
      retry = 0
      if need > 0 and granted == 0 then
        ok, rem, reset, retry = decide_any(algo, a, b, c, need, req, per, burst, refill, tok, depth, wsc)
        ok, rem, reset = decide_any(algo, a, b, c, 0, req, per, burst, refill, tok, depth, wsc)
      end
      local v = spack('<ddd', a, b, c)
      if bk[1] ~= 0 then
        reset = reset + bk[1] + 2 * bk[2] - now
        v = v .. spack('<ddddddddd', bk[1], bk[2], bk[3], bk[4], bk[5], bk[6], bk[7], bk[8], bk[9])
      end
      call('SET', key, v, 'PX', fmt('%d', ttl_ms(reset)))
      out[o + 1], out[o + 2], out[o + 3], out[o + 4], out[o + 5] = a, b, c, granted, retry
      out[o + 6], out[o + 7], out[o + 8], out[o + 9], out[o + 10] = g[1], g[2], g[3], g[4], g[5]
    else
    a, b, c = give_back(algo, a, b, c, now, back, back_at, back_top, per, refill, tok, depth)
    -- clamp_delta: a delta's time within Redis's clock (no host's clock spoils the state).
    if algo <= 2 then
      if dat > now then dat = now end
      if dat < now - per then dat = now - per end
    elseif units ~= 0 or dprev ~= 0 then
      local w = now - now % per
      if dat > w then
        units, dprev, dat = units + dprev, 0, w
      elseif dat < w - per then
        units, dprev = 0, 0
      end
    end
    a, b, c = apply_delta(algo, a, b, c, now, units, dprev, dat, per, refill, tok, depth)
    -- grant: at most what remains, and a fair share of it, but `need` whenever it fits.
    local ok, rem, reset, retry, w, x, y, z = decide_any(algo, a, b, c, 0, req, per, burst, refill, tok, depth, wsc)
    local granted = 0
    if need > rem then
      ok, rem, reset, retry = decide_any(algo, a, b, c, need, req, per, burst, refill, tok, depth, wsc)
    else
      retry = 0
      if want < need then want = need end
      local share = rem % hosts  -- ceil_div
      share = (rem - share) / hosts + (share ~= 0 and 1 or 0)
      local n = min(min(want, rem), share)
      if n < need then n = need end
      if n > 0 then
        ok, rem, reset, retry, w, x, y, z = decide_any(algo, a, b, c, n, req, per, burst, refill, tok, depth, wsc)
        granted = n
        if w then a, b, c = x, y, z end
      end
    end
    if need == 0 or granted > 0 then retry = 0 end
    if a ~= a0 or b ~= b0 or c ~= c0 or (s and #s ~= 24) then
      call('SET', key, spack('<ddd', a, b, c), 'PX', fmt('%d', ttl_ms(reset)))
    end
    out[o + 1], out[o + 2], out[o + 3], out[o + 4], out[o + 5] = a, b, c, granted, retry
    out[o + 6], out[o + 7], out[o + 8], out[o + 9], out[o + 10] = 0, 0, 0, 0, 0
    end
  end
  remember(marker, out)
  return out
end)lua";

// The two variants: where `now` comes from.
constexpr char kClockFromArgv[] = R"lua(
-- Test variant: the caller's time.
local function clock(argv) return tonum(argv[2]) end
)lua";

constexpr char kClockFromRedis[] = R"lua(
-- Redis's clock, the same for every nginx host.
local function clock()
  local t = call('TIME')
  return tonum(t[1]) * 1000000 + tonum(t[2])
end
)lua";

// The EVAL script's last lines: its body is the call.
constexpr char kEvalCall[] = R"lua(
-- TIME is not deterministic: replicate the script's effects (the default since Redis 5, the
-- only mode since 7: then a no-op).
redis.replicate_commands()
return run(KEYS, ARGV)
)lua";

// The library: "#!lua name=<name>\n", the pieces, then the registration of <name>.
constexpr char kLibraryHead[] = "#!lua name=";
constexpr char kRegisterHead[] = "redis.register_function{function_name = '";
constexpr char kRegisterTail[] = "', callback = run}\n";

// Compile-time concatenation of string literals into one NUL-terminated array.
template <size_t N>
struct Text {
    char s[N];
};

template <size_t... Ns>
constexpr Text<(Ns + ...) - sizeof...(Ns) + 1> join(const char (&... parts)[Ns]) {
    Text<(Ns + ...) - sizeof...(Ns) + 1> t{};
    const char* ptrs[] = {parts...};
    const size_t lens[] = {(Ns - 1)...};
    size_t k = 0;
    for (size_t i = 0; i < sizeof...(Ns); i++) {
        for (size_t j = 0; j < lens[i]; j++) t.s[k++] = ptrs[i][j];
    }
    t.s[k] = '\0';
    return t;
}

// Everything but the clock, which each variant puts before `run`'s definition.
#define RL_LUA_BEFORE_CLOCK \
    kHead, kBucket, kGcra, kToken, kLeaky, kFixed, kSliding, kLog, kConcurrency, kRefund, kCallMemory
#define RL_LUA_AFTER_CLOCK kDecide, kSync, kDecideAfterSync

constexpr auto kProduction = join(RL_LUA_BEFORE_CLOCK, kClockFromRedis, RL_LUA_AFTER_CLOCK, kEvalCall);
constexpr auto kInjected = join(RL_LUA_BEFORE_CLOCK, kClockFromArgv, RL_LUA_AFTER_CLOCK, kEvalCall);
// A library's body and registration, without its name: what the name is a hash of.
constexpr auto kLibraryProduction = join(RL_LUA_BEFORE_CLOCK, kClockFromRedis, RL_LUA_AFTER_CLOCK, kRegisterTail);
constexpr auto kLibraryInjected = join(RL_LUA_BEFORE_CLOCK, kClockFromArgv, RL_LUA_AFTER_CLOCK, kRegisterTail);

#undef RL_LUA_BEFORE_CLOCK
#undef RL_LUA_AFTER_CLOCK

constexpr size_t kNamePrefixLen = sizeof(kFunctionNamePrefix) - 1;
static_assert(kNamePrefixLen + kFunctionHashLen == kFunctionNameLen, "function name layout");
static_assert(kFunctionHashLen <= kSha1HexLen, "the name's hash is a prefix of a SHA-1");

struct Sha1Text {
    char hex[kSha1HexLen + 1];
};

Sha1Text sha1_of(std::string_view text) {
    Sha1Text h;
    sha1_hex(text.data(), text.size(), h.hex);
    return h;
}

// A library's text: its head, body (the registration's tail included) and name, placed.
template <size_t N>
struct Library {
    char name[kFunctionNameLen + 1];
    char text[sizeof(kLibraryHead) - 1 + kFunctionNameLen + 1 + sizeof(kRegisterHead) - 1 + kFunctionNameLen + N];
    size_t len;
};

template <size_t N>
Library<N> library_of(const Text<N>& body) {
    Library<N> lib;
    const Sha1Text h = sha1_of(std::string_view(body.s, N - 1));
    size_t k = 0;
    for (size_t i = 0; i < kNamePrefixLen; i++) lib.name[k++] = kFunctionNamePrefix[i];
    for (size_t i = 0; i < kFunctionHashLen; i++) lib.name[k++] = h.hex[i];
    lib.name[k] = '\0';

    // The body ends with the registration's tail: the name and its head go just before it.
    const size_t tail = sizeof(kRegisterTail) - 1, before = N - 1 - tail;
    k = 0;
    auto put = [&lib, &k](const char* s, size_t n) {
        for (size_t i = 0; i < n; i++) lib.text[k++] = s[i];
    };
    put(kLibraryHead, sizeof(kLibraryHead) - 1);
    put(lib.name, kFunctionNameLen);
    put("\n", 1);
    put(body.s, before);
    put(kRegisterHead, sizeof(kRegisterHead) - 1);
    put(lib.name, kFunctionNameLen);
    put(body.s + before, tail);
    lib.text[k] = '\0';
    lib.len = k;
    return lib;
}

// Function statics, as for script_sha1 (one per variant).
const Library<sizeof(kLibraryInjected.s)>& injected_library() {
    static const Library<sizeof(kLibraryInjected.s)> lib = library_of(kLibraryInjected);
    return lib;
}

const Library<sizeof(kLibraryProduction.s)>& production_library() {
    static const Library<sizeof(kLibraryProduction.s)> lib = library_of(kLibraryProduction);
    return lib;
}

}  // namespace

std::string_view script_text(bool injected_time) noexcept {
    if (injected_time) return std::string_view(kInjected.s, sizeof(kInjected.s) - 1);
    return std::string_view(kProduction.s, sizeof(kProduction.s) - 1);
}

const char* script_sha1(bool injected_time) noexcept {
    // Function statics: computed once, on the first call, without the heap.
    if (injected_time) {
        static const Sha1Text injected = sha1_of(script_text(true));
        return injected.hex;
    }
    static const Sha1Text production = sha1_of(script_text(false));
    return production.hex;
}

std::string_view function_library_text(bool injected_time) noexcept {
    if (injected_time) return std::string_view(injected_library().text, injected_library().len);
    return std::string_view(production_library().text, production_library().len);
}

const char* function_name(bool injected_time) noexcept {
    return injected_time ? injected_library().name : production_library().name;
}

}  // namespace rl
