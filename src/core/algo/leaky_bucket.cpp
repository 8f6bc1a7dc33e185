// Leaky bucket as a meter: a = water level in scaled units, b = time of the last leak.
// It leaks refill units per microsecond; a request pours cost * token units and is admitted
// while the bucket does not overflow. A zeroed state is an empty bucket.
#include "core/algo/bucket.h"
#include "core/algo/decide.h"

namespace rl {

Decision decide_leaky(const State& s, const Policy& p, int64_t now, int64_t cost) {
    Decision d;
    int64_t level = bucket_drain(s.a, now - s.b, p);
    int64_t after = bucket_decide(level, p, cost, d);
    if (after == level) {
        d.next = s;
    } else {
        d.next.a = after;
        d.next.b = s.b > now ? s.b : now;  // never move the leak time back
    }
    return d;
}

}  // namespace rl
