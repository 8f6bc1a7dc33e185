// The Lua source, in pieces that both variants share: helpers, one function per algorithm
// mirroring its C++ file (same integer operations in the same order), one refund function per
// algorithm mirroring refund.cpp, then the driver. The variants differ only in the piece
// that sets `now`. Kept in C++ string literals because nginx's build compiles only .cpp files.
#include "redis_script.h"

#include <cstddef>

#include "sha1.h"

namespace rl {

namespace {

constexpr char kPrelude[] = R"lua(-- ngx_http_ratelimit_module: decides (or refunds) every limit of one request atomically.
-- Mirrors src/core/*.cpp. All values are integers below 2^52 held in doubles: +, - and * are
-- exact, and so is floor(a / b) for 0 <= a, 0 < b, a + b < 2^53 (the rounded quotient never
-- reaches the next integer). Never tostring a number: Lua 5.1 keeps 14 digits.
local floor = math.floor
local NEVER = -1
local LOG = 5

-- C++ a / b and a % b for a >= 0, b > 0.
local function idiv(a, b)
  return floor(a / b)
end

local function imod(a, b)
  return a - floor(a / b) * b
end

-- exact_math.h
local function ceil_div(a, b)
  local q = floor(a / b)
  if a - q * b ~= 0 then q = q + 1 end
  return q
end

local function window_start(now, period)
  return now - imod(now, period)
end

local function fmt(x)
  return string.format('%d', x)
end

-- decision.h: what the reply reports of one check.
local function decision()
  return {allowed = false, remaining = 0, reset = 0, retry = 0}
end
)lua";

constexpr char kBuckets[] = R"lua(
-- bucket.cpp
local function bucket_drain(level, elapsed, p)
  if elapsed <= 0 or level <= 0 then
    if level > 0 then return level end
    return 0
  end
  if elapsed > idiv(level, p.refill) then return 0 end
  return level - elapsed * p.refill
end

local function bucket_decide(level, p, cost, d)
  local after = level
  if cost == 0 then
    d.allowed = true
  elseif cost > p.burst + 1 then
    d.retry = NEVER
  elseif level + cost * p.token <= p.depth then
    d.allowed = true
    after = level + cost * p.token
  else
    d.retry = ceil_div(level + cost * p.token - p.depth, p.refill)
  end
  if after < p.depth then d.remaining = idiv(p.depth - after, p.token) end
  d.reset = ceil_div(after, p.refill)
  return after
end

-- gcra.cpp: a = TAT in whole microseconds, b = its remainder in 1/refill microseconds.
local function gcra(s, p, now, cost)
  local d = decision()
  local ahead = s.a - now
  local level, beyond = 0, 0
  if ahead >= 0 then
    local horizon = idiv(p.depth, p.refill) + 2
    if ahead > horizon then
      beyond = ahead - horizon
      ahead = horizon
    end
    level = ahead * p.refill + s.b
  end
  local after = bucket_decide(level, p, cost, d)
  d.reset = d.reset + beyond
  if not d.allowed and d.retry ~= NEVER then d.retry = d.retry + beyond end
  if after == level then
    d.next = s
  else
    d.next = {a = now + idiv(after, p.refill), b = imod(after, p.refill), c = 0}
  end
  return d
end

-- token_bucket.cpp: a = tokens in scaled units, b = last refill, c = 1 once seen.
local function token(s, p, now, cost)
  local d = decision()
  local level = 0
  if s.c ~= 0 then
    local tokens = s.a
    if tokens > p.depth then tokens = p.depth end
    level = bucket_drain(p.depth - tokens, now - s.b, p)
  end
  local after = bucket_decide(level, p, cost, d)
  if after == level and s.c ~= 0 then
    d.next = s
  else
    local last = now
    if s.c ~= 0 and s.b > now then last = s.b end
    d.next = {a = p.depth - after, b = last, c = 1}
  end
  return d
end

-- leaky_bucket.cpp: a = level in scaled units, b = last leak.
local function leaky(s, p, now, cost)
  local d = decision()
  local level = bucket_drain(s.a, now - s.b, p)
  local after = bucket_decide(level, p, cost, d)
  if after == level then
    d.next = s
  else
    local last = now
    if s.b > now then last = s.b end
    d.next = {a = after, b = last, c = 0}
  end
  return d
end
)lua";

constexpr char kWindows[] = R"lua(
-- fixed_window.cpp: a = window start, b = count in it.
local function fixed(s, p, now, cost)
  local d = decision()
  local start = window_start(now, p.period)
  local count = 0
  if start <= s.a then
    start = s.a
    count = s.b
    if count > p.requests then count = p.requests end
  end
  local end_in = start + p.period - now
  if cost > p.requests then
    d.retry = NEVER
  elseif count + cost <= p.requests then
    d.allowed = true
  else
    d.retry = end_in
  end
  local after = count
  if d.allowed then after = count + cost end
  d.remaining = p.requests - after
  if after > 0 then d.reset = end_in end
  if d.allowed and cost > 0 then
    d.next = {a = start, b = after, c = 0}
  else
    d.next = s
  end
  return d
end

-- sliding_window.cpp: a = window start, b = previous window's count, c = current count.
local function weight_at(p, elapsed)
  local left = p.period - elapsed
  if p.wscale == p.period then return left end
  return idiv(left * p.wscale, p.period)
end

local function first_fit(p, prev, cur, cost, from)
  local room = (p.requests - cur - cost) * p.wscale
  if room < 0 then return -1 end
  if prev == 0 then return from end
  local wmax = idiv(room, prev)
  if wmax >= p.wscale then return from end
  local at
  if p.wscale == p.period then
    at = p.period - wmax
  else
    at = p.period - ceil_div((wmax + 1) * p.period, p.wscale) + 1
  end
  if at < from then at = from end
  if at < p.period then return at end
  return -1
end

local function sliding(s, p, now, cost)
  local d = decision()
  local period = p.period
  local start = window_start(now, period)
  local prev = s.b
  if prev > p.requests then prev = p.requests end
  local cur = s.c
  if cur > p.requests then cur = p.requests end
  local back = 0
  if start <= s.a then
    if now < s.a then
      back = s.a - now
      now = s.a
    end
    start = s.a
  elseif start == s.a + period then
    prev = cur
    cur = 0
  else
    prev = 0
    cur = 0
  end
  local elapsed = now - start
  local q = p.wscale
  local weighted = prev * weight_at(p, elapsed)

  if cost == 0 then
    d.allowed = true
  elseif cost > p.requests then
    d.retry = NEVER
  elseif weighted + (cur + cost) * q <= p.requests * q then
    d.allowed = true
  else
    local at = first_fit(p, prev, cur, cost, elapsed)
    if at >= 0 then
      d.retry = at - elapsed
    else
      at = first_fit(p, cur, 0, cost, 0)
      if at >= 0 then d.retry = period - elapsed + at else d.retry = 2 * period - elapsed end
    end
  end
  local after = cur
  if d.allowed then after = cur + cost end
  local left = p.requests * q - weighted - after * q
  if left > 0 then d.remaining = idiv(left, q) end
  if after > 0 then
    d.reset = 2 * period - elapsed
  elseif prev > 0 then
    d.reset = period - elapsed
  end
  if d.reset > 0 then d.reset = d.reset + back end
  if not d.allowed and d.retry ~= NEVER then d.retry = d.retry + back end
  if d.allowed and cost > 0 then
    d.next = {a = start, b = prev, c = after}
  else
    d.next = s
  end
  return d
end
)lua";

constexpr char kLog[] = R"lua(
-- sliding_log.cpp. The key is a list of the ring's live entries, oldest first: list index
-- `first` plays the ring's head, and the last entry is the newest time (the state's c).
-- Reads only; log_commit writes.
local function log_decide(key, p, now, cost)
  local d = decision()
  local n = p.requests
  local len = redis.call('LLEN', key)
  local first = 0
  if len > n then first = len - n end  -- after a policy change, the newest n count
  local count = len - first
  local function expired(i)
    return now - tonumber(redis.call('LINDEX', key, fmt(i))) >= p.period
  end
  -- The C++ walks past expired entries from the head. Entries are sorted, so the expired ones
  -- are a prefix: bisect for its end instead of reading them all.
  if count > 0 and expired(first) then
    local lo, hi = first + 1, len  -- before lo: expired; hi: live, or the end
    while lo < hi do
      local mid = floor((lo + hi) / 2)
      if expired(mid) then lo = mid + 1 else hi = mid end
    end
    count = count - (lo - first)
    first = lo
  end
  local newest = 0
  if count > 0 then newest = tonumber(redis.call('LINDEX', key, '-1')) end
  local stamp = now
  if count > 0 and newest > now then stamp = newest end

  if cost == 0 then
    d.allowed = true
  elseif cost > n then
    d.retry = NEVER
  elseif count + cost <= n then
    d.allowed = true
  else
    local k = count + cost - n - 1
    local at = tonumber(redis.call('LINDEX', key, fmt(first + k)))
    d.retry = at + p.period - now
  end
  local after = count
  if d.allowed then after = count + cost end
  d.remaining = n - after
  if d.allowed and cost > 0 then newest = stamp end
  if after > 0 then d.reset = newest + p.period - now end
  d.first = first
  d.stamp = stamp
  d.changed = first > 0 or (d.allowed and cost > 0)
  return d
end

-- commit_log: drop what expired, append `cost` entries of the stamp.
local function log_commit(key, d, cost)
  if d.first > 0 then redis.call('LTRIM', key, fmt(d.first), '-1') end
  if d.allowed and cost > 0 then
    local stamp = fmt(d.stamp)
    local left = cost
    while left > 0 do
      local m = left
      if m > 1000 then m = 1000 end  -- unpack has a stack limit
      local args = {}
      for i = 1, m do args[i] = stamp end
      redis.call('RPUSH', key, unpack(args))
      left = left - m
    end
  end
end
)lua";

constexpr char kRefunds[] = R"lua(
-- refund.cpp: each returns the new state (the same table when nothing changes).
local function refund_units(p, cost)
  if cost > p.burst + 1 then cost = p.burst + 1 end
  return cost * p.token
end

local function drop(level, units)
  if level > units then return level - units end
  return 0
end

local function gcra_refund(s, p, now, at, cost)
  local ahead = s.a - now
  if ahead < 0 then return s end
  local horizon = idiv(p.depth, p.refill) + 2
  local beyond = 0
  if ahead > horizon then
    beyond = ahead - horizon
    ahead = horizon
  end
  local after = drop(ahead * p.refill + s.b, refund_units(p, cost))
  return {a = now + beyond + idiv(after, p.refill), b = imod(after, p.refill), c = s.c}
end

local function token_refund(s, p, now, at, cost)
  if s.c == 0 then return s end
  local tokens = s.a
  if tokens > p.depth then tokens = p.depth end
  local level = bucket_drain(p.depth - tokens, now - s.b, p)
  local after = drop(level, refund_units(p, cost))
  if after == level then return s end
  local last = now
  if s.b > now then last = s.b end
  return {a = p.depth - after, b = last, c = s.c}
end

local function leaky_refund(s, p, now, at, cost)
  local level = bucket_drain(s.a, now - s.b, p)
  local after = drop(level, refund_units(p, cost))
  if after == level then return s end
  local last = now
  if s.b > now then last = s.b end
  return {a = after, b = last, c = s.c}
end

local function fixed_refund(s, p, now, at, cost)
  if window_start(at, p.period) == s.a then return {a = s.a, b = drop(s.b, cost), c = s.c} end
  return s
end

local function sliding_refund(s, p, now, at, cost)
  local w = window_start(at, p.period)
  if w == s.a then return {a = s.a, b = s.b, c = drop(s.c, cost)} end
  if w == s.a - p.period then return {a = s.a, b = drop(s.b, cost), c = s.c} end
  return s
end

-- The log's refund is LREM of `cost` entries equal to `at`, in the driver.
)lua";

// ARGV[1] mode, ARGV[2] injected now (ignored by production), then 10 per check: algo,
// requests, period_us, burst, refill, token, depth, weight_scale, cost, at.
constexpr char kDriverHead[] = R"lua(
local STRIDE = 10
local mode = ARGV[1]
local nchecks = #KEYS
if (mode ~= 'decide' and mode ~= 'refund') or #ARGV ~= 2 + STRIDE * nchecks then
  return redis.error_reply('ERR ratelimit script: bad arguments')
end
)lua";

constexpr char kNowFromArgv[] = R"lua(
-- Test variant: the caller's time.
local now = tonumber(ARGV[2])
)lua";

constexpr char kNowFromRedis[] = R"lua(
-- Redis's clock, the same for every nginx host. TIME is not deterministic: replicate the
-- script's effects (a no-op since Redis 7, where that is the only mode).
redis.replicate_commands()
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
)lua";

constexpr char kDriver[] = R"lua(
if not now then return redis.error_reply('ERR ratelimit script: bad time') end

local DECIDE = {[0] = gcra, [1] = token, [2] = leaky, [3] = sliding, [4] = fixed}
local REFUND = {[0] = gcra_refund, [1] = token_refund, [2] = leaky_refund, [3] = sliding_refund,
                [4] = fixed_refund}

local checks = {}
for i = 1, nchecks do
  local o = 2 + (i - 1) * STRIDE
  local p = {algo = tonumber(ARGV[o + 1]), requests = tonumber(ARGV[o + 2]), period = tonumber(ARGV[o + 3]),
             burst = tonumber(ARGV[o + 4]), refill = tonumber(ARGV[o + 5]), token = tonumber(ARGV[o + 6]),
             depth = tonumber(ARGV[o + 7]), wscale = tonumber(ARGV[o + 8])}
  local c = {key = KEYS[i], p = p, cost = tonumber(ARGV[o + 9]), at = tonumber(ARGV[o + 10])}
  if not (p.algo and p.requests and p.period and p.burst and p.refill and p.token and p.depth and p.wscale
          and c.cost and c.at) or (p.algo ~= LOG and DECIDE[p.algo] == nil) or p.requests < 1
          or p.period < 1 or p.burst < 0 or p.refill < 1 or p.token < 1 or p.depth < 1 or p.wscale < 1
          or c.cost < 0 then
    return redis.error_reply('ERR ratelimit script: bad check ' .. i)
  end
  if p.algo ~= LOG then
    local v = redis.call('HMGET', c.key, 'a', 'b', 'c')
    c.s = {a = tonumber(v[1]) or 0, b = tonumber(v[2]) or 0, c = tonumber(v[3]) or 0}
  end
  checks[i] = c
end

local function decide(c, cost)
  if c.p.algo == LOG then return log_decide(c.key, c.p, now, cost) end
  return DECIDE[c.p.algo](c.s, c.p, now, cost)
end

local function same(x, y)
  return x.a == y.a and x.b == y.b and x.c == y.c
end

local function store(key, s)
  redis.call('HSET', key, 'a', fmt(s.a), 'b', fmt(s.b), 'c', fmt(s.c))
end

-- After reset_us the state is worth a fresh key's: let Redis drop it then (rounded up to the
-- millisecond, plus one), so idle keys leave nothing behind.
local function expire(key, reset_us)
  redis.call('PEXPIRE', key, fmt(ceil_div(reset_us, 1000) + 1))
end

local all = true
if mode == 'decide' then
  -- Decide every check at the same now, then write all of them or none.
  for _, c in ipairs(checks) do
    c.d = decide(c, c.cost)
    all = all and c.d.allowed
  end
  if all then
    for _, c in ipairs(checks) do
      local d = c.d
      if c.p.algo == LOG then
        if d.changed then
          log_commit(c.key, d, c.cost)
          if d.reset > 0 then expire(c.key, d.reset) end
        end
      elseif not same(d.next, c.s) then
        store(c.key, d.next)
        expire(c.key, d.reset)
      end
    end
  else
    -- Nothing consumed: the checks that would have allowed report their untouched state.
    for _, c in ipairs(checks) do
      if c.d.allowed then c.d = decide(c, 0) end
    end
  end
else
  for _, c in ipairs(checks) do
    if c.cost > 0 then
      if c.p.algo == LOG then
        if redis.call('LREM', c.key, fmt(-c.cost), fmt(c.at)) > 0 then
          c.d = decide(c, 0)
          expire(c.key, c.d.reset)
        end
      else
        local s = REFUND[c.p.algo](c.s, c.p, now, c.at, c.cost)
        if not same(s, c.s) then
          c.s = s
          store(c.key, s)
          c.d = decide(c, 0)
          expire(c.key, c.d.reset)
        end
      end
    end
    if not c.d then c.d = decide(c, 0) end
    all = all and c.d.allowed  -- a cost-0 report on an over-full bucket is a rejection
  end
end

-- {all allowed, now, then per check: allowed, remaining, reset, retry after (-1: never)}
local out = {all and 1 or 0, now}
for _, c in ipairs(checks) do
  local d = c.d
  out[#out + 1] = d.allowed and 1 or 0
  out[#out + 1] = d.remaining
  out[#out + 1] = d.reset
  out[#out + 1] = d.retry
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

constexpr auto kProduction = join(kPrelude, kBuckets, kWindows, kLog, kRefunds, kDriverHead, kNowFromRedis, kDriver);
constexpr auto kInjected = join(kPrelude, kBuckets, kWindows, kLog, kRefunds, kDriverHead, kNowFromArgv, kDriver);

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
