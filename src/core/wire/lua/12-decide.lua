-- decide.cpp, and the Redis side of it: storage, groups, batches ------------------------------

-- After reset (us) the state is worth a fresh key's: the key expires then (rounded up to the
-- millisecond, plus one), so idle keys leave nothing behind.
local function ttl_ms(reset)
  local r = reset % 1000
  local ms = (reset - r) / 1000 + 1
  if r ~= 0 then ms = ms + 1 end
  return ms
end

-- A state GET returned that is not 24 bytes: a lease zone's (its shares follow, sync_command.h:
-- not seen here), or the earlier layout (or WRONGTYPE from HMGET on anything else).
local function odd_state(key, s)
  if #s == 96 then return string.sub(s, 1, 24) end
  local v = call('HMGET', key, 'a', 'b', 'c')
  return spack('<ddd', tonum(v[1]) or 0, tonum(v[2]) or 0, tonum(v[3]) or 0)
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

-- A check's record (redis_command.h) at byte p of the checks argument, or nothing if it is
-- malformed (kMaxConcurrency bounds a call's slots).
local function read_check(blob, p)
  local algo, req, per, burst, refill, tok, depth, wsc, cost, at, dl, mu, bl = sunpack('<ddddddddddddd', blob, p)
  if algo >= 0 and algo <= 6 and algo % 1 == 0 and req >= 1 and per >= 1 and burst >= 0 and refill >= 1
     and tok >= 1 and depth >= 1 and wsc >= 1 and cost >= -1 and dl >= -1 and mu >= -1
     and (algo < 6 or req <= 1000000) and bl >= 0 and bl % 1 == 0 then
    return algo, req, per, burst, refill, tok, depth, wsc, cost, at, dl, mu, bl
  end
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
      k = k + 1
      if not read_check(blob, p) then return k end
      p = p + 104
    end
  end
  return nil
end
