// decide(state, policy, now, cost) -> Decision: pure functions, time injected by the caller.
//
// Time is integer microseconds on any clock the caller keeps (a clock that goes backwards
// never admits extra requests). `cost` >= 0; cost 0 only reports; kNeedOne (settle.h): the
// verdict of cost 1, the report of cost 0. A rejected request consumes nothing. The policy
// must have been through finish_policy().
#pragma once
#include <cstdint>
#include "core/algo/decision.h"
#include "core/algo/policy.h"
#include "core/algo/state.h"

namespace rl {

Decision decide_gcra(const State& s, const Policy& p, int64_t now, int64_t cost);
Decision decide_token(const State& s, const Policy& p, int64_t now, int64_t cost);
Decision decide_leaky(const State& s, const Policy& p, int64_t now, int64_t cost);
Decision decide_fixed(const State& s, const Policy& p, int64_t now, int64_t cost);
Decision decide_sliding(const State& s, const Policy& p, int64_t now, int64_t cost);

// The sliding log keeps `p.requests` timestamps in `ring` besides its State. decide_log only
// reads the ring; after an admission, commit_log writes the admitted entries into it
// (then the key's state becomes d.next).
Decision decide_log(const State& s, const int64_t* ring, const Policy& p, int64_t now, int64_t cost);
void commit_log(const Decision& d, int64_t* ring, const Policy& p, int64_t cost);

// The window algorithms' calendar windows: p.win moved to the window holding now
// (calendar_shift) into w, true; false when p.win is of another time than now's (never from
// nginx, which computes it from now), d then the decision that admits nothing and changes s not.
// (Inline: it is on the request path of every calendar zone.)
inline bool calendar_now(const State& s, const Policy& p, int64_t now, CalendarWindow& w, Decision& d) {
    w = p.win;
    if (calendar_shift(w, now)) return true;
    d.retry_after_us = kNever;
    d.next = s;
    return false;
}

// Dispatch on p.algo; `ring` is the log's ring (unused by the other algorithms).
Decision decide(const State& s, const Policy& p, int64_t now, int64_t cost, const int64_t* ring = nullptr);

// Bytes of log ring a key needs under policy p (0 for algorithms without a ring).
inline uint64_t ring_bytes(const Policy& p) {
    return p.algo == Algo::log ? static_cast<uint64_t>(p.requests) * sizeof(int64_t) : 0;
}

}  // namespace rl
