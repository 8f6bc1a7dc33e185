-- token_bucket.cpp: a = tokens in scaled units, b = last refill, c = 1 once seen (else full) --

local function decide_token(a, b, c, now, cost, burst, refill, tok, depth, dl, mu)
  local level = 0
  if c ~= 0 then
    local tokens = a
    if tokens > depth then tokens = depth end
    level = bucket_drain(depth - tokens, now - b, refill)
  end
  local ok, rem, reset, retry, after = bucket_decide(level, cost, burst, refill, tok, depth, dl, mu)
  if after == level and c ~= 0 then return ok, rem, reset, retry, false end
  local last = now
  if c ~= 0 and b > now then last = b end  -- never move the refill time back
  return ok, rem, reset, retry, true, depth - after, last, 1
end
