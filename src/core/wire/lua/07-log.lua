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
