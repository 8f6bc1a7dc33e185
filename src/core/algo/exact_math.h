// Small integer helpers the algorithms share. The Lua scripts mirror each one, so keep
// them to operations a double computes exactly below 2^53.
#pragma once
#include <cstdint>

namespace rl {

// ceil(a / b) for a >= 0, b > 0.
inline int64_t ceil_div(int64_t a, int64_t b) { return a / b + (a % b != 0); }

// The start of the window of length `period` that holds `now` (windows aligned to 0).
inline int64_t window_start(int64_t now, int64_t period) {
    int64_t r = now % period;
    return now - (r < 0 ? r + period : r);
}

}  // namespace rl
