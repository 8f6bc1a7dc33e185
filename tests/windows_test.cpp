// fixed, sliding and log on scripted timelines with hand-computed expectations.
#include <gtest/gtest.h>

#include "algo_test_util.h"

namespace {

using rltest::Key;
using rltest::kSec;
using rltest::policy;

const int64_t kT0 = 1700000040LL * kSec;  // a multiple of 60s: window boundaries are exact

TEST(Fixed, CountsPerAlignedWindow) {
    Key k(policy(rl::Algo::fixed, 3, 10 * kSec));
    for (int64_t left : {2, 1, 0}) {
        rl::Decision d = k.hit(kT0 + 2 * kSec);
        EXPECT_TRUE(d.allowed);
        EXPECT_EQ(d.remaining, left);
        EXPECT_EQ(d.reset_us, 8 * kSec);
    }
    rl::Decision d = k.hit(kT0 + 9 * kSec);
    EXPECT_FALSE(d.allowed);
    EXPECT_EQ(d.retry_after_us, kSec);
    EXPECT_FALSE(k.allowed(kT0 + 10 * kSec - 1));
    // A new window: three more, even right after the boundary (the known 2x burst).
    for (int i = 0; i < 3; i++) EXPECT_TRUE(k.allowed(kT0 + 10 * kSec));
    EXPECT_FALSE(k.allowed(kT0 + 10 * kSec));
}

TEST(Fixed, CostsAndNever) {
    Key k(policy(rl::Algo::fixed, 10, 60 * kSec));
    EXPECT_EQ(k.hit(kT0, 0).remaining, 10);
    EXPECT_EQ(k.hit(kT0, 0).reset_us, 0);
    EXPECT_TRUE(k.allowed(kT0, 6));
    rl::Decision d = k.hit(kT0 + 30 * kSec, 5);
    EXPECT_FALSE(d.allowed);
    EXPECT_EQ(d.remaining, 4);
    EXPECT_EQ(d.retry_after_us, 30 * kSec);
    EXPECT_TRUE(k.allowed(kT0 + 30 * kSec, 4));
    EXPECT_EQ(k.hit(kT0, 11).retry_after_us, rl::kNever);
}

TEST(Sliding, WeighsThePreviousWindow) {
    Key k(policy(rl::Algo::sliding, 4, 10 * kSec));
    for (int64_t left : {3, 2, 1, 0}) {
        rl::Decision d = k.hit(kT0 + kSec);
        EXPECT_TRUE(d.allowed);
        EXPECT_EQ(d.remaining, left);
    }
    rl::Decision d = k.hit(kT0 + 5 * kSec);
    EXPECT_FALSE(d.allowed);
    // Next window: prev = 4 weighs 4 * (10 - e) / 10; one unit fits once that is <= 3,
    // at e = 2.5s, i.e. 7.5s from now.
    EXPECT_EQ(d.retry_after_us, 7500000);
    d = k.hit(kT0 + 10 * kSec);
    EXPECT_FALSE(d.allowed);
    EXPECT_EQ(d.retry_after_us, 2500000);
    EXPECT_FALSE(k.allowed(kT0 + 12500000 - 1));
    d = k.hit(kT0 + 12500000);
    EXPECT_TRUE(d.allowed);
    EXPECT_EQ(d.remaining, 0);  // 4 * 0.75 + 1 = 4
    EXPECT_EQ(d.reset_us, 20 * kSec - 2500000);
    d = k.hit(kT0 + 12500000);
    EXPECT_FALSE(d.allowed);
    // 4 * w + 2 <= 4  <=>  w <= 1/2: at e = 5s.
    EXPECT_EQ(d.retry_after_us, 2500000);
    // At e = 8s the previous window weighs 0.8: 0.8 + 1 = 1.8 -> 2 remaining after one more.
    d = k.hit(kT0 + 18 * kSec);
    EXPECT_TRUE(d.allowed);
    EXPECT_EQ(d.remaining, 1);  // 4 - 0.8 - 2 = 1.2 -> 1
}

TEST(Sliding, RetryCanReachTwoWindowsAhead) {
    Key k(policy(rl::Algo::sliding, 4, 10 * kSec));
    EXPECT_TRUE(k.allowed(kT0 + 9 * kSec, 4));
    // cost 4 needs prev * w == 0: the whole next window must pass.
    rl::Decision d = k.hit(kT0 + 9 * kSec, 4);
    EXPECT_FALSE(d.allowed);
    EXPECT_EQ(d.retry_after_us, 11 * kSec);
    EXPECT_FALSE(k.allowed(kT0 + 20 * kSec - 1, 4));
    EXPECT_TRUE(k.allowed(kT0 + 20 * kSec, 4));
}

TEST(Sliding, CoarseWeightForHugeQuotas) {
    // 10^9 per day: period * requests leaves 2^50, so the weight is taken in coarser steps.
    rl::Policy p = policy(rl::Algo::sliding, 1000000000LL, 86400 * kSec);
    EXPECT_LT(p.weight_scale, p.period_us);
    Key k(p);
    const int64_t day0 = 19700LL * 86400 * kSec;
    EXPECT_TRUE(k.allowed(day0, 1000000000LL));
    const int64_t half = day0 + 86400 * kSec + 43200 * kSec;  // half way: prev weighs about 1/2
    rl::Decision d = k.hit(half, 500000000LL);
    EXPECT_TRUE(d.allowed);
    // The weight is floored to 1/weight_scale: what remains is within R / weight_scale.
    EXPECT_LE(d.remaining, 1000000000LL / p.weight_scale + 1);
    d = k.hit(half, d.remaining + 1);
    EXPECT_FALSE(d.allowed);
    EXPECT_GT(d.retry_after_us, 0);
    EXPECT_LT(d.retry_after_us, 86400 * kSec / p.weight_scale + 1);
    int64_t cost = d.remaining + 1;
    Key again = k;
    EXPECT_TRUE(again.allowed(half + d.retry_after_us, cost));
    EXPECT_FALSE(k.allowed(half + d.retry_after_us - 1, cost));
}

TEST(Log, ExactTrailingWindow) {
    Key k(policy(rl::Algo::log, 3, 10 * kSec));
    EXPECT_TRUE(k.allowed(kT0));
    EXPECT_TRUE(k.allowed(kT0 + 1 * kSec));
    rl::Decision d = k.hit(kT0 + 2 * kSec);
    EXPECT_TRUE(d.allowed);
    EXPECT_EQ(d.remaining, 0);
    EXPECT_EQ(d.reset_us, 10 * kSec);
    d = k.hit(kT0 + 3 * kSec);
    EXPECT_FALSE(d.allowed);
    EXPECT_EQ(d.retry_after_us, 7 * kSec);
    EXPECT_FALSE(k.allowed(kT0 + 10 * kSec - 1));
    EXPECT_TRUE(k.allowed(kT0 + 10 * kSec));  // the unit of kT0 left the window
    d = k.hit(kT0 + 10500000);
    EXPECT_FALSE(d.allowed);
    EXPECT_EQ(d.retry_after_us, 500000);  // the unit of kT0 + 1s leaves at 11s
    d = k.hit(kT0 + 10500000, 2);
    EXPECT_FALSE(d.allowed);
    EXPECT_EQ(d.retry_after_us, 1500000);  // two must leave: the second at 12s
    EXPECT_EQ(k.hit(kT0, 4).retry_after_us, rl::kNever);
    d = k.hit(kT0 + 12 * kSec, 2);
    EXPECT_TRUE(d.allowed);
    EXPECT_EQ(d.remaining, 0);
    EXPECT_EQ(d.reset_us, 10 * kSec);
}

TEST(Log, RingWrapsAround) {
    Key k(policy(rl::Algo::log, 4, 4 * kSec));
    // One admitted unit per second for a minute: the ring goes round many times.
    for (int64_t i = 0; i < 60; i++) {
        EXPECT_TRUE(k.allowed(kT0 + i * kSec)) << i;
        if (i >= 3) {
            EXPECT_FALSE(k.allowed(kT0 + i * kSec + kSec / 2)) << i;  // the ring is full
        }
    }
    EXPECT_EQ(k.hit(kT0 + 60 * kSec, 0).remaining, 1);
}

}  // namespace
