-- leaky_bucket.cpp: a = level in scaled units, b = last leak ---------------------------------

local function decide_leaky(a, b, now, cost, burst, refill, tok, depth, dl, mu)
  local level = bucket_drain(a, now - b, refill)
  local ok, rem, reset, retry, after = bucket_decide(level, cost, burst, refill, tok, depth, dl, mu)
  if after == level then return ok, rem, reset, retry, false end
  local last = now
  if b > now then last = b end  -- never move the leak time back
  return ok, rem, reset, retry, true, after, last, 0
end
