#include "core/algo/bucket.h"

#include "core/algo/delay.h"
#include "core/algo/exact_math.h"

namespace rl {

int64_t bucket_drain(int64_t level, int64_t elapsed_us, const Policy& p) {
    if (elapsed_us <= 0 || level <= 0) return level > 0 ? level : 0;
    // Compare before multiplying: a key idle for years must not overflow.
    if (elapsed_us > level / p.refill) return 0;
    return level - elapsed_us * p.refill;
}

int64_t bucket_decide(int64_t level, const Policy& p, int64_t cost, Decision& d) {
    d.limit = p.requests;
    int64_t after = level;
    if (cost == 0) {
        d.allowed = true;  // only reports, even on a bucket left over-full by a clock that went back
    } else if (cost > p.burst + 1 || delay_overrun(p, cost * p.token) > 0) {
        d.allowed = false;  // beyond the burst, or waits too long even on an empty bucket
        d.retry_after_us = kNever;
    } else {
        // Admitted once the level fits both the burst and max_delay: the later of the two.
        int64_t need = level + cost * p.token;
        int64_t over = need - p.depth, late = delay_overrun(p, need);
        if (over <= 0 && late <= 0) {
            d.allowed = true;
            after = need;
            d.delay_us = delay_for(p, after);
        } else {
            d.allowed = false;
            d.retry_after_us = ceil_div(over > late ? over : late, p.refill);
        }
    }
    d.remaining = after < p.depth ? (p.depth - after) / p.token : 0;
    d.reset_us = ceil_div(after, p.refill);
    return after;
}

}  // namespace rl
