// Compensation: undo one admission when a request was admitted by one store but rejected by
// another (e.g. its limits live on different Redis Cluster nodes), so the admitted limits do
// not keep charging for a request that was refused. The Lua script's refund mode mirrors
// this function.
#pragma once
#include <cstdint>
#include "core/algo/policy.h"
#include "core/algo/state.h"

namespace rl {

// Gives back `cost` units admitted at time `at`, as well as can be done at `now`:
//  - buckets (gcra, token, leaky): the level drops by what the request poured in
//    (cost * token, at most a full bucket), never below empty; the state is first brought
//    to `now` the way decide does;
//  - fixed: the count drops by cost if the stored window is the one holding `at`;
//  - sliding: the current count drops if `at` is in the stored window, the previous count if
//    it is in the window before;
//  - log: up to `cost` live entries equal to `at` are removed (`ring` as for decide_log);
//    an admission recorded at a later stamp (a clock that went back) is not found, which
//    errs on the side of limiting.
// Counts never go below 0; cost <= 0 does nothing. Refunding what was never admitted can only
// make a limit more lenient than it should be, never stricter.
void refund(State& s, int64_t* ring, const Policy& p, int64_t now, int64_t at, int64_t cost);

}  // namespace rl
