// Fixed window: a = start of the current window (a multiple of the period), b = requests
// counted in it. At most `requests` per window.
#include "decide.h"
#include "exact_math.h"

namespace rl {

Decision decide_fixed(const State& s, const Policy& p, int64_t now, int64_t cost) {
    Decision d;
    d.limit = p.requests;
    int64_t start = window_start(now, p.period_us);
    int64_t count = 0;
    if (start <= s.a) {
        // The same window, or the clock went back into an older one: keep counting in the
        // newer window so that nothing is admitted twice.
        start = s.a;
        count = s.b < p.requests ? s.b : p.requests;
    }
    int64_t end_in = start + p.period_us - now;
    if (cost > p.requests) {
        d.retry_after_us = kNever;
    } else if (count + cost <= p.requests) {
        d.allowed = true;
    } else {
        d.retry_after_us = end_in;  // the next window is fresh
    }
    int64_t after = d.allowed ? count + cost : count;
    d.remaining = p.requests - after;
    d.reset_us = after > 0 ? end_in : 0;
    if (d.allowed && cost > 0) {
        d.next.a = start;
        d.next.b = after;
    } else {
        d.next = s;
    }
    return d;
}

}  // namespace rl
