#include "core/algo/settle.h"

#include "core/algo/decide.h"

namespace rl {

Policy debt_policy(const Policy& p) {
    Policy q = p;
    q.delay = kNoDelay;
    q.max_delay_us = 0;
    q.block_us = 0;
    if (is_bucket(p.algo)) {
        q.burst = 2 * p.burst + 1;  // depth (burst + 1) * token doubled
    } else if (p.algo == Algo::fixed || p.algo == Algo::sliding) {
        q.requests = 2 * p.requests;
    }
    if (finish_policy(q) != nullptr) {
        q = p;
        q.delay = kNoDelay;
        q.max_delay_us = 0;
        q.block_us = 0;
        finish_policy(q);
    }
    return q;
}

int64_t charge(State& s, int64_t* ring, const Policy& p, const Policy& debt, int64_t now, int64_t cost,
               Decision* out) {
    Decision scratch;
    Decision& d = out != nullptr ? *out : scratch;
    d = Decision{};
    if (cost <= 0 || p.algo == Algo::concurrency) return 0;
    int64_t shift = s.c != 0 ? debt_shift(p, debt) : 0;
    State t = s;
    t.a += shift;
    d = decide(t, debt, now, cost, ring);
    if (!d.allowed) {
        // As much as fits: what a request could take now.
        if (d.remaining <= 0 || d.remaining >= cost) return 0;
        cost = d.remaining;
        d = decide(t, debt, now, cost, ring);
        if (!d.allowed) return 0;
    }
    if (p.algo == Algo::log) commit_log(d, ring, debt, cost);
    s = d.next;
    if (p.algo == Algo::token) s.a -= debt_shift(p, debt);
    return cost;
}

}  // namespace rl
