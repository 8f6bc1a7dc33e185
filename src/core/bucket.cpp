#include "bucket.h"

#include "exact_math.h"

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
    } else if (cost > p.burst + 1) {
        d.allowed = false;
        d.retry_after_us = kNever;
    } else if (level + cost * p.token <= p.depth) {
        d.allowed = true;
        after = level + cost * p.token;
    } else {
        d.allowed = false;
        d.retry_after_us = ceil_div(level + cost * p.token - p.depth, p.refill);
    }
    d.remaining = after < p.depth ? (p.depth - after) / p.token : 0;
    d.reset_us = ceil_div(after, p.refill);
    return after;
}

}  // namespace rl
