#include "core/algo/policy.h"

#include "core/algo/delay.h"

#include <numeric>

namespace rl {

const char* finish_policy(Policy& p) {
    if (p.requests < 1 || p.period_us < 1 || p.burst < 0) return "requests, period and burst must be positive";
    // Every product the algorithms form is a sum of at most three terms of kBound.
    constexpr int64_t kBound = kExact / 4;
    if (p.requests >= kBound || p.period_us >= kBound) return "requests or period is too large";

    int64_t g = std::gcd(p.requests, p.period_us);
    p.refill = p.requests / g;
    p.token = p.period_us / g;
    if (is_bucket(p.algo)) {
        if (p.burst >= kBound / p.token) return "burst is too large for this rate";
        p.depth = (p.burst + 1) * p.token;
    } else {
        p.depth = p.requests;
    }

    // Sliding window: requests * weight_scale and period * weight_scale stay within kBound.
    int64_t big = p.period_us > p.requests ? p.period_us : p.requests;
    bool exact = p.period_us <= kBound / p.requests;
    p.weight_scale = exact && p.calendar == Calendar::none ? p.period_us : kBound / big;
    if (p.calendar != Calendar::none) {
        if (is_bucket(p.algo) || p.algo == Algo::log || p.algo == Algo::concurrency) {
            return "calendar periods are for the fixed and sliding window algorithms";
        }
        if (p.period_us != calendar_longest_us(p.calendar)) return "a calendar policy's period is its longest window";
    }
    if (p.delay < kNoDelay || p.max_delay_us < 0) return "delay and max_delay must not be negative";
    finish_delay(p);
    return nullptr;
}

}  // namespace rl
