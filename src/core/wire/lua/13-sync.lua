-- sync.cpp and sync_command.h: the calls of sync zones. Per item: give_back, apply_delta of
-- the delta clamped to Redis's clock, grant, then one write.
-- sync_items(now) builds the general item code: its helpers are local to it, so that only a
-- call that runs it builds their closures (under EVAL, each local function of the top level is
-- a new closure on every call; a count call seldom needs them).
local function sync_items(now)
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
    elseif ep == 0 and need > 0 then
      -- A count ask (a cold key's requests): its need from the pool, as far as it holds it.
      local level = level_at(algo, a, b, c, t, refill, depth)
      if level < depth then
        local room = depth - level
        granted = min(min(need, burst + 1), (room - room % tok) / tok)
        if granted > 0 then a, b, c = with_level(algo, a, b, c, t, level + granted * tok, refill, depth) end
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

  -- The items of blob (224 bytes each, of keys[i]): each one's reply appended to out, its key
  -- written; an error reply on a bad item.
  return function(keys, blob, out)
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
  end
end

local function sync(keys, argv)
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
  local out = {now}
  local err = sync_items(now)(keys, blob, out)
  if err then return err end
  remember(marker, out)
  return out
end

-- sync_command.h's count form: every item a count ask (want = need, no delta, no give-back, no
-- share) of one gcra policy; ARGV[3] = the policy's 8 doubles once, then each item's need.
-- Decided inline as sync_items decides such an item (decide_gcra unshaped, of 0, then of the
-- need when it fits: bucket_decide's arithmetic, the grant's rules) on a value of 24 bytes or
-- none, without a Lua call per item; any other value (a book of shares, the earlier layout)
-- goes through sync_items. Replies as a sync call, and keeps its reply under its call id alike.
local function sync_count(keys, argv)
  local blob, nk = argv[3], #keys
  if (#argv ~= 3 and #argv ~= 4) or #blob ~= 64 + 8 * nk then
    return redis.error_reply('ERR ratelimit script: bad arguments')
  end
  local now = clock(argv)
  if not now then return redis.error_reply('ERR ratelimit script: bad time') end
  local algo, req, per, burst, refill, tok, depth, wsc = sunpack('<dddddddd', blob, 1)
  if not (algo == 0 and req >= 1 and per >= 1 and burst >= 0 and refill >= 1 and tok >= 1 and depth >= 1
          and wsc >= 1) then
    return redis.error_reply('ERR ratelimit script: bad item 1')
  end
  local marker, again = recall(keys, argv[4])
  if again then return again end
  local horizon = (depth - depth % refill) / refill + 2
  local out, items = {now}, nil
  for i = 1, nk do
    local key, need = keys[i], sunpack('<d', blob, 57 + 8 * i)
    if not (need >= 0) then return redis.error_reply('ERR ratelimit script: bad item ' .. i) end
    local s = pget('GET', key)
    if s and #s ~= 24 then
      if not items then items = sync_items(now) end
      local err = items({key}, string.sub(blob, 1, 64) .. spack('<dddddddddddddddddddd', 0, 0, 0, need, need, 1, 0,
                        0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0), out)
      if err then return err end
      local o = #out  -- a count ask is granted no share: its five share fields (0) are not sent
      out[o - 4], out[o - 3], out[o - 2], out[o - 1], out[o] = nil, nil, nil, nil, nil
    else
      local a, b, c = 0, 0, 0
      if s then a, b, c = sunpack('<ddd', s) end
      local ahead, level, beyond = a - now, 0, 0
      if ahead >= 0 then
        if ahead > horizon then
          beyond = ahead - horizon
          ahead = horizon
        end
        level = ahead * refill + b
      end
      local rem = 0  -- of the decision of 0
      if level < depth then
        local left = depth - level
        rem = (left - left % tok) / tok
      end
      local granted, retry, after = 0, 0, level
      if need > rem then  -- rejected: when it would fit (-1: never)
        if need > burst + 1 then
          retry = -1
        else
          local over = level + need * tok - depth
          local r = over % refill
          retry = (over - r) / refill + beyond
          if r ~= 0 then retry = retry + 1 end
        end
      elseif need > 0 then
        granted = need
        if need <= burst + 1 then after = level + need * tok end
      end
      if after ~= level then
        local r = after % refill
        local reset = (after - r) / refill + beyond
        if r ~= 0 then reset = reset + 1 end
        local x, y = now + (after - r) / refill, r
        if x ~= a or y ~= b or c ~= 0 then
          a, b, c = x, y, 0
          call('SET', key, spack('<ddd', a, b, c), 'PX', fmt('%d', ttl_ms(reset)))
        end
      end
      local o = #out
      out[o + 1], out[o + 2], out[o + 3], out[o + 4], out[o + 5] = a, b, c, granted, retry
    end
  end
  remember(marker, out)
  return out
end
