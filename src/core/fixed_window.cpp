// Fixed window: a = start of the current window, b = requests counted in it, c = the period
// they were counted under (0 in states written before tiers: the policy's own). At most
// `requests` per window.
#include "decide.h"
#include "exact_math.h"

namespace rl {

Decision decide_fixed(const State& s, const Policy& p, int64_t now, int64_t cost) {
    Decision d;
    d.limit = p.requests;
    int64_t start = window_start(now, p.period_us);
    int64_t count = 0;
    int64_t counted_under = s.c > 0 ? s.c : p.period_us;
    int64_t carried_until = 0;  // when a count carried from another period stops applying
    if (counted_under != p.period_us) {
        // A tier with another period counted it: while that window reaches into this one, its
        // requests may all lie in this one, so its count carries over (never admitted twice).
        if (s.a >= start || counted_under > start - s.a) {
            count = s.b < p.requests ? s.b : p.requests;
            carried_until = window_start(s.a + counted_under - 1, p.period_us) + p.period_us;
        }
        if (s.a > now) start = s.a;  // the clock went back: keep counting in the newer window
    } else if (start <= s.a) {
        // The same window, or the clock went back into an older one: keep counting in the
        // newer window so that nothing is admitted twice.
        start = s.a;
        count = s.b < p.requests ? s.b : p.requests;
    }
    int64_t end_in = start + p.period_us - now;
    // Until the count no longer applies: this window's end, or, for a carried count not
    // admitted into this window, the first window after the other period's.
    int64_t fresh_in = carried_until - now > end_in ? carried_until - now : end_in;
    if (cost > p.requests) {
        d.retry_after_us = kNever;
    } else if (count + cost <= p.requests) {
        d.allowed = true;
    } else {
        d.retry_after_us = fresh_in;
    }
    int64_t after = d.allowed ? count + cost : count;
    d.remaining = p.requests - after;
    d.reset_us = after == 0 ? 0 : d.allowed && cost > 0 ? end_in : fresh_in;
    if (d.allowed && cost > 0) {
        d.next.a = start;
        d.next.b = after;
        d.next.c = p.period_us;
    } else {
        d.next = s;
    }
    return d;
}

}  // namespace rl
