#include "core/algo/refund.h"

#include "core/algo/bucket.h"
#include "core/algo/exact_math.h"

namespace rl {

namespace {

// What a request of `cost` poured into a bucket; a bucket never held more than burst + 1.
int64_t refund_units(const Policy& p, int64_t cost) { return (cost > p.burst + 1 ? p.burst + 1 : cost) * p.token; }

int64_t drop(int64_t level, int64_t units) { return level > units ? level - units : 0; }

void refund_gcra(State& s, const Policy& p, int64_t now, int64_t cost) {
    // The level as decide_gcra reads it, horizon cap included: the excess stays as it was.
    int64_t ahead = s.a - now;
    if (ahead < 0) return;  // the TAT has passed: the bucket is already empty
    int64_t horizon = p.depth / p.refill + 2, beyond = 0;
    if (ahead > horizon) {
        beyond = ahead - horizon;
        ahead = horizon;
    }
    int64_t after = drop(ahead * p.refill + s.b, refund_units(p, cost));
    s.a = now + beyond + after / p.refill;
    s.b = after % p.refill;
}

void refund_token(State& s, const Policy& p, int64_t now, int64_t cost) {
    if (s.c == 0) return;  // a fresh key's bucket is full
    int64_t tokens = s.a < p.depth ? s.a : p.depth;
    int64_t level = bucket_drain(p.depth - tokens, now - s.b, p);
    int64_t after = drop(level, refund_units(p, cost));
    if (after == level) return;  // already full: keep the refill time, as decide does
    s.a = p.depth - after;
    s.b = s.b > now ? s.b : now;
}

void refund_leaky(State& s, const Policy& p, int64_t now, int64_t cost) {
    int64_t level = bucket_drain(s.a, now - s.b, p);
    int64_t after = drop(level, refund_units(p, cost));
    if (after == level) return;
    s.a = after;
    s.b = s.b > now ? s.b : now;
}

// The start of the window holding t: a calendar policy's known windows (-1 beyond them).
int64_t start_of(const Policy& p, int64_t t) {
    return p.calendar != Calendar::none ? calendar_start_of(p.win, t) : window_start(t, p.period_us);
}

void refund_fixed(State& s, const Policy& p, int64_t at, int64_t cost) {
    int64_t w = start_of(p, at);
    if (w >= 0 && w == s.a) s.b = drop(s.b, cost);
}

void refund_sliding(State& s, const Policy& p, int64_t at, int64_t cost) {
    int64_t w = start_of(p, at);
    int64_t stored = start_of(p, s.a);  // a is a time in the counted window
    if (w < 0 || stored < 0) return;
    int64_t before = p.calendar != Calendar::none ? calendar_before(p.win, stored) : stored - p.period_us;
    if (w == stored) {
        s.c = drop(s.c, cost);
    } else if (w == before) {
        s.b = drop(s.b, cost);
    }
}

// Removes up to `cost` live entries equal to `at`, keeping the others in order (entries are
// sorted, so the removed ones are adjacent; equal stamps are interchangeable).
void refund_log(State& s, int64_t* ring, const Policy& p, int64_t at, int64_t cost) {
    const int64_t n = p.requests;
    int64_t head = s.a >= 0 && s.a < n ? s.a : 0;
    int64_t count = s.b > 0 ? (s.b < n ? s.b : n) : 0;
    int64_t kept = 0, removed = 0;
    for (int64_t i = 0; i < count; i++) {
        int64_t v = ring[(head + i) % n];
        if (v == at && removed < cost) {
            removed++;
            continue;
        }
        ring[(head + kept) % n] = v;  // kept <= i: never overwrites an entry not yet read
        kept++;
    }
    if (removed == 0) return;
    s.a = head;
    s.b = kept;
    s.c = kept > 0 ? ring[(head + kept - 1) % n] : 0;  // the newest entry, as commit_log leaves it
}

}  // namespace

void refund(State& s, int64_t* ring, const Policy& p, int64_t now, int64_t at, int64_t cost) {
    if (cost <= 0) return;
    switch (p.algo) {
        case Algo::gcra: refund_gcra(s, p, now, cost); break;
        case Algo::token: refund_token(s, p, now, cost); break;
        case Algo::leaky: refund_leaky(s, p, now, cost); break;
        case Algo::fixed: refund_fixed(s, p, at, cost); break;
        case Algo::sliding: refund_sliding(s, p, at, cost); break;
        case Algo::log: refund_log(s, ring, p, at, cost); break;
        case Algo::concurrency: s.a = s.a > cost ? s.a - cost : 0; break;  // a slot given back
    }
}

}  // namespace rl
