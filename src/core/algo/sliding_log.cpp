// Exact sliding log: the times of the last `requests` admitted units, oldest first, in a
// ring that follows the state: a = index of the oldest entry, b = live entries, c = the
// newest time recorded. A unit admitted at t counts while now - t < period.
#include "core/algo/decide.h"

namespace rl {

Decision decide_log(const State& s, const int64_t* ring, const Policy& p, int64_t now, int64_t cost) {
    Decision d;
    d.limit = p.requests;
    const int64_t n = p.requests;  // the ring's length
    int64_t head = s.a >= 0 && s.a < n ? s.a : 0;
    int64_t count = s.b > 0 ? (s.b < n ? s.b : n) : 0;
    while (count > 0 && now - ring[head] >= p.period_us) {
        head = head + 1 == n ? 0 : head + 1;
        count--;
    }
    // Time only moves forward in the log: a clock that went back records at the newest time.
    int64_t stamp = count > 0 && s.c > now ? s.c : now;

    if (cost == 0) {
        d.allowed = true;
    } else if (cost > n) {
        d.retry_after_us = kNever;
    } else if (count + cost <= n) {
        d.allowed = true;
    } else {
        // The oldest (count + cost - n) entries must expire first.
        int64_t k = count + cost - n - 1;
        int64_t at = ring[(head + k) % n];
        d.retry_after_us = at + p.period_us - now;
    }
    int64_t after = d.allowed ? count + cost : count;
    d.remaining = n - after;
    int64_t newest = d.allowed && cost > 0 ? stamp : s.c;
    d.reset_us = after > 0 ? newest + p.period_us - now : 0;
    d.next.a = head;
    d.next.b = after;
    d.next.c = after > 0 ? newest : 0;
    return d;
}

void commit_log(const Decision& d, int64_t* ring, const Policy& p, int64_t cost) {
    // The admitted units are the last `cost` live entries.
    const int64_t n = p.requests;
    for (int64_t i = d.next.b - cost; i < d.next.b; i++) ring[(d.next.a + i) % n] = d.next.c;
}

}  // namespace rl
