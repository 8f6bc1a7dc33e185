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
