// The window algorithms' states hold the time of their last admission (sliding: a; fixed: c),
// not only their window's start: what tiers need (tier_change_test.cpp). Whatever reads a
// state must find the window from that time.
#include <gtest/gtest.h>

#include "algo_test_util.h"
#include "core/algo/refund.h"
#include "core/reconcile/sync.h"

namespace {

using rltest::Key;
using rltest::kSec;
using rltest::policy;

constexpr int64_t kW0 = 1700000000LL * kSec;  // a window start for 1 s and 10 s periods

TEST(WindowState, KeepsTheLastAdmission) {
    Key s(policy(rl::Algo::sliding, 10, 10 * kSec));
    ASSERT_TRUE(s.allowed(kW0 + 3 * kSec, 2));
    EXPECT_EQ(s.s, (rl::State{kW0 + 3 * kSec, 0, 2}));
    Key f(policy(rl::Algo::fixed, 10, 10 * kSec));
    ASSERT_TRUE(f.allowed(kW0 + 3 * kSec, 2));
    EXPECT_EQ(f.s, (rl::State{kW0, 2, kW0 + 3 * kSec}));
}

// A refund finds the sliding window from the last admission's time.
TEST(WindowState, RefundFindsTheWindow) {
    rl::Policy p = policy(rl::Algo::sliding, 10, 10 * kSec);
    Key k(p);
    ASSERT_TRUE(k.allowed(kW0 + 3 * kSec, 2));
    ASSERT_TRUE(k.allowed(kW0 + 4 * kSec, 3));
    rl::refund(k.s, nullptr, p, kW0 + 5 * kSec, kW0 + 3 * kSec, 2);
    EXPECT_EQ(k.s.c, 3);
}

// sync=: a host's delta adds to a sliding state in the window of its last admission.
TEST(WindowState, SyncAddsInTheWindow) {
    rl::Policy p = policy(rl::Algo::sliding, 10, 10 * kSec);
    Key k(p);
    ASSERT_TRUE(k.allowed(kW0 + 3 * kSec, 2));
    rl::Delta d;
    rl::delta_add(d, p, kW0 + 4 * kSec, 3);
    rl::State g = rl::apply_delta(k.s, p, kW0 + 5 * kSec, d);
    EXPECT_EQ(g.c, 5);
    EXPECT_EQ(rl::decide(g, p, kW0 + 5 * kSec, 0).remaining, 5);
}

}  // namespace
