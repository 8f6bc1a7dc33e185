#include "core/keys/rejected.h"

namespace rl {

namespace {

constexpr int64_t kPart = int64_t{1} << 31;  // c = cost * kPart + remaining, each below kPart
constexpr int64_t kAsking = int64_t{1} << 62;  // added to c while a request asks (take_ask)

int64_t cost_of(const State& s) { return (s.c & (kAsking - 1)) / kPart; }

// Until when a request may start asking for the host once `s` ran out (0: never): from s.a on,
// one request of its cost may fit; the level it leaves lets the next one in cost * token /
// refill later (less a microsecond: s.a rounds the wait up), whatever other hosts do.
int64_t ask_end(const State& s, const Policy& p) {
    int64_t cost = cost_of(s);
    if (!is_bucket(p.algo) || asking(s) || cost <= 0 || cost > p.burst + 1) return 0;
    return s.a + cost * p.token / p.refill - 1;
}

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
    // Waits beyond kExact (142 years) are Redis's nonsense: not added to a clock.
    return !d.allowed && cost > 0 && cost < kPart && d.remaining >= 0 && d.remaining < kPart &&
           d.retry_after_us > 0 && d.retry_after_us < kExact && d.reset_us < kExact && is_rate(p.algo) &&
           p.block_us == 0;
}

State remember_rejection(const Decision& d, int64_t now, int64_t cost) {
    State s;
    s.a = now + d.retry_after_us;
    s.b = now + (d.reset_us > 0 ? d.reset_us : 0);
    s.c = cost * kPart + d.remaining;
    return s;
}

bool cached_rejection(const State& s, const Policy& p, int64_t now, int64_t cost, Decision* out) {
    if (s.a <= now || cost <= 0 || cost != cost_of(s)) return false;
    Decision d;
    d.limit = p.requests;
    d.remaining = s.c % kPart;  // as Redis reported it (more may have refilled since: a lower bound)
    d.retry_after_us = s.a - now;
    d.reset_us = s.b > now ? s.b - now : 0;
    *out = d;
    return true;
}

bool rejection_after_admission(const Decision& d, const Policy& p, int64_t cost, Decision* out) {
    if (!d.allowed || cost <= 0 || d.reset_us <= 0) return false;
    int64_t wait = 0;
    if (is_bucket(p.algo)) {
        // The next one fits once the level L drains to `fits` (bucket_decide). The reply
        // reports reset = ceil(L / refill), so L > (reset - 1) * refill, and the wait
        // ceil((L - fits) / refill) is at least what is computed here (exact when refill is 1).
        if (cost > p.burst + 1) return false;
        int64_t top = p.depth;
        if (p.max_delay_units != kNoDelay && p.delay_level + p.max_delay_units < top) {
            top = p.delay_level + p.max_delay_units;
        }
        int64_t fits = top - cost * p.token;
        if (fits < 0) return false;  // never (a policy that changed meanwhile)
        wait = fits == 0 ? d.reset_us : d.reset_us - 1 - (fits - 1) / p.refill;
    } else if (p.algo == Algo::fixed) {
        // The window's count leaves less than the cost: the next window is fresh (decide_fixed).
        if (d.remaining >= cost) return false;
        wait = d.reset_us;
    }
    if (wait <= 0) return false;
    Decision r;
    r.limit = d.limit;
    r.remaining = d.remaining;
    r.reset_us = d.reset_us;
    r.retry_after_us = wait;
    *out = r;
    return true;
}

bool take_ask(State& s, const Policy& p, int64_t now, int64_t cost, int64_t ask_us) {
    int64_t end = ask_end(s, p);
    if (s.a > now || now >= end || ask_us <= 0 || cost != cost_of(s)) return false;
    s.a = end < now + ask_us ? end : now + ask_us;
    if (s.b < s.a) s.b = s.a;  // not fresh before the others may pass
    s.c += kAsking;
    return true;
}

int64_t entry_end(const State& entry, const Policy& p) {
    int64_t end = ask_end(entry, p);
    return end > entry.a ? end : entry.a;
}

bool asking(const State& s) { return (s.c & kAsking) != 0; }

}  // namespace rl
