// Shaping, as limit_req's delay=: on a bucket algorithm, the first `delay` requests beyond the
// sustained rate pass at once, later ones within the burst pass after a wait that brings them
// back to the rate, and max_delay rejects a request that would wait longer than it allows.
//
// In the bucket's scaled units (bucket.h): a request waits while the level after it stays
// above policy.delay_level = (delay + 1) * token, i.e. for ceil((level - delay_level) / refill)
// microseconds (limit_req's excess is that level minus one request). bucket_decide applies it,
// and the Lua mirrors these functions, so shared memory and Redis delay alike.
#pragma once
#include <cstdint>
#include "core/algo/policy.h"

namespace rl {

// Derives delay_level and max_delay_units from delay and max_delay_us (finish_policy).
void finish_delay(Policy& p);

// The wait of a request that leaves the bucket at `after` (0 when it does not wait).
int64_t delay_for(const Policy& p, int64_t after);

// The longest wait the policy can give: a delay from elsewhere (a Redis reply) is cut to it.
int64_t delay_bound(const Policy& p);

// How far a level `after` is beyond what max_delay accepts (> 0: the request would wait too
// long; <= 0: it may pass), in scaled units.
int64_t delay_overrun(const Policy& p, int64_t after);

}  // namespace rl
