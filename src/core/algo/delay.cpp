#include "core/algo/delay.h"

#include "core/algo/exact_math.h"

namespace rl {

void finish_delay(Policy& p) {
    p.delay_level = kNoDelay;
    p.max_delay_units = kNoDelay;
    if (!is_bucket(p.algo) || p.delay == kNoDelay) return;
    // delay >= burst delays nothing: the level never exceeds depth.
    int64_t n = p.delay < p.burst ? p.delay : p.burst;
    p.delay_level = (n + 1) * p.token;
    // No request waits longer than (depth - delay_level) / refill, rounded up: a max_delay of
    // that or more never rejects (and could overflow once multiplied).
    if (p.max_delay_us > 0 && p.max_delay_us <= (p.depth - p.delay_level - 1) / p.refill) {
        p.max_delay_units = p.max_delay_us * p.refill;
    }
}

int64_t delay_for(const Policy& p, int64_t after) {
    if (p.delay_level == kNoDelay || after <= p.delay_level) return 0;
    return ceil_div(after - p.delay_level, p.refill);
}

int64_t delay_bound(const Policy& p) {
    // bucket_decide admits up to depth: the wait of a full bucket.
    if (p.delay_level == kNoDelay || p.depth <= p.delay_level) return 0;
    return ceil_div(p.depth - p.delay_level, p.refill);
}

int64_t delay_overrun(const Policy& p, int64_t after) {
    if (p.max_delay_units == kNoDelay) return 0;
    return after - p.delay_level - p.max_delay_units;
}

}  // namespace rl
