#include "core/algo/block.h"

#include "core/algo/decide.h"

namespace rl {

Decision blocked_decision(const Policy& p, int64_t until, int64_t now) {
    Decision d;
    d.allowed = false;
    d.limit = p.requests;
    d.remaining = 0;
    d.reset_us = until - now;
    d.retry_after_us = until - now;
    d.block = kBlockLive;
    return d;
}

int64_t block_retry_after(const Policy& p, const Decision& d) {
    if (d.block != kBlockStarted || d.retry_after_us == kNever || d.retry_after_us >= p.block_us) {
        return d.retry_after_us;
    }
    return p.block_us;
}

Decision decide_blocking(const State& s, int64_t* until, const Policy& p, int64_t now, int64_t cost,
                         const int64_t* ring) {
    if (p.block_us > 0 && block_live(*until, now)) {
        Decision d = blocked_decision(p, *until, now);
        d.next = s;
        return d;
    }
    Decision d = decide(s, p, now, cost, ring);
    if (starts_block(p, d)) {
        *until = now + p.block_us;
        d.block = kBlockStarted;
    }
    return d;
}

}  // namespace rl
