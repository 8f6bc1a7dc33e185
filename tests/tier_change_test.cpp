// Tiers: a key's policy changes between requests (rate=$plan_rate), its state stays. No
// algorithm may reset a key nor admit more than the new tier allows: the windows keep their
// counts, the buckets their level by time (README, "Tiers").
#include <gtest/gtest.h>

#include <random>

#include "algo_test_util.h"
#include "core/algo/exact_math.h"

namespace {

using rltest::Key;
using rltest::kSec;
using rltest::policy;

constexpr int64_t kMin = 60 * kSec;
constexpr int64_t kHour = 3600 * kSec;
constexpr int64_t kT0 = 1700000000LL / 3600 * 3600 * kSec + 20 * kMin;  // 20 minutes into an hour

rl::Policy free_tier(rl::Algo a) { return policy(a, 60, kHour, rl::is_bucket(a) ? 59 : 0); }
rl::Policy pro_tier(rl::Algo a) { return policy(a, 5000, kHour, rl::is_bucket(a) ? 4999 : 0); }

// What a cost-0 request reports as remaining.
int64_t remaining(Key& k, int64_t now) { return k.hit(now, 0).remaining; }

// The README's key: 50 of the free tier's 60 used at kT0, then moved to pro.
Key fifty_of_free_then_pro(rl::Algo a) {
    Key k(free_tier(a));
    EXPECT_TRUE(k.allowed(kT0, 50));
    EXPECT_EQ(remaining(k, kT0), 10);
    k.p = pro_tier(a);
    return k;
}

const rl::Algo kWindows[] = {rl::Algo::fixed, rl::Algo::sliding};
const rl::Algo kBuckets[] = {rl::Algo::gcra, rl::Algo::token, rl::Algo::leaky};

// The README's example: 50 of 60/h used, then 5000/h: 4950 left in that hour.
TEST(TierChange, WindowsKeepTheirCount) {
    for (rl::Algo a : kWindows) {
        SCOPED_TRACE(rl::algo_name(a));
        Key k = fifty_of_free_then_pro(a);
        EXPECT_EQ(remaining(k, kT0 + kSec), 4950);
        ASSERT_TRUE(k.allowed(kT0 + kSec, 4950));
        EXPECT_FALSE(k.allowed(kT0 + 2 * kSec, 1));
        // Back to the free tier: 5000 counted this hour, nothing left until the next.
        k.p = free_tier(a);
        rl::Decision d = k.hit(kT0 + 3 * kSec, 1);
        EXPECT_FALSE(d.allowed);
        EXPECT_EQ(d.remaining, 0);
        if (a == rl::Algo::fixed) {
            EXPECT_EQ(d.retry_after_us, 40 * kMin - 3 * kSec);
        }
    }
}

// 50 of 60/h (burst 59) is 50 minutes of an hour-deep bucket; at 5000/h (burst 4999, also an
// hour deep) that is 4166.7 requests' worth: 833 left. Spending them leaves the free tier with
// 0.24 s of its bucket: one more request in 59.76 s, whichever bucket.
TEST(TierChange, BucketsCarryTheirLevelByTime) {
    for (rl::Algo a : kBuckets) {
        SCOPED_TRACE(rl::algo_name(a));
        Key k = fifty_of_free_then_pro(a);
        EXPECT_EQ(remaining(k, kT0), 833);
        ASSERT_TRUE(k.allowed(kT0, 833));
        EXPECT_FALSE(k.allowed(kT0, 1));
        k.p = free_tier(a);
        rl::Decision d = k.hit(kT0, 1);
        EXPECT_FALSE(d.allowed);
        EXPECT_EQ(d.retry_after_us, 59760000);
        EXPECT_TRUE(k.allowed(kT0 + d.retry_after_us, 1));
    }
}

// A tier whose bucket holds less time than the key owes (100r/s burst 99: one second) waits
// for the rest with gcra and leaky; the token bucket's 10 minutes of tokens fill it (README).
TEST(TierChange, ShallowerBucket) {
    for (rl::Algo a : kBuckets) {
        SCOPED_TRACE(rl::algo_name(a));
        Key k(free_tier(a));
        ASSERT_TRUE(k.allowed(kT0, 50));
        k.p = policy(a, 100, kSec, 99);
        rl::Decision d = k.hit(kT0, 1);
        if (a == rl::Algo::token) {
            EXPECT_TRUE(d.allowed);
            EXPECT_EQ(d.remaining, 99);
        } else {
            EXPECT_FALSE(d.allowed);
            EXPECT_EQ(d.retry_after_us, 2999010000);  // 50 minutes, less the bucket's second, plus 10 ms
        }
    }
}

// A key that used all of the free tier is not reset by a move up, nor by a move back down.
TEST(TierChange, AnExhaustedKeyIsNotReset) {
    for (rl::Algo a : {rl::Algo::gcra, rl::Algo::token, rl::Algo::leaky, rl::Algo::fixed, rl::Algo::sliding}) {
        SCOPED_TRACE(rl::algo_name(a));
        Key k(free_tier(a));
        ASSERT_TRUE(k.allowed(kT0, 60));
        k.p = pro_tier(a);
        rl::Decision d = k.hit(kT0, 0);
        if (rl::is_bucket(a)) {
            // An hour of debt fills the pro bucket (an hour deep) too: one request per 0.72 s.
            EXPECT_EQ(d.remaining, 0);
            d = k.hit(kT0, 1);
            EXPECT_FALSE(d.allowed);
            EXPECT_EQ(d.retry_after_us, 720000);
            EXPECT_TRUE(k.allowed(kT0 + 720000, 1));
        } else {
            EXPECT_EQ(d.remaining, 4940);
            EXPECT_TRUE(k.allowed(kT0, 1));
        }
        k.p = free_tier(a);
        EXPECT_FALSE(k.allowed(kT0 + kSec, 1));
    }
}

// 7r/s does not divide a second in whole microseconds: its bucket's units are 1/7 µs. GCRA keeps
// its time; the leaky bucket keeps its units, which 100r/s reads as microseconds (README).
TEST(TierChange, BucketUnitsOtherThanMicroseconds) {
    for (rl::Algo a : kBuckets) {
        SCOPED_TRACE(rl::algo_name(a));
        Key k(policy(a, 7, kSec, 6));
        ASSERT_TRUE(k.allowed(kT0, 7));
        k.p = policy(a, 100, kSec, 99);
        rl::Decision d = k.hit(kT0, 1);
        EXPECT_FALSE(d.allowed);
        EXPECT_EQ(d.retry_after_us, a == rl::Algo::leaky ? 6010000 : 10000);
    }
}

// The fixed window across periods: its count applies to the new tier's windows that may hold
// its requests, up to the one that holds the last of them.
TEST(TierChange, FixedWindowAcrossPeriods) {
    const rl::Algo f = rl::Algo::fixed;
    {
        Key k(policy(f, 60, kHour));  // 60 used, the last 20 minutes into the hour
        ASSERT_TRUE(k.allowed(kT0, 60));
        k.p = policy(f, 100, 15 * kMin);  // 100/15m: its window began at 15 minutes
        EXPECT_EQ(remaining(k, kT0 + kSec), 40);
        ASSERT_TRUE(k.allowed(kT0 + kSec, 40));
        rl::Decision d = k.hit(kT0 + 2 * kSec, 1);
        EXPECT_FALSE(d.allowed);
        EXPECT_EQ(d.retry_after_us, 10 * kMin - 2 * kSec);  // that window ends at 30 minutes
        EXPECT_EQ(remaining(k, kT0 + 10 * kMin), 100);
    }
    {
        Key k(policy(f, 100, 15 * kMin));
        ASSERT_TRUE(k.allowed(kT0, 100));
        k.p = policy(f, 60, kHour);  // 100 counted in this hour already
        rl::Decision d = k.hit(kT0 + kSec, 1);
        EXPECT_FALSE(d.allowed);
        EXPECT_EQ(d.retry_after_us, 40 * kMin - kSec);
        EXPECT_EQ(remaining(k, kT0 + 40 * kMin), 60);
    }
    {
        Key k(policy(f, 60, kHour));
        ASSERT_TRUE(k.allowed(kT0, 30));
        k.p = policy(f, 100, kSec);  // 100r/s: the 30 may all lie in this second
        EXPECT_EQ(remaining(k, kT0 + kSec / 2), 70);
        ASSERT_TRUE(k.allowed(kT0 + kSec / 2, 1));
        EXPECT_EQ(remaining(k, kT0 + kSec), 100);  // the next second is fresh
        // More than the new quota: rejected until the second of the last of them has passed,
        // not until the hour ends.
        Key w(policy(f, 60, kHour));
        ASSERT_TRUE(w.allowed(kT0, 60));
        w.p = policy(f, 50, kSec);
        rl::Decision d = w.hit(kT0 + kSec / 4, 1);
        EXPECT_FALSE(d.allowed);
        EXPECT_EQ(d.retry_after_us, 3 * kSec / 4);
        EXPECT_TRUE(w.allowed(kT0 + kSec, 50));
        Key later(policy(f, 60, kHour));
        ASSERT_TRUE(later.allowed(kT0, 60));
        later.p = policy(f, 50, kSec);
        EXPECT_EQ(remaining(later, kT0 + 5 * kMin), 50);  // the 60 lie in seconds long past
    }
}

// The sliding window across periods: its counts stand in the new tier's window that holds the
// last of them, and weigh in the one after.
TEST(TierChange, SlidingWindowAcrossPeriods) {
    const rl::Algo sl = rl::Algo::sliding;
    {
        Key k(policy(sl, 60, kHour));  // 60 used, the last 20 minutes into the hour
        ASSERT_TRUE(k.allowed(kT0, 60));
        k.p = policy(sl, 100, 15 * kMin);
        EXPECT_EQ(remaining(k, kT0 + kSec), 40);
        ASSERT_TRUE(k.allowed(kT0 + kSec, 40));
        EXPECT_FALSE(k.allowed(kT0 + 2 * kSec, 1));
        // The next quarter, 5 minutes in: the 100 weigh 2/3.
        EXPECT_EQ(remaining(k, kT0 + 15 * kMin), 33);
    }
    {
        Key k(policy(sl, 100, 15 * kMin));
        ASSERT_TRUE(k.allowed(kT0, 100));
        k.p = policy(sl, 60, kHour);  // 100 counted in this hour already
        EXPECT_FALSE(k.allowed(kT0 + kSec, 1));
    }
    {
        Key k(policy(sl, 60, kHour));
        ASSERT_TRUE(k.allowed(kT0, 30));
        k.p = policy(sl, 100, kSec);  // 100r/s: the 30 may all lie in this second
        EXPECT_EQ(remaining(k, kT0 + kSec / 2), 70);
        EXPECT_EQ(remaining(k, kT0 + 3 * kSec / 2), 85);  // then weigh 1/2 in the next
        EXPECT_EQ(remaining(k, kT0 + 2 * kSec), 100);     // and no more after it
        Key later(policy(sl, 60, kHour));
        ASSERT_TRUE(later.allowed(kT0, 60));
        later.p = policy(sl, 50, kSec);
        EXPECT_EQ(remaining(later, kT0 + 5 * kMin), 50);  // the 60 lie in seconds long past
    }
}

// Random tier changes, random traffic: since each change, a key never gets more than a fresh
// key of the new tier would (its burst plus its rate over the time, or its quota per window),
// and every Retry-After admits.
TEST(TierChange, NeverMoreThanAFreshKeyOfTheNewTier) {
    struct Tier {
        int64_t requests, period_us, burst;
    };
    const Tier kTiers[] = {{60, kHour, 59},     {5000, kHour, 4999}, {100, kSec, 99},
                           {100, 15 * kMin, 9}, {7, kSec, 3},        {1, kMin, 0}};
    std::mt19937_64 rng(1811);
    int64_t changes = 0, rejected = 0;
    for (rl::Algo a : {rl::Algo::gcra, rl::Algo::token, rl::Algo::leaky, rl::Algo::fixed, rl::Algo::sliding}) {
        for (int round = 0; round < 300; round++) {
            auto pick = [&] {
                const Tier& t = kTiers[rng() % 6];
                return policy(a, t.requests, t.period_us, rl::is_bucket(a) ? t.burst : 0);
            };
            Key k(pick());
            int64_t t = kT0 + static_cast<int64_t>(rng() % static_cast<uint64_t>(kHour));
            for (int change = 0; change < 8; change++) {
                k.p = pick();
                changes++;
                const int64_t since = t;
                int64_t admitted = 0;
                for (int i = 0; i < 40; i++) {
                    int64_t step = k.p.period_us / k.p.requests;
                    t += static_cast<int64_t>(rng() % static_cast<uint64_t>(rng() % 4 == 0 ? 3 * step : step / 8 + 1));
                    int64_t cost = 1 + static_cast<int64_t>(rng() % static_cast<uint64_t>(k.p.capacity()));
                    Key before = k;
                    rl::Decision d = k.hit(t, cost);
                    if (d.allowed) {
                        admitted += cost;
                    } else {
                        rejected++;
                        ASSERT_GT(d.retry_after_us, 0);
                        ASSERT_TRUE(before.allowed(t + d.retry_after_us, cost)) << rl::algo_name(a) << " round " << round;
                    }
                    int64_t bound;
                    if (rl::is_bucket(a)) {
                        bound = k.p.burst + 1 + (t - since) / k.p.period_us * k.p.requests +
                                rl::ceil_div((t - since) % k.p.period_us * k.p.requests, k.p.period_us);
                    } else {
                        int64_t windows = (rl::window_start(t, k.p.period_us) - rl::window_start(since, k.p.period_us)) /
                                              k.p.period_us + 1;
                        bound = k.p.requests * windows;
                    }
                    ASSERT_LE(admitted, bound) << rl::algo_name(a) << " round " << round << " change " << change;
                }
            }
        }
    }
    EXPECT_GT(rejected, changes);
}

}  // namespace
