// Settling a request's cost after its response (`ratelimit ... settle=`): the difference from
// what it was charged when decided is charged (positive) or given back (negative: refund.h).
//
// A charge is taken as far as the key's debt allows: it is decided against the debt policy,
// the key's policy with twice its capacity, and what does not fit there is dropped. So a
// bucket's level goes at most one full bucket past full (later requests wait for it to drain,
// their Retry-After exact), a window counts up to twice its limit; the sliding log, whose ring
// holds its limit, only up to its limit. A charge never shapes, never starts a block.
#pragma once
#include <cstdint>
#include "core/algo/decision.h"
#include "core/algo/policy.h"
#include "core/algo/state.h"

namespace rl {

// The cost of a request with settle= and quantity 0 (decide.h): admitted only with room for one
// unit, consuming none (the settle charges what it used).
constexpr int64_t kNeedOne = -1;

// The policy a charge is decided against (the key's own when doubling would not stay exact).
Policy debt_policy(const Policy& p);

// The token bucket keeps its tokens relative to its depth: a state read under the debt policy
// is shifted by the depths' difference (the value the Lua gets as the charge's `at`).
inline int64_t debt_shift(const Policy& p, const Policy& debt) {
    return p.algo == Algo::token ? debt.depth - p.depth : 0;
}

// Charges up to `cost` units at `now` (debt = debt_policy(p)); `ring` as for decide_log.
// Returns the units charged (0 when the key is already a full bucket in debt, or cost <= 0);
// `out`, if given, gets the last decision on the debt policy (what the script's charge reports).
int64_t charge(State& s, int64_t* ring, const Policy& p, const Policy& debt, int64_t now, int64_t cost,
               Decision* out = nullptr);

}  // namespace rl
