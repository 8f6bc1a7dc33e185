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
