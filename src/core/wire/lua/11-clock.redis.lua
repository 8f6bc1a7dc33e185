-- Redis's clock, the same for every nginx host.
local function clock()
  local t = call('TIME')
  return tonum(t[1]) * 1000000 + tonum(t[2])
end
