// Zones with sync=TIME: every request is decided in the host's shared memory; every TIME one
// worker of the host reconciles the keys used since with Redis. Pure functions of the core:
// what a host records per key, how Redis merges it into the global state, and how a lease
// of units is granted (sync_mode=lease). The Lua's "sync" mode mirrors them (redis_script.cpp).
//
// optimistic: a host admits against its view (the global state Redis last returned, plus
//   what the host admitted since). It sends its delta, Redis adds it (never overwrites), and
//   the global state it returns becomes the host's view again.
// lease: a host admits only units Redis granted it (already consumed in the global state),
//   so the hosts together never admit more than the limit.
#pragma once
#include <cstdint>
#include "decision.h"
#include "policy.h"
#include "state.h"

namespace rl {

// What one host admitted on one key since it last sent it.
struct Delta {
    int64_t units = 0;  // buckets: units admitted (sum of costs); windows: admitted in window `at`
    int64_t prev = 0;   // windows: admitted in the window before `at` (an interval is at most a
                        // period, so it touches two windows at most)
    int64_t at = 0;     // buckets: time of the last admission; windows: start of window `at`
    bool empty() const { return units == 0 && prev == 0; }
};
static_assert(sizeof(Delta) == 24, "kept in shared-memory slots");

// Records an admission of `cost` at `now`, which decide() allowed.
void delta_add(Delta& d, const Policy& p, int64_t now, int64_t cost);

// d += more: a delta whose sending failed goes back to what is unsent.
void delta_merge(Delta& d, const Delta& more, const Policy& p);

// The state after adding d to s (Redis: the global state; a host: its view, the global state
// plus what it admitted since sending). Adds, never overwrites: buckets pour units * token
// at d.at (drained from s as decide does, with no cap: an overshoot is a debt the following
// requests pay); windows add per window, dropping counts of windows already over.
State apply_delta(const State& s, const Policy& p, int64_t now, const Delta& d);

// sync_mode=lease: what Redis grants a host on one key at `now`. The host asks for `want`
// units and needs at least `need` (a request waiting for them; 0 when asking ahead). Redis
// grants at most what the global state still admits, and at most a fair share of it,
// ceil(remaining / hosts), but `need` whenever it fits. The granted units are consumed in the
// global state (decide with cost = granted). granted == 0 when `need` does not fit; then
// decision says when it would (retry_after_us).
struct Grant {
    int64_t granted = 0;
    Decision decision;  // of the global state; decision.next is the state after the grant
};
Grant grant(const State& s, const Policy& p, int64_t now, int64_t want, int64_t need, int64_t hosts);

}  // namespace rl
