-- The call (KEYS and ARGV of redis_command.h).
local function run(keys, argv)
  bind()
  local mode, blob = argv[1], argv[3]
  if mode == 'lean' then return lean(keys, argv) end
  local refunding, charging = mode == 'refund', mode == 'charge'
  -- ARGV[4]: a charge's or a refund's call id.
  if (mode ~= 'decide' and not refunding and not charging) or (#argv ~= 3 and (#argv ~= 4 or mode == 'decide')) then
    if mode == 'sync' or mode == 'hosts' then
      return sync(keys, argv)  -- sync zones
    end
    if mode == 'count' then return sync_count(keys, argv) end  -- sync_command.h's count form
    if mode == 'reset' then return reset(keys, argv) end  -- the API's DELETE
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
          local algo, req, per, burst, refill, tok, depth, wsc, cost, at, dl, mu, bl = read_check(blob, q)
          if not algo then return redis.error_reply('ERR ratelimit script: bad check ' .. (k + i)) end
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
              if s and #s ~= 24 then s = odd_state(key, s) end
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
