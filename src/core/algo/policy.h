// What one limit allows: `requests` per `period_us`, plus `burst` for bucket algorithms,
// and the derived integers every algorithm works with.
//
// All arithmetic stays below kExact (2^52) so that a Lua number (a double) in Redis holds
// every intermediate value exactly: shared memory and Redis then decide identically.
#pragma once
#include <cstdint>
#include "core/algo/algorithm.h"
#include "core/algo/calendar.h"

namespace rl {

constexpr int64_t kExact = int64_t{1} << 52;
constexpr int64_t kNoDelay = -1;  // Policy::delay of nodelay; delay_level and max_delay_units: none

struct Policy {
    Algo algo = Algo::gcra;
    int64_t requests = 1;       // R >= 1
    int64_t period_us = 1000000;  // P >= 1
    int64_t burst = 0;          // >= 0; only for bucket algorithms
    // Shaping, bucket algorithms only (delay.h): delay=N (kNoDelay: nodelay), max_delay (0: none).
    int64_t delay = kNoDelay;
    int64_t max_delay_us = 0;
    // Block after abuse (block.h): once this limit rejects a key, every request of it is
    // rejected for block_us (0: none).
    int64_t block_us = 0;
    // Calendar quotas (calendar.h), window algorithms only: windows are the calendar's
    // (period_us is then calendar_longest_us), and `win` is the current one, set by the caller
    // before deciding (from its clock and the zone's time zone). Calendar::none: windows are
    // aligned to multiples of period_us from the epoch.
    Calendar calendar = Calendar::none;
    CalendarWindow win;

    // Derived by finish_policy():
    // Buckets keep a level in scaled units: a request costs `token` units, every
    // microsecond drains `refill` units (requests/period reduced: refill/token exactly),
    // and the bucket holds `depth` = (burst + 1) * token units.
    int64_t refill = 1;
    int64_t token = 1;
    int64_t depth = 1;
    // The sliding window weighs the previous window by (P - elapsed) / P, in steps of
    // 1 / weight_scale: weight_scale == P (exact) unless P * R would leave kExact. A calendar
    // window (of length L, varying) is weighed by (L - elapsed) / L in steps of 1 / weight_scale,
    // never exact: weight_scale = kExact / 4 / max(longest L, R).
    int64_t weight_scale = 1;
    // Shaping (delay.h): a request waits while the level after it is above delay_level, and is
    // rejected when above delay_level + max_delay_units; kNoDelay: never.
    int64_t delay_level = kNoDelay;
    int64_t max_delay_units = kNoDelay;

    // The most a fresh key admits at once.
    int64_t capacity() const { return is_bucket(algo) ? burst + 1 : requests; }
};

// Fills the derived fields. Returns nullptr, or why the policy cannot be kept exactly
// (for the configuration's error message).
const char* finish_policy(Policy& p);

}  // namespace rl
