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
