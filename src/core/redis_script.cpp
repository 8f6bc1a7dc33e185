// The Lua source, in pieces that both variants share. The variants differ only in the piece
// that sets `now`. Kept in C++ string literals because nginx's build compiles only .cpp files.
//
// Redis runs the whole body on every call, so it is written for that (each choice measured):
// one flat loop, since every `local function` is a new closure per call and each upvalue it
// captures costs more than the call it saves; no table per check (multiple values instead);
// one struct.unpack of doubles per check instead of ten tonumber()s; in a batch, each state
// read once (GET) and written once (SET ... PX). The algorithms mirror src/core/*.cpp with the
// same integer operations in the same order.
#include "redis_script.h"

#include <cstddef>

#include "sha1.h"

namespace rl {

namespace {

constexpr char kHead[] = R"lua(-- ngx_http_ratelimit_module: decides the limits of a batch of requests (groups, in order, each
-- all or nothing), or refunds a request's, atomically. Layout: src/core/redis_command.h.
-- Mirrors src/core/*.cpp. All values are integers below 2^52 held in doubles: +, - and * are
-- exact, and so is floor(a / b) for 0 <= a, 0 < b, a + b < 2^53 (the rounded quotient never
-- reaches the next integer). So is a % b (Lua: a - floor(a / b) * b, floored like
-- window_start), and then (a - a % b) / b is C++'s a / b: the hot paths write it so, as the
-- VM computes it without the cost of a call to math.floor. Never tostring a number beyond 14
-- digits (Lua 5.1 keeps 14): numbers go out through struct.pack or string.format('%d').
--
-- One flat loop on purpose: Redis runs this body on every call, and a `local function` is a new
-- closure each time. Algorithms: 0 gcra, 1 token, 2 leaky, 3 sliding, 4 fixed, 5 log. A check
-- is a record of 10 doubles (80 bytes, see redis_command.h); a hash algorithm's state is 3.
local floor, fmt, sunpack, spack, call, pget, keys = math.floor, string.format, struct.unpack, struct.pack, redis.call,
                                                    redis.pcall, KEYS
local mode, blob = ARGV[1], ARGV[3]
local refunding = mode == 'refund'
if (mode ~= 'decide' and not refunding) or #ARGV ~= 3 then
  return redis.error_reply('ERR ratelimit script: bad arguments')
end

-- The shape first: group sizes, record count, keys.
local size, p, nkeys, ngroups = #blob, 1, 0, 0
while p <= size do
  local n = -1
  if p + 7 <= size then n = sunpack('<d', blob, p) end
  if not (n >= 0 and n == floor(n) and p + 7 + n * 80 <= size) then
    return redis.error_reply('ERR ratelimit script: bad arguments')
  end
  p = p + 8 + n * 80
  nkeys = nkeys + n
  ngroups = ngroups + 1
end
if nkeys ~= #keys then return redis.error_reply('ERR ratelimit script: bad arguments') end
-- Each record is checked before its group decides: a bad one fails the call, and a single
-- group then has written nothing. A batch writes its hash states at the end, but a log as soon
-- as its group is admitted: a batch with a log (or a bad algorithm) checks all its records
-- first, so that it never stops halfway.
if ngroups > 1 then
  local p, full = 1, false
  while p <= size and not full do
    local n = sunpack('<d', blob, p)
    p = p + 8
    for _ = 1, n do
      local algo = sunpack('<d', blob, p)
      if not (algo >= 0 and algo < 5) then full = true end
      p = p + 80
    end
  end
  p = 1
  local k = 0
  while full and p <= size do
    local n = sunpack('<d', blob, p)
    p = p + 8
    for _ = 1, n do
      local algo, req, per, burst, refill, tok, depth, wsc, cost = sunpack('<ddddddddd', blob, p)
      k = k + 1
      if not (algo >= 0 and algo <= 5 and algo % 1 == 0 and req >= 1 and per >= 1 and burst >= 0 and refill >= 1
              and tok >= 1 and depth >= 1 and wsc >= 1 and cost >= 0) then
        return redis.error_reply('ERR ratelimit script: bad check ' .. k)
      end
      p = p + 80
    end
  end
end
)lua";

constexpr char kNowFromArgv[] = R"lua(
-- Test variant: the caller's time.
local now = tonumber(ARGV[2])
)lua";

constexpr char kNowFromRedis[] = R"lua(
-- Redis's clock, the same for every nginx host. TIME is not deterministic: replicate the
-- script's effects (the default since Redis 5, the only mode since 7: then a no-op, ~20 ns).
redis.replicate_commands()
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
)lua";

constexpr char kBody[] = R"lua(
if not now then return redis.error_reply('ERR ratelimit script: bad time') end

-- sliding_window.cpp first_fit: created on a sliding window's first rejection of the call.
local first_fit

-- refund.cpp: a hash algorithm's state after giving back `cost` units admitted at `at` (the
-- same values when nothing changes). Created only for refunds.
local refunded
if refunding then
  refunded = function(algo, a, b, c, per, burst, refill, tok, depth, cost, at)
    if algo == 3 then
      local w = floor(at / per) * per  -- window_start
      if w == a then
        if c > cost then return a, b, c - cost end
        return a, b, 0
      end
      if w == a - per then
        if b > cost then return a, b - cost, c end
        return a, 0, c
      end
      return a, b, c
    elseif algo == 4 then
      if floor(at / per) * per ~= a then return a, b, c end
      if b > cost then return a, b - cost, c end
      return a, 0, c
    end
    if cost > burst + 1 then cost = burst + 1 end
    local units = cost * tok
    if algo == 0 then
      local ahead = a - now
      if ahead < 0 then return a, b, c end
      local horizon = floor(depth / refill) + 2
      local beyond = 0
      if ahead > horizon then
        beyond = ahead - horizon
        ahead = horizon
      end
      local after = ahead * refill + b - units
      if after < 0 then after = 0 end
      local q = floor(after / refill)
      return now + beyond + q, after - q * refill, c
    end
    if algo == 1 and c == 0 then return a, b, c end
    local level, lv, el = 0, a, now - b  -- bucket_drain(lv, el)
    if algo == 1 then
      if lv > depth then lv = depth end
      lv = depth - lv
    end
    if el <= 0 or lv <= 0 then
      if lv > 0 then level = lv end
    elseif el <= floor(lv / refill) then
      level = lv - el * refill
    end
    local after = level - units
    if after < 0 then after = 0 end
    if after == level then return a, b, c end
    local last = now
    if b > now then last = b end
    if algo == 1 then return depth - after, last, c end
    return after, last, c
  end
end

-- A batch keeps the hash algorithms' states it read or changed, packed (false: no key), and
-- the TTL (ms) of each one changed, from its last change: each key is read once and written
-- once, at the end. A single group's keys are distinct: it reads and writes them directly.
local S, TTL
if ngroups > 1 then S, TTL = {}, {} end

-- Admits one check: what check i returned as w = true, x, y, z (see below). Globals rather than
-- upvalues: cheaper for a function created on every call.
local function commit(S, TTL, key, algo, cost, reset, x, y, z)
  -- After reset the state is worth a fresh key's: the key expires then (rounded up to the
  -- millisecond, plus one), so idle keys leave nothing behind.
  local r = reset % 1000
  local ms = (reset - r) / 1000 + 1
  if r ~= 0 then ms = ms + 1 end
  if algo ~= 5 then
    local v = struct.pack('<ddd', x, y, z)
    if S then
      S[key], TTL[key] = v, ms
    else
      redis.call('SET', key, v, 'PX', string.format('%d', ms))  -- a string: Redis formats numbers slowly
    end
    return
  end
  -- sliding_log.cpp commit_log, at once, so that the next groups read it: drop what expired
  -- (x = the first live index), append `cost` entries of the stamp y.
  if x > 0 then redis.call('LTRIM', key, x, -1) end
  local stamp = string.format('%d', y)
  if cost == 1 then
    redis.call('RPUSH', key, stamp)
  elseif cost > 1 then
    local args, left = {}, cost
    while left > 0 do
      local m = left
      if m > 1000 then m = 1000 end  -- unpack has a stack limit
      for e = 1, m do args[e] = stamp end
      for e = m + 1, #args do args[e] = nil end
      redis.call('RPUSH', key, unpack(args))
      left = left - m
    end
  end
  if reset > 0 then redis.call('PEXPIRE', key, string.format('%d', ms)) end
end

local T  -- a group of several checks: what admitting each one writes, until all have allowed
local out
if nkeys == 1 then out = {0, now, 0, 0, 0, 0} else out = {0, now} end  -- sized at once for the common call
p = 1
local k, o = 0, 2
while p <= size do
  local n = nkeys  -- one group: known already
  if ngroups > 1 then n = sunpack('<d', blob, p) end
  p = p + 8
  local all, pass = true, 1
  repeat
    for i = 1, n do
      local q, j = p + (i - 1) * 80, o + 4 * (i - 1)
      -- pass 2: the group was rejected; its checks that allowed report a cost-0 request.
      if pass == 1 or out[j + 1] == 1 then
        local algo, req, per, burst, refill, tok, depth, wsc, cost, at = sunpack('<dddddddddd', blob, q)
        if not (algo >= 0 and algo <= 5 and algo % 1 == 0 and req >= 1 and per >= 1 and burst >= 0 and refill >= 1
                and tok >= 1 and depth >= 1 and wsc >= 1 and cost >= 0) then
          return redis.error_reply('ERR ratelimit script: bad check ' .. (k + i))
        end
        local key = keys[k + i]
        local units, refund = cost, refunding and cost > 0  -- refund: then whether it changed anything
        if pass == 2 or refunding then cost = 0 end
        -- The decision, then w: admitting it changes something, and to what (x, y, z).
        local ok, rem, reset, retry, w, x, y, z = false, 0, 0, 0, false
        if algo ~= 5 then
          local s
          if S then s = S[key] end
          if s == nil then
            s = pget('GET', key)
            if s and #s ~= 24 then
              -- A hash {a, b, c} of the earlier layout (or WRONGTYPE from HMGET on anything else).
              local v = call('HMGET', key, 'a', 'b', 'c')
              s = spack('<ddd', tonumber(v[1]) or 0, tonumber(v[2]) or 0, tonumber(v[3]) or 0)
            end
            if S then S[key] = s end
          end
          local a, b, c = 0, 0, 0
          if s then a, b, c = sunpack('<ddd', s) end
          if refund then
            local ra, rb, rc = refunded(algo, a, b, c, per, burst, refill, tok, depth, units, at)
            refund = ra ~= a or rb ~= b or rc ~= c
            if refund then a, b, c = ra, rb, rc end
          end

          if algo <= 2 then
            -- The bucket's level now (gcra.cpp, token_bucket.cpp, leaky_bucket.cpp), then
            -- bucket.cpp bucket_decide, then the algorithm's next state.
            local level, beyond = 0, 0
            if algo == 0 then
              -- a = TAT in whole microseconds, b = its remainder in 1/refill microseconds.
              local ahead = a - now
              if ahead >= 0 then
                local horizon = (depth - depth % refill) / refill + 2
                if ahead > horizon then
                  beyond = ahead - horizon
                  ahead = horizon
                end
                level = ahead * refill + b
              end
            elseif algo == 2 or c ~= 0 then
              -- token: a = tokens in scaled units, b = last refill, c = 1 once seen (else full).
              -- leaky: a = level in scaled units, b = last leak. Then bucket_drain(lv, el).
              local lv, el = a, now - b
              if algo == 1 then
                if lv > depth then lv = depth end
                lv = depth - lv
              end
              if el <= 0 or lv <= 0 then
                if lv > 0 then level = lv end
              elseif el <= (lv - lv % refill) / refill then
                level = lv - el * refill
              end
            end
            local after = level
            if cost == 0 then
              ok = true
            elseif cost > burst + 1 then
              retry = -1
            elseif level + cost * tok <= depth then
              ok = true
              after = level + cost * tok
            else
              local over = level + cost * tok - depth
              local r = over % refill  -- ceil_div
              retry = (over - r) / refill
              if r ~= 0 then retry = retry + 1 end
            end
            if after < depth then
              local left = depth - after
              rem = (left - left % tok) / tok
            end
            local r = after % refill  -- ceil_div, and gcra's next state
            reset = (after - r) / refill
            if algo == 0 then
              if after ~= level then w, x, y, z = true, now + reset, r, 0 end
              if r ~= 0 then reset = reset + 1 end
              reset = reset + beyond
              if not ok and retry ~= -1 then retry = retry + beyond end
            elseif r ~= 0 then
              reset = reset + 1
            end
            if algo == 1 then
              if after ~= level or c == 0 then
                w, x, y, z = true, depth - after, now, 1
                if c ~= 0 and b > now then y = b end
              end
            elseif algo == 2 and after ~= level then
              w, x, y, z = true, after, now, 0
              if b > now then y = b end
            end
          elseif algo == 3 then
            -- sliding_window.cpp: a = window start, b = previous window's count, c = current.
            local t = now
            local start = t - t % per  -- window_start
            local prev, cur, back = b, c, 0
            if prev > req then prev = req end
            if cur > req then cur = req end
            if start <= a then
              if t < a then
                back = a - t
                t = a
              end
              start = a
            elseif start == a + per then
              prev = cur
              cur = 0
            else
              prev = 0
              cur = 0
            end
            local elapsed = t - start
            local weight = per - elapsed  -- weight_at
            if wsc ~= per then
              weight = weight * wsc
              weight = (weight - weight % per) / per
            end
            local weighted = prev * weight
            if cost == 0 then
              ok = true
            elseif cost > req then
              retry = -1
            elseif weighted + (cur + cost) * wsc <= req * wsc then
              ok = true
            else
              if not first_fit then
                first_fit = function(req_, per_, wsc_, prev_, cur_, cost_, from)
                  local room = (req_ - cur_ - cost_) * wsc_
                  if room < 0 then return -1 end
                  if prev_ == 0 then return from end
                  local wmax = math.floor(room / prev_)
                  if wmax >= wsc_ then return from end
                  local fit
                  if wsc_ == per_ then
                    fit = per_ - wmax
                  else
                    local m = (wmax + 1) * per_
                    local d = math.floor(m / wsc_)  -- ceil_div
                    if m - d * wsc_ ~= 0 then d = d + 1 end
                    fit = per_ - d + 1
                  end
                  if fit < from then fit = from end
                  if fit < per_ then return fit end
                  return -1
                end
              end
              local fit = first_fit(req, per, wsc, prev, cur, cost, elapsed)
              if fit >= 0 then
                retry = fit - elapsed
              else
                fit = first_fit(req, per, wsc, cur, 0, cost, 0)  -- the next window: cur becomes prev
                if fit >= 0 then retry = per - elapsed + fit else retry = 2 * per - elapsed end
              end
            end
            local after = cur
            if ok then after = cur + cost end
            local left = req * wsc - weighted - after * wsc
            if left > 0 then rem = (left - left % wsc) / wsc end
            if after > 0 then
              reset = 2 * per - elapsed
            elseif prev > 0 then
              reset = per - elapsed
            end
            if reset > 0 then reset = reset + back end
            if not ok and retry ~= -1 then retry = retry + back end
            if ok and cost > 0 then w, x, y, z = true, start, prev, after end
          else
            -- fixed_window.cpp: a = window start, b = count in it.
            local start = now - now % per  -- window_start
            local count = 0
            if start <= a then
              start = a
              count = b
              if count > req then count = req end
            end
            local end_in = start + per - now
            if cost > req then
              retry = -1
            elseif count + cost <= req then
              ok = true
            else
              retry = end_in
            end
            local after = count
            if ok then after = count + cost end
            rem = req - after
            if after > 0 then reset = end_in end
            if ok and cost > 0 then w, x, y, z = true, start, after, 0 end
          end
          if w and x == a and y == b and z == c then w = false end
          -- A refund that changed the state keeps it, with the TTL of the cost-0 decision on it.
          if refund then commit(S, TTL, key, algo, 0, reset, a, b, c) end
        else
          -- sliding_log.cpp. The key is a list of the ring's live entries, oldest first: list
          -- index `first` plays the ring's head, the last entry is the newest time (the state's c).
          if refund then refund = call('LREM', key, -units, fmt('%d', at)) > 0 end
          local len = call('LLEN', key)
          local first = 0
          if len > req then first = len - req end  -- after a policy change, the newest req count
          local count = len - first
          -- The C++ walks past expired entries from the head. Entries are sorted, so the expired
          -- ones are a prefix: bisect for its end instead of reading them all.
          if count > 0 and now - tonumber(call('LINDEX', key, first)) >= per then
            local lo, hi = first + 1, len  -- before lo: expired; hi: live, or the end
            while lo < hi do
              local mid = floor((lo + hi) / 2)
              if now - tonumber(call('LINDEX', key, mid)) >= per then lo = mid + 1 else hi = mid end
            end
            count = count - (lo - first)
            first = lo
          end
          local newest = 0
          if count > 0 then newest = tonumber(call('LINDEX', key, -1)) end
          local stamp = now
          if count > 0 and newest > now then stamp = newest end
          if cost == 0 then
            ok = true
          elseif cost > req then
            retry = -1
          elseif count + cost <= req then
            ok = true
          else
            -- The oldest (count + cost - req) entries must expire first.
            retry = tonumber(call('LINDEX', key, first + count + cost - req - 1)) + per - now
          end
          local after = count
          if ok then after = count + cost end
          if ok and cost > 0 then newest = stamp end
          rem = req - after
          if after > 0 then reset = newest + per - now end
          if first > 0 or (ok and cost > 0) then w, x, y = true, first, stamp end
          if refund then
            local ms = floor(reset / 1000)  -- as commit() does
            if reset - ms * 1000 ~= 0 then ms = ms + 1 end
            call('PEXPIRE', key, fmt('%d', ms + 1))
          end
        end

        out[j + 1], out[j + 2], out[j + 3], out[j + 4] = ok and 1 or 0, rem, reset, retry
        if pass == 1 and not refunding then
          if not ok then
            all = false
          elseif n == 1 then
            if w and algo ~= 5 then
              -- The common case: commit() inlined.
              local r = reset % 1000
              local ms = (reset - r) / 1000 + 1
              if r ~= 0 then ms = ms + 1 end
              if S then
                S[key], TTL[key] = spack('<ddd', x, y, z), ms
              else
                call('SET', key, spack('<ddd', x, y, z), 'PX', fmt('%d', ms))
              end
            elseif w then
              commit(S, TTL, key, algo, units, reset, x, y, z)
            end
          elseif all then
            if not T then T = {} end
            local t = 6 * (i - 1)
            T[t + 1], T[t + 2], T[t + 3], T[t + 4], T[t + 5], T[t + 6] = w, x, y, z, reset, algo
          end
        elseif refunding then
          all = all and ok
        end
      end
    end
    if pass == 1 and not all and n > 1 and not refunding then pass = 2 else pass = 0 end
  until pass == 0
  if all and n > 1 and not refunding then
    for i = 1, n do
      local t = 6 * (i - 1)
      if T[t + 1] then
        commit(S, TTL, keys[k + i], T[t + 6], sunpack('<d', blob, p + (i - 1) * 80 + 64), T[t + 5], T[t + 2],
               T[t + 3], T[t + 4])
      end
    end
  end
  if all then out[1] = out[1] + 1 end
  k = k + n
  o = o + 4 * n
  p = p + n * 80
end
if S then
  for key, ms in pairs(TTL) do call('SET', key, S[key], 'PX', fmt('%d', ms)) end
end
return out
)lua";

// Compile-time concatenation of string literals into one NUL-terminated array.
template <size_t N>
struct Text {
    char s[N];
};

template <size_t... Ns>
constexpr Text<(Ns + ...) - sizeof...(Ns) + 1> join(const char (&... parts)[Ns]) {
    Text<(Ns + ...) - sizeof...(Ns) + 1> t{};
    const char* ptrs[] = {parts...};
    const size_t lens[] = {(Ns - 1)...};
    size_t k = 0;
    for (size_t i = 0; i < sizeof...(Ns); i++) {
        for (size_t j = 0; j < lens[i]; j++) t.s[k++] = ptrs[i][j];
    }
    t.s[k] = '\0';
    return t;
}

constexpr auto kProduction = join(kHead, kNowFromRedis, kBody);
constexpr auto kInjected = join(kHead, kNowFromArgv, kBody);

struct Sha1Text {
    char hex[kSha1HexLen + 1];
};

Sha1Text sha1_of(std::string_view text) {
    Sha1Text h;
    sha1_hex(text.data(), text.size(), h.hex);
    return h;
}

}  // namespace

std::string_view script_text(bool injected_time) noexcept {
    if (injected_time) return std::string_view(kInjected.s, sizeof(kInjected.s) - 1);
    return std::string_view(kProduction.s, sizeof(kProduction.s) - 1);
}

const char* script_sha1(bool injected_time) noexcept {
    // Function statics: computed once, on the first call, without the heap.
    if (injected_time) {
        static const Sha1Text injected = sha1_of(script_text(true));
        return injected.hex;
    }
    static const Sha1Text production = sha1_of(script_text(false));
    return production.hex;
}

}  // namespace rl
