-- The API's DELETE of a key (redis_command.h reset_command): every algorithm's state and block
-- (KEYS but the last), then the reset's time under the marker (the last KEY) for
-- ARGV[3] ms: a refund or a charge of an admission made before it finds it (14-run.lua) and
-- changes nothing, as the key's new life owes nothing of its old one. Replies the keys deleted.
local function reset(keys, argv)
  local now, life = clock(argv), tonum(argv[3])
  if not now or not life or life < 1 or #keys < 2 or #argv ~= 3 then
    return redis.error_reply('ERR ratelimit script: bad arguments')
  end
  local n = call('DEL', unpk(keys, 1, #keys - 1))
  call('SET', keys[#keys], fmt('%d', now), 'PX', fmt('%d', life))
  return n
end
