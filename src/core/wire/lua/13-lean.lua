-- redis_command.h's lean form: groups of one check each, every check gcra of one policy without
-- delay or block (ARGV[3]: burst, refill, token, depth, then each check's cost). Decided inline,
-- as decide_gcra and bucket_decide do with delay_level and max_delay_units -1, without a Lua
-- call per check; each key read once, its state kept as numbers and written once, at the end,
-- as run writes a batch's. The reply is a decide call's. The common batch, at a third of run's
-- instructions per check on a hot key (tests/bench/README.md, issue 33).
local function lean(keys, argv)
  local blob, nk = argv[3], #keys
  if #argv ~= 3 or #blob ~= 32 + 8 * nk then return redis.error_reply('ERR ratelimit script: bad arguments') end
  local burst, refill, tok, depth = sunpack('<dddd', blob, 1)
  if not (burst >= 0 and refill >= 1 and tok >= 1 and depth >= 1) then
    return redis.error_reply('ERR ratelimit script: bad check 1')
  end
  local now = clock(argv)
  if not now then return redis.error_reply('ERR ratelimit script: bad time') end
  local horizon = (depth - depth % refill) / refill + 2
  local S, W, out, admitted = {}, {}, {0, now}, 0
  for i = 1, nk do
    local key, cost = keys[i], sunpack('<d', blob, 25 + 8 * i)
    if not (cost >= 0) then return redis.error_reply('ERR ratelimit script: bad check ' .. i) end
    local st = S[key]  -- {a, b}
    if not st then
      local s = pget('GET', key)
      if s and #s ~= 24 then s = odd_state(key, s) end
      if s then st = {sunpack('<dd', s)} else st = {0, 0} end
      S[key] = st
    end
    local a, b = st[1], st[2]
    local ahead, level, beyond = a - now, 0, 0
    if ahead >= 0 then
      if ahead > horizon then
        beyond = ahead - horizon
        ahead = horizon
      end
      level = ahead * refill + b
    end
    local code, rem, retry, after = 0, 0, 0, level
    if cost == 0 then
      code = 1
    elseif cost > burst + 1 then
      retry = -1
    else
      local need = level + cost * tok
      if need <= depth then
        code, after = 1, need
      else
        local over = need - depth
        local r = over % refill
        retry = (over - r) / refill + beyond
        if r ~= 0 then retry = retry + 1 end
      end
    end
    if after < depth then
      local left = depth - after
      rem = (left - left % tok) / tok
    end
    local r = after % refill
    local reset = (after - r) / refill + beyond
    if r ~= 0 then reset = reset + 1 end
    if code == 1 then
      admitted = admitted + 1
      if after ~= level then  -- then the state differs from a, b: run's test of an unchanged one is moot
        st[1], st[2] = now + (after - r) / refill, r
        W[key] = reset
      end
    end
    local o = 4 * i - 2
    out[o + 1], out[o + 2], out[o + 3], out[o + 4] = code, rem, reset, retry
  end
  out[1] = admitted
  for key, reset in pairs(W) do
    local st = S[key]
    call('SET', key, spack('<ddd', st[1], st[2], 0), 'PX', fmt('%d', ttl_ms(reset)))
  end
  return out
end
