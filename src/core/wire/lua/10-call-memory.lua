-- redis_command.h, sync_command.h: a call's id (ARGV[4]). A call sent again because its reply
-- was lost gets the reply it had, kept under "<KEYS[1]>:call:<id>" (KEYS[1]'s hash tag: its
-- slot), and changes nothing. recall: the marker (nil: no id) and, if the call ran, its reply.
local function recall(keys, id)
  if not id or #id == 0 or #keys == 0 then return nil end
  local marker = keys[1] .. ':call:' .. id
  local m = call('GET', marker)
  if not m then return marker end
  local again = {}
  for i = 1, #m / 8 do again[i] = sunpack('<d', m, 8 * i - 7) end
  return marker, again
end

-- kCallMemoryMs.
local function remember(marker, out)
  if marker then call('SET', marker, spack('<' .. string.rep('d', #out), unpk(out)), 'PX', '10000') end
end
