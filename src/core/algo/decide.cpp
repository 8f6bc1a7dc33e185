#include "core/algo/decide.h"

#include "core/algo/concurrency.h"
#include "core/algo/settle.h"

namespace rl {

Decision decide(const State& s, const Policy& p, int64_t now, int64_t cost, const int64_t* ring) {
    if (cost == kNeedOne) {
        // settle= with quantity 0: the verdict of one unit, the report of none.
        Decision one = decide(s, p, now, 1, ring);
        return one.allowed ? decide(s, p, now, 0, ring) : one;
    }
    switch (p.algo) {
        case Algo::gcra: return decide_gcra(s, p, now, cost);
        case Algo::token: return decide_token(s, p, now, cost);
        case Algo::leaky: return decide_leaky(s, p, now, cost);
        case Algo::fixed: return decide_fixed(s, p, now, cost);
        case Algo::sliding: return decide_sliding(s, p, now, cost);
        case Algo::log: return decide_log(s, ring, p, now, cost);
        case Algo::concurrency: return decide_concurrency(s, p, cost);
    }
    return Decision{};
}

}  // namespace rl
