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
