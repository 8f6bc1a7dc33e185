// rl::refund: undoing an admission gives back what it took, as far as time allows, and never
// more. (The script's refund mode is compared with it in redis_diff_test.cpp.)
#include "core/algo/refund.h"

#include <gtest/gtest.h>

#include <vector>

#include "algo_test_util.h"

namespace {

using rltest::Key;
using rltest::kSec;
using rltest::policy;

const rl::Algo kAll[] = {rl::Algo::gcra, rl::Algo::token, rl::Algo::leaky,
                         rl::Algo::fixed, rl::Algo::sliding, rl::Algo::log};

void refund(Key& k, int64_t now, int64_t at, int64_t cost) { rl::refund(k.s, k.ring.data(), k.p, now, at, cost); }

// Admitted and refunded at once: the key decides as if nothing had happened.
TEST(Refund, ImmediateRefundRestoresTheKey) {
    const int64_t t = 1700000000LL * kSec;
    for (rl::Algo algo : kAll) {
        Key k(policy(algo, 10, kSec, rl::is_bucket(algo) ? 4 : 0));
        Key fresh = k;
        ASSERT_TRUE(k.allowed(t, 1));
        ASSERT_TRUE(k.allowed(t, 3));
        refund(k, t, t, 3);
        rl::Decision got = k.hit(t, 0), want = fresh.hit(t, 0);
        EXPECT_EQ(got.remaining, want.remaining + 0 - 1) << rl::algo_name(algo);  // the first admission stays
        refund(k, t, t, 1);
        got = k.hit(t, 0);
        EXPECT_EQ(got.remaining, want.remaining) << rl::algo_name(algo);
        EXPECT_EQ(got.reset_us, 0) << rl::algo_name(algo);
    }
}

TEST(Refund, CostZeroOrNothingToGiveBackDoesNothing) {
    const int64_t t = 1700000000LL * kSec;
    for (rl::Algo algo : kAll) {
        Key k(policy(algo, 10, kSec, rl::is_bucket(algo) ? 4 : 0));
        rl::State fresh = k.s;
        refund(k, t, t, 5);  // a fresh key: nothing was taken
        EXPECT_EQ(k.s, fresh) << rl::algo_name(algo);
        EXPECT_EQ(k.hit(t, 0).reset_us, 0) << rl::algo_name(algo);
        ASSERT_TRUE(k.allowed(t, 2));
        rl::State after = k.s;
        refund(k, t, t, 0);
        EXPECT_EQ(k.s, after) << rl::algo_name(algo);
        refund(k, t, t, -3);
        EXPECT_EQ(k.s, after) << rl::algo_name(algo);
    }
}

// Buckets: the level drops by what the request poured, after draining to now, never below empty.
TEST(Refund, BucketsGiveBackTheUnitsNotTheTime) {
    const int64_t t = 1700000000LL * kSec;
    for (rl::Algo algo : {rl::Algo::gcra, rl::Algo::token, rl::Algo::leaky}) {
        Key k(policy(algo, 10, kSec, 9));  // capacity 10, a unit every 100 ms
        ASSERT_TRUE(k.allowed(t, 6));
        ASSERT_TRUE(k.allowed(t + 200000, 3));  // 4 + 3 = 7 units in the bucket
        refund(k, t + 300000, t + 200000, 3);   // 6 left at t + 300 ms, minus 3
        rl::Decision d = k.hit(t + 300000, 0);
        EXPECT_EQ(d.remaining, 7) << rl::algo_name(algo);
        EXPECT_EQ(d.reset_us, 300000) << rl::algo_name(algo);
        refund(k, t + 300000, t, 1000);  // more than a bucket ever held: empty, not negative
        d = k.hit(t + 300000, 0);
        EXPECT_EQ(d.remaining, 10) << rl::algo_name(algo);
        EXPECT_EQ(d.reset_us, 0) << rl::algo_name(algo);
        EXPECT_TRUE(k.allowed(t + 300000, 10)) << rl::algo_name(algo);
        EXPECT_FALSE(k.allowed(t + 300000, 1)) << rl::algo_name(algo);
    }
}

// A GCRA far ahead (the clock went back) keeps the excess it had: a refund takes only units.
TEST(Refund, GcraAheadOfTheHorizonKeepsItsExcess) {
    const int64_t t = 1700000000LL * kSec;
    Key k(policy(rl::Algo::gcra, 10, kSec, 9));
    ASSERT_TRUE(k.allowed(t, 10));
    const int64_t back = 3600 * kSec;
    rl::Decision before = k.hit(t - back, 0);
    refund(k, t - back, t, 4);
    rl::Decision after = k.hit(t - back, 0);
    EXPECT_EQ(after.reset_us, before.reset_us - 400000);
    EXPECT_EQ(k.s.a, t + 600000);
    EXPECT_EQ(k.s.b, 0);
}

TEST(Refund, FixedOnlyInTheAdmissionsWindow) {
    const int64_t t = 1700000000LL * kSec;  // a window start
    Key k(policy(rl::Algo::fixed, 5, kSec));
    ASSERT_TRUE(k.allowed(t + 10, 4));
    refund(k, t + 20, t + kSec - 1, 2);  // same window
    EXPECT_EQ(k.hit(t + 20, 0).remaining, 3);
    refund(k, t + 20, t - 1, 2);  // the window before: not counted here
    EXPECT_EQ(k.hit(t + 20, 0).remaining, 3);
    refund(k, t + 20, t + 10, 9);  // never below zero
    EXPECT_EQ(k.s.b, 0);
    EXPECT_EQ(k.hit(t + 20, 0).remaining, 5);
}

TEST(Refund, SlidingCurrentOrPreviousWindow) {
    const int64_t t = 1700000000LL * kSec;
    Key k(policy(rl::Algo::sliding, 10, kSec));
    ASSERT_TRUE(k.allowed(t + 100, 6));           // window t: 6
    ASSERT_TRUE(k.allowed(t + kSec + 100, 2));    // window t+1s: prev 6, cur 2
    EXPECT_EQ(k.s.b, 6);
    EXPECT_EQ(k.s.c, 2);
    refund(k, t + kSec + 200, t + 100, 4);        // from the previous window
    EXPECT_EQ(k.s.b, 2);
    refund(k, t + kSec + 200, t + kSec + 100, 1);  // from the current one
    EXPECT_EQ(k.s.c, 1);
    refund(k, t + kSec + 200, t - 5, 1);          // two windows back: nothing counts it
    EXPECT_EQ(k.s.b, 2);
    EXPECT_EQ(k.s.c, 1);
}

TEST(Refund, LogRemovesThatManyEntriesOfThatTime) {
    const int64_t t = 1700000000LL * kSec;
    Key k(policy(rl::Algo::log, 6, kSec));
    ASSERT_TRUE(k.allowed(t, 2));
    ASSERT_TRUE(k.allowed(t + 5, 3));
    ASSERT_TRUE(k.allowed(t + 9, 1));
    refund(k, t + 10, t + 5, 2);
    std::vector<int64_t> live;
    for (int64_t i = 0; i < k.s.b; i++) live.push_back(k.ring[static_cast<size_t>((k.s.a + i) % 6)]);
    EXPECT_EQ(live, (std::vector<int64_t>{t, t, t + 5, t + 9}));
    EXPECT_EQ(k.s.c, t + 9);
    refund(k, t + 10, t + 9, 5);  // only one was there; the newest is now t + 5
    EXPECT_EQ(k.s.b, 3);
    EXPECT_EQ(k.s.c, t + 5);
    refund(k, t + 10, t + 7, 1);  // no such admission
    EXPECT_EQ(k.s.b, 3);
    EXPECT_EQ(k.hit(t + 10, 0).remaining, 3);
    EXPECT_TRUE(k.allowed(t + 10, 3));
    EXPECT_FALSE(k.allowed(t + 10, 1));
    // Across the ring's end: entries at indices 2..5 then 0..1.
    refund(k, t + 11, t + 10, 3);
    ASSERT_TRUE(k.allowed(t + kSec, 3));  // t's two entries expire: head moves to 2
    ASSERT_TRUE(k.allowed(t + kSec, 2));  // the ring wraps
    EXPECT_EQ(k.s.a, 2);
    EXPECT_EQ(k.s.b, 6);
    refund(k, t + kSec, t + kSec, 4);
    live.clear();
    for (int64_t i = 0; i < k.s.b; i++) live.push_back(k.ring[static_cast<size_t>((k.s.a + i) % 6)]);
    EXPECT_EQ(live, (std::vector<int64_t>{t + 5, t + kSec}));
    EXPECT_EQ(k.s.c, t + kSec);
    EXPECT_EQ(k.hit(t + kSec, 0).remaining, 4);
}

}  // namespace
