// gcra, token and leaky on scripted timelines with hand-computed expectations: the three
// are one continuous bucket, so every expectation holds for each of them.
#include <gtest/gtest.h>

#include "algo_test_util.h"

namespace {

using rltest::Key;
using rltest::kSec;
using rltest::policy;

class Bucket : public ::testing::TestWithParam<rl::Algo> {};

TEST_P(Bucket, FreshKeyAdmitsBurstPlusOneThenOnePerInterval) {
    Key k(policy(GetParam(), 1, kSec, 2));  // 1r/s burst=2
    const int64_t t0 = 1700000000LL * kSec;
    for (int64_t left : {2, 1, 0}) {
        rl::Decision d = k.hit(t0);
        EXPECT_TRUE(d.allowed);
        EXPECT_EQ(d.remaining, left);
        EXPECT_EQ(d.limit, 1);
    }
    rl::Decision d = k.hit(t0);
    EXPECT_FALSE(d.allowed);
    EXPECT_EQ(d.retry_after_us, kSec);
    EXPECT_EQ(d.remaining, 0);
    EXPECT_EQ(d.reset_us, 3 * kSec);  // three units to drain, one per second

    d = k.hit(t0 + kSec / 2);
    EXPECT_FALSE(d.allowed);
    EXPECT_EQ(d.retry_after_us, kSec / 2);
    EXPECT_FALSE(k.allowed(t0 + kSec - 1));
    d = k.hit(t0 + kSec);
    EXPECT_TRUE(d.allowed);
    EXPECT_EQ(d.remaining, 0);
    EXPECT_FALSE(k.allowed(t0 + kSec));
    // After 3 idle seconds the bucket is full again.
    d = k.hit(t0 + 4 * kSec, 0);
    EXPECT_TRUE(d.allowed);
    EXPECT_EQ(d.remaining, 3);
    EXPECT_EQ(d.reset_us, 0);
}

TEST_P(Bucket, ThirdsOfASecondAreExactNotRounded) {
    Key k(policy(GetParam(), 3, kSec));  // 3r/s: one unit per 333333.33us
    const int64_t t0 = 5 * kSec;
    EXPECT_TRUE(k.allowed(t0));
    rl::Decision d = k.hit(t0 + 333333);
    EXPECT_FALSE(d.allowed);
    EXPECT_EQ(d.retry_after_us, 1);  // 1/3us left, rounded up
    EXPECT_TRUE(k.allowed(t0 + 333334));

    // With a burst the fractions add up: three units take exactly one second to come back,
    // where a rounded-down interval of 333333us would return them at 999999us.
    Key b(policy(GetParam(), 3, kSec, 2));
    for (int i = 0; i < 3; i++) EXPECT_TRUE(b.allowed(t0));
    Key early = b;
    EXPECT_TRUE(early.allowed(t0 + kSec - 1));
    EXPECT_TRUE(early.allowed(t0 + kSec - 1));
    EXPECT_FALSE(early.allowed(t0 + kSec - 1));
    for (int i = 0; i < 3; i++) EXPECT_TRUE(b.allowed(t0 + kSec));
    EXPECT_FALSE(b.allowed(t0 + kSec));
}

TEST_P(Bucket, CostZeroReportsAndCostNConsumesN) {
    Key k(policy(GetParam(), 10, kSec, 9));  // capacity 10, one unit per 100ms
    const int64_t t0 = 100 * kSec;
    rl::Decision d = k.hit(t0, 0);
    EXPECT_TRUE(d.allowed);
    EXPECT_EQ(d.remaining, 10);
    d = k.hit(t0, 7);
    EXPECT_TRUE(d.allowed);
    EXPECT_EQ(d.remaining, 3);
    EXPECT_EQ(d.reset_us, 700000);
    d = k.hit(t0, 4);
    EXPECT_FALSE(d.allowed);
    EXPECT_EQ(d.retry_after_us, 100000);  // one unit short
    EXPECT_EQ(d.remaining, 3);            // the rejection consumed nothing
    d = k.hit(t0, 3);
    EXPECT_TRUE(d.allowed);
    EXPECT_EQ(d.remaining, 0);
    d = k.hit(t0, 11);  // more than the bucket can ever hold
    EXPECT_FALSE(d.allowed);
    EXPECT_EQ(d.retry_after_us, rl::kNever);
    d = k.hit(t0, 0);
    EXPECT_TRUE(d.allowed);
    EXPECT_EQ(d.remaining, 0);
}

TEST_P(Bucket, OneRequestPerDay) {
    const int64_t day = 86400 * kSec;
    Key k(policy(GetParam(), 1, day));
    const int64_t t0 = 1800000000LL * kSec;
    EXPECT_TRUE(k.allowed(t0));
    rl::Decision d = k.hit(t0 + 1);
    EXPECT_FALSE(d.allowed);
    EXPECT_EQ(d.retry_after_us, day - 1);
    EXPECT_FALSE(k.allowed(t0 + day - 1));
    EXPECT_TRUE(k.allowed(t0 + day));
}

TEST_P(Bucket, ABillionPerSecond) {
    // 10^9 r/s is 1000 units per microsecond; burst 999 lets a microsecond use all of them.
    Key k(policy(GetParam(), 1000000000LL, kSec, 999));
    const int64_t t0 = 1800000000LL * kSec;
    EXPECT_TRUE(k.allowed(t0, 1000));
    rl::Decision d = k.hit(t0, 1);
    EXPECT_FALSE(d.allowed);
    EXPECT_EQ(d.retry_after_us, 1);
    int64_t admitted = 0;
    for (int i = 0; i < 1001; i++) admitted += k.allowed(t0 + 1);
    EXPECT_EQ(admitted, 1000);
    // One second later: the bucket holds its capacity, not a second's worth of units.
    d = k.hit(t0 + kSec + 1, 0);
    EXPECT_EQ(d.remaining, 1000);
}

TEST_P(Bucket, IdleForYearsDoesNotOverflow) {
    Key k(policy(GetParam(), 1000000000LL, kSec, 999));
    EXPECT_TRUE(k.allowed(0, 1000));
    rl::Decision d = k.hit(int64_t{1} << 51, 0);  // about 71 years later
    EXPECT_EQ(d.remaining, 1000);
    EXPECT_EQ(d.reset_us, 0);
}

INSTANTIATE_TEST_SUITE_P(All, Bucket, ::testing::Values(rl::Algo::gcra, rl::Algo::token, rl::Algo::leaky),
                         [](const ::testing::TestParamInfo<rl::Algo>& param_info) { return std::string(rl::algo_name(param_info.param)); });

TEST(Buckets, FreshZeroStateIsAFullBucketEvenAtTimeZero) {
    for (rl::Algo a : {rl::Algo::gcra, rl::Algo::token, rl::Algo::leaky}) {
        Key k(policy(a, 1, kSec, 1));
        EXPECT_TRUE(k.allowed(0)) << rl::algo_name(a);
        EXPECT_TRUE(k.allowed(0)) << rl::algo_name(a);
        EXPECT_FALSE(k.allowed(0)) << rl::algo_name(a);
    }
}

TEST(Buckets, StateTheyKeep) {
    // Same decisions, different states: that is the point of having three.
    rl::Policy g = policy(rl::Algo::gcra, 3, kSec), t = policy(rl::Algo::token, 3, kSec),
               l = policy(rl::Algo::leaky, 3, kSec);
    rl::State s0;
    rl::Decision dg = rl::decide(s0, g, 10, 1), dt = rl::decide(s0, t, 10, 1), dl = rl::decide(s0, l, 10, 1);
    // GCRA: TAT = 10 + 333333 + 1/3 us, kept as whole us and a remainder in thirds.
    EXPECT_EQ(dg.next.a, 10 + 333333);
    EXPECT_EQ(dg.next.b, 1);
    // Token bucket: 0 tokens left out of depth 10^6 scaled units, refilled at 10.
    EXPECT_EQ(dt.next.a, 0);
    EXPECT_EQ(dt.next.b, 10);
    EXPECT_EQ(dt.next.c, 1);
    // Leaky bucket: level 10^6, leaked at 10.
    EXPECT_EQ(dl.next.a, 1000000);
    EXPECT_EQ(dl.next.b, 10);
}

}  // namespace
