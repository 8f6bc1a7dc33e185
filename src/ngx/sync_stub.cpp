// TEMPORARY stand-in for the sync core (see sync_command_stub.h): gcra and fixed only, a plain
// EVAL script; removed when the sync-core branch is merged. Weak: the core's definitions win.
#include "sync_command_stub.h"

#include <cstdio>
#include <cstring>

#include "core/exact_math.h"
#include "core/redis_keys.h"

namespace rl {

namespace {

int64_t gcra_level(const State& s, const Policy& p, int64_t now) {
    int64_t ahead = s.a - now;
    return ahead >= 0 ? ahead * p.refill + s.b : 0;
}

State gcra_at(int64_t level, const Policy& p, int64_t now) {
    State s;
    if (level <= 0) return s;
    s.a = now + level / p.refill;
    s.b = level % p.refill;
    return s;
}

}  // namespace

[[gnu::weak]] void delta_add(Delta& d, const Policy& p, int64_t now, int64_t cost) {
    if (is_bucket(p.algo)) {
        d.units += cost;
        if (now > d.at) d.at = now;
        return;
    }
    int64_t w = window_start(now, p.period_us);
    if (d.empty() || d.at < w - p.period_us) {
        d = Delta{cost, 0, w};
    } else if (d.at == w - p.period_us) {
        d = Delta{cost, d.units, w};
    } else if (d.at == w) {
        d.units += cost;
    } else {
        d.units += cost;  // the clock went back: count it in the newer window
    }
}

[[gnu::weak]] void delta_merge(Delta& d, const Delta& more, const Policy& p) {
    if (d.empty()) {
        d = more;
        return;
    }
    if (more.empty()) return;
    if (is_bucket(p.algo)) {
        d.units += more.units;
        if (more.at > d.at) d.at = more.at;
        return;
    }
    if (more.at == d.at) {
        d.units += more.units;
        d.prev += more.prev;
    } else if (more.at == d.at + p.period_us) {
        d = Delta{more.units, more.prev + d.units, more.at};
    } else if (more.at > d.at) {
        d = more;
    }
}

[[gnu::weak]] State apply_delta(const State& s, const Policy& p, int64_t now, const Delta& d) {
    if (d.empty()) return s;
    if (p.algo == Algo::gcra) {
        int64_t at = d.at > 0 ? d.at : now;
        return gcra_at(gcra_level(s, p, at) + d.units * p.token, p, at);
    }
    if (p.algo == Algo::fixed) {
        if (s.a == d.at) return State{s.a, s.b + d.units, 0};
        if (s.a < d.at) return State{d.at, d.units, 0};
        if (s.a == d.at + p.period_us) return s;
        return s;
    }
    return s;
}

[[gnu::weak]] Grant grant(const State&, const Policy&, int64_t, int64_t, int64_t, int64_t) { return Grant{}; }

namespace {

const char kScript[] = R"LUA(
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
if ARGV[1] == 'hosts' then
  redis.call('ZADD', KEYS[1], now, ARGV[2])
  redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - tonumber(ARGV[3]))
  redis.call('PEXPIRE', KEYS[1], math.floor(tonumber(ARGV[3]) / 1000) + 1000)
  return redis.call('ZCARD', KEYS[1])
end
local out = {now}
local v = {}
for x in string.gmatch(ARGV[2], '[^,]+') do v[#v + 1] = tonumber(x) end
for i = 1, #KEYS do
  local o = (i - 1) * 16
  local algo, req, per, burst, refill, token, depth = v[o+1], v[o+2], v[o+3], v[o+4], v[o+5], v[o+6], v[o+7]
  local units, prev, at, want, need, hosts, gb, gbat = v[o+9], v[o+10], v[o+11], v[o+12], v[o+13], v[o+14], v[o+15], v[o+16]
  local a, b, c = 0, 0, 0
  local raw = redis.call('GET', KEYS[i])
  if raw then a, b, c = struct.unpack('<ddd', raw) end
  local granted, retry = 0, 0
  if algo == 0 then
    local function level(tt) local ah = a - tt; if ah >= 0 then return ah * refill + b end return 0 end
    local function set(l, tt) if l <= 0 then a, b = 0, 0 else a = tt + math.floor(l / refill); b = l % refill end end
    if gb > 0 then local l = level(now) - gb * token; if l < 0 then l = 0 end; set(l, now) end
    if units > 0 then local tt = at; if tt <= 0 then tt = now end; set(level(tt) + units * token, tt) end
    if want > 0 or need > 0 then
      local l = level(now)
      local room = math.floor((depth - l) / token); if room < 0 then room = 0 end
      local fair = math.ceil(room / hosts)
      granted = math.min(want, fair)
      if granted < need and need <= room then granted = need end
      if granted < need then granted = 0; retry = math.ceil((l + need * token - depth) / refill) end
      if granted > 0 then set(l + granted * token, now) end
    end
  elseif algo == 4 then
    local w = now - now % per
    if gb > 0 and a == gbat - gbat % per then b = math.max(0, b - gb) end
    if units > 0 then
      if a == at then b = b + units elseif a < at then a, b = at, units end
    end
    if want > 0 or need > 0 then
      if a ~= w then a, b = w, 0 end
      local room = req - b
      local fair = math.ceil(room / hosts)
      granted = math.min(want, fair)
      if granted < need and need <= room then granted = need end
      if granted < need then granted = 0; retry = w + per - now end
      b = b + granted
    end
  end
  redis.call('SET', KEYS[i], struct.pack('<ddd', a, b, c), 'PX', math.floor(per / 1000) * 2 + 1000)
  out[#out + 1] = a; out[#out + 1] = b; out[#out + 1] = c; out[#out + 1] = granted; out[#out + 1] = retry
end
return out
)LUA";

size_t put(char* buf, size_t at, const char* s, size_t n) {
    if (buf) std::memcpy(buf + at, s, n);
    return at + n;
}

size_t put_bulk(char* buf, size_t at, const char* s, size_t n) {
    char head[32];
    int h = std::snprintf(head, sizeof(head), "$%zu\r\n", n);
    at = put(buf, at, head, static_cast<size_t>(h));
    at = put(buf, at, s, n);
    return put(buf, at, "\r\n", 2);
}

size_t write_sync(char* buf, std::string_view prefix, const SyncItem* items, size_t n) {
    char head[32];
    int h = std::snprintf(head, sizeof(head), "*%zu\r\n", 3 + n + 2);
    size_t at = put(buf, 0, head, static_cast<size_t>(h));
    at = put_bulk(buf, at, "EVAL", 4);
    at = put_bulk(buf, at, kScript, sizeof(kScript) - 1);
    char num[32];
    h = std::snprintf(num, sizeof(num), "%zu", n);
    at = put_bulk(buf, at, num, static_cast<size_t>(h));
    for (size_t i = 0; i < n; i++) {
        char key[600];
        size_t len = redis_key(key, prefix, items[i].zone, items[i].hash, items[i].policy->algo);
        at = put_bulk(buf, at, key, len);
    }
    at = put_bulk(buf, at, "sync", 4);
    static char args[128 * 16 * 24];
    size_t al = 0;
    for (size_t i = 0; i < n; i++) {
        const SyncItem& it = items[i];
        const Policy& p = *it.policy;
        al += static_cast<size_t>(std::snprintf(args + al, sizeof(args) - al,
            "%d,%lld,%lld,%lld,%lld,%lld,%lld,%lld,%lld,%lld,%lld,%lld,%lld,%lld,%lld,%lld,", static_cast<int>(p.algo),
            (long long)p.requests, (long long)p.period_us, (long long)p.burst, (long long)p.refill, (long long)p.token,
            (long long)p.depth, (long long)p.weight_scale, (long long)it.delta.units, (long long)it.delta.prev,
            (long long)it.delta.at, (long long)it.want, (long long)it.need, (long long)it.hosts,
            (long long)it.give_back, (long long)it.give_back_at));
    }
    return put_bulk(buf, at, args, al);
}

}  // namespace

[[gnu::weak]] size_t sync_command_len(CommandScript, bool, std::string_view prefix, const SyncItem* items, size_t n,
                        int64_t) noexcept {
    return write_sync(nullptr, prefix, items, n);
}
[[gnu::weak]] size_t write_sync_command(char* buf, CommandScript, bool, std::string_view prefix, const SyncItem* items, size_t n,
                          int64_t) noexcept {
    return write_sync(buf, prefix, items, n);
}
[[gnu::weak]] size_t sync_command_bound(std::string_view prefix, const SyncItem* items, size_t n) noexcept {
    return write_sync(nullptr, prefix, items, n);
}
[[gnu::weak]] size_t sync_reply_len(size_t n) noexcept { return 1 + 5 * n; }
[[gnu::weak]] bool decode_sync_reply(const int64_t* values, size_t nvalues, size_t nitems, SyncResult* out,
                       int64_t* redis_now) noexcept {
    if (nvalues != 1 + 5 * nitems) return false;
    *redis_now = values[0];
    for (size_t i = 0; i < nitems; i++) {
        const int64_t* v = values + 1 + 5 * i;
        out[i] = SyncResult{State{v[0], v[1], v[2]}, v[3], v[4]};
    }
    return true;
}

namespace {
size_t write_hosts(char* buf, std::string_view prefix, std::string_view zone, std::string_view id, int64_t window) {
    size_t at = put(buf, 0, "*7\r\n", 4);
    at = put_bulk(buf, at, "EVAL", 4);
    at = put_bulk(buf, at, kScript, sizeof(kScript) - 1);
    at = put_bulk(buf, at, "1", 1);
    char key[400];
    int n = std::snprintf(key, sizeof(key), "%.*s{%.*s}:hosts", (int)prefix.size(), prefix.data(), (int)zone.size(),
                          zone.data());
    at = put_bulk(buf, at, key, static_cast<size_t>(n));
    at = put_bulk(buf, at, "hosts", 5);
    at = put_bulk(buf, at, id.data(), id.size());
    char w[32];
    n = std::snprintf(w, sizeof(w), "%lld", (long long)window);
    return put_bulk(buf, at, w, static_cast<size_t>(n));
}
}  // namespace

[[gnu::weak]] size_t hosts_command_len(CommandScript, bool, std::string_view prefix, std::string_view zone, std::string_view id,
                         int64_t window, int64_t) noexcept {
    return write_hosts(nullptr, prefix, zone, id, window);
}
[[gnu::weak]] size_t write_hosts_command(char* buf, CommandScript, bool, std::string_view prefix, std::string_view zone,
                           std::string_view id, int64_t window, int64_t) noexcept {
    return write_hosts(buf, prefix, zone, id, window);
}

}  // namespace rl
