// GCRA: the theoretical arrival time (TAT) of the next request, kept exactly as
// a = whole microseconds and b = remainder in 1/refill microseconds. The bucket's level at
// `now` is (TAT - now) * refill.
#include "core/algo/bucket.h"
#include "core/algo/decide.h"

namespace rl {

Decision decide_gcra(const State& s, const Policy& p, int64_t now, int64_t cost) {
    Decision d;
    int64_t ahead = s.a - now;  // whole microseconds the TAT is ahead of now
    int64_t level = 0, beyond = 0;
    if (ahead >= 0) {
        // A TAT far ahead only happens when the clock went back: cap the product, and count
        // the excess as extra waiting time.
        int64_t horizon = p.depth / p.refill + 2;
        if (ahead > horizon) {
            beyond = ahead - horizon;
            ahead = horizon;
        }
        level = ahead * p.refill + s.b;
    }
    int64_t after = bucket_decide(level, p, cost, d);
    d.reset_us += beyond;
    if (!d.allowed && d.retry_after_us != kNever) d.retry_after_us += beyond;
    if (after == level) {
        d.next = s;
    } else {
        d.next.a = now + after / p.refill;
        d.next.b = after % p.refill;
    }
    return d;
}

}  // namespace rl
