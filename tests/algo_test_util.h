// Helpers for the algorithm tests: a policy built like the configuration builds it, and a
// key that keeps its state (and log ring) the way the shared-memory store does.
#pragma once
#include <gtest/gtest.h>

#include <vector>

#include "core/algo/decide.h"

namespace rltest {

constexpr int64_t kSec = 1000000;  // microseconds

// delay: rl::kNoDelay for nodelay; max_delay_us 0 for none.
inline rl::Policy policy(rl::Algo algo, int64_t requests, int64_t period_us, int64_t burst = 0,
                         int64_t delay = rl::kNoDelay, int64_t max_delay_us = 0) {
    rl::Policy p;
    p.algo = algo;
    p.requests = requests;
    p.period_us = period_us;
    p.burst = burst;
    p.delay = delay;
    p.max_delay_us = max_delay_us;
    const char* err = rl::finish_policy(p);
    EXPECT_EQ(err, nullptr) << err;
    return p;
}

// One key under one policy: decide, and keep the new state only when admitted.
struct Key {
    explicit Key(const rl::Policy& pol) : p(pol), ring(static_cast<size_t>(pol.algo == rl::Algo::log ? pol.requests : 1)) {}
    rl::Decision hit(int64_t now, int64_t cost = 1) {
        rl::Decision d = rl::decide(s, p, now, cost, ring.data());
        if (d.allowed) {
            if (p.algo == rl::Algo::log) rl::commit_log(d, ring.data(), p, cost);
            s = d.next;
        }
        return d;
    }
    bool allowed(int64_t now, int64_t cost = 1) { return hit(now, cost).allowed; }
    rl::Policy p;
    rl::State s;
    std::vector<int64_t> ring;
};

}  // namespace rltest
