#include "core/keys/rejected.h"

namespace rl {

namespace {

constexpr int64_t kPart = int64_t{1} << 31;  // c = cost * kPart + remaining, each below kPart

uint64_t mix(uint64_t h, int64_t v) {
    h ^= static_cast<uint64_t>(v) + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2);
    return h * 0xff51afd7ed558ccdULL;
}

}  // namespace

KeyHash rejection_key(const KeyHash& key, const Policy& p, uint64_t epoch) {
    uint64_t f = mix(0, static_cast<int64_t>(epoch));
    for (int64_t v : {p.requests, p.period_us, p.burst, p.delay_level, p.max_delay_units}) f = mix(f, v);
    return KeyHash{key.lo ^ f, key.hi ^ (f * 0xc4ceb9fe1a85ec53ULL)};
}

bool rejection_cacheable(const Decision& d, const Policy& p, int64_t cost) {
    return !d.allowed && cost > 0 && cost < kPart && d.remaining >= 0 && d.remaining < kPart &&
           d.retry_after_us > 0 && d.retry_after_us != kNever && is_rate(p.algo) && p.block_us == 0;
}

State remember_rejection(const Decision& d, int64_t now, int64_t cost) {
    State s;
    s.a = now + d.retry_after_us;
    s.b = now + (d.reset_us > 0 ? d.reset_us : 0);
    s.c = cost * kPart + d.remaining;
    return s;
}

bool cached_rejection(const State& s, const Policy& p, int64_t now, int64_t cost, Decision* out) {
    if (s.a <= now || cost <= 0 || cost != s.c / kPart) return false;
    Decision d;
    d.limit = p.requests;
    d.remaining = s.c % kPart;  // as Redis reported it (more may have refilled since: a lower bound)
    d.retry_after_us = s.a - now;
    d.reset_us = s.b > now ? s.b - now : 0;
    *out = d;
    return true;
}

}  // namespace rl
