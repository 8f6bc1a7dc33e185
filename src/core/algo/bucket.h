// The continuous bucket behind gcra, token and leaky. Each keeps a different state, but
// each turns it into the same thing: the bucket's level at `now`, in the policy's scaled
// units (a request of cost c adds c * token, time drains refill per microsecond, the
// bucket holds depth). Deciding on that level is then common to the three.
#pragma once
#include <cstdint>
#include "core/algo/decision.h"
#include "core/algo/policy.h"

namespace rl {

// A level after `elapsed_us` of draining (no drain for elapsed <= 0: a clock that went
// back never refills).
int64_t bucket_drain(int64_t level, int64_t elapsed_us, const Policy& p);

// Decides a request of `cost` on a bucket at `level` (which may exceed depth after the
// clock went back or the policy shrank). Fills allowed/limit/remaining/reset/retry/delay
// and returns the level after the request (unchanged when rejected or cost is 0). With
// max_delay, a request that would wait longer is rejected, its retry when it would not.
int64_t bucket_decide(int64_t level, const Policy& p, int64_t cost, Decision& d);

}  // namespace rl
