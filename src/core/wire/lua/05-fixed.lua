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
