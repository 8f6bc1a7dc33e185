-- bucket.cpp ---------------------------------------------------------------------------------

local function bucket_drain(level, elapsed, refill)
  if elapsed <= 0 or level <= 0 then
    if level > 0 then return level end
    return 0
  end
  if elapsed > (level - level % refill) / refill then return 0 end  -- compare before multiplying
  return level - elapsed * refill
end

-- delay.cpp: the delay of the last bucket_decide (an upvalue, so that every decide_* keeps
-- its return values); dl = delay_level, mu = max_delay_units, -1 for none.
local shaped = 0

-- The decision, and the level after it.
local function bucket_decide(level, cost, burst, refill, tok, depth, dl, mu)
  local ok, retry, after = false, 0, level
  if cost == 0 then
    ok = true  -- only reports, even on a bucket left over-full by a clock that went back
  elseif cost > burst + 1 or (mu >= 0 and cost * tok - dl - mu > 0) then
    retry = -1  -- beyond the burst, or waits too long even on an empty bucket
  else
    -- Admitted once the level fits both the burst and max_delay: the later of the two.
    local need = level + cost * tok
    local over, late = need - depth, 0
    if mu >= 0 then late = need - dl - mu end
    if over <= 0 and late <= 0 then
      ok, after = true, need
      if dl >= 0 and after > dl then
        local x = after - dl
        local r = x % refill  -- ceil_div
        shaped = (x - r) / refill
        if r ~= 0 then shaped = shaped + 1 end
      end
    else
      if late > over then over = late end
      local r = over % refill  -- ceil_div
      retry = (over - r) / refill
      if r ~= 0 then retry = retry + 1 end
    end
  end
  local rem = 0
  if after < depth then
    local left = depth - after
    rem = (left - left % tok) / tok
  end
  local r = after % refill  -- ceil_div
  local reset = (after - r) / refill
  if r ~= 0 then reset = reset + 1 end
  return ok, rem, reset, retry, after
end
