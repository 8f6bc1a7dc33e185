// A key's state outliving its policy (nginx reloaded with another rate: shared memory and
// Redis keep the states): every algorithm must still decide sanely. Found by the Redis
// differential test: the sliding window took a window begun under the old period for a clock
// that went back, and answered a negative Retry-After.
#include <gtest/gtest.h>

#include <random>

#include "algo_test_util.h"

namespace {

using rltest::Key;
using rltest::kSec;
using rltest::policy;

TEST(PolicyChange, SlidingWindowBegunUnderAnotherPeriod) {
    const int64_t day = 86400 * kSec;
    Key k(policy(rl::Algo::sliding, 10, day));
    k.s = rl::State{1600000149664917, 6, 4};  // counted under a 7 s period, the last at a.
    const int64_t now = 1600038408883369;     // 38259 s later, in the same day
    const int64_t day_start = 1600000149664917 / day * day;
    // The counts fall in the day of their last admission: 6 * w + 4 + 1, w = (P - e) / P with e
    // counted from that day's start (it was from the 7 s window's: a negative Retry-After).
    rl::Decision d = k.hit(now, 1);
    EXPECT_TRUE(d.allowed);
    EXPECT_GT(d.reset_us, 0);
    k.s = rl::State{1600000149664917, 6, 4};
    d = k.hit(now, 6);  // 4 + 6 leaves no room for the previous 6: in the next day, where 4 weigh
    EXPECT_FALSE(d.allowed);
    EXPECT_EQ(d.retry_after_us, day_start + day - now);
    Key on_time = k;
    EXPECT_TRUE(on_time.allowed(now + d.retry_after_us, 6));
    EXPECT_FALSE(k.allowed(now + d.retry_after_us - 1, 6));
}

// Random states left by one policy, then decided under another: no negative numbers, and a
// rejection's Retry-After admits.
TEST(PolicyChange, EveryAlgorithmStaysSane) {
    const rl::Algo kAll[] = {rl::Algo::gcra, rl::Algo::token, rl::Algo::leaky, rl::Algo::fixed, rl::Algo::sliding};
    const int64_t kRequests[] = {1, 3, 10, 999, 1000000000};
    const int64_t kPeriods[] = {333333, kSec, 7 * kSec, 3600 * kSec, 86400 * kSec};
    std::mt19937_64 rng(77);
    int64_t checked = 0;
    for (rl::Algo algo : kAll) {
        for (int round = 0; round < 400; round++) {
            auto pick = [&] {
                return policy(algo, kRequests[rng() % 5], kPeriods[rng() % 5], rl::is_bucket(algo) ? rng() % 20 : 0);
            };
            Key k(pick());
            int64_t t = 1700000000LL * kSec + static_cast<int64_t>(rng() % (100 * kSec));
            for (int i = 0; i < 20; i++) {
                k.hit(t, 1 + static_cast<int64_t>(rng() % static_cast<uint64_t>(k.p.capacity())));
                t += static_cast<int64_t>(rng() % static_cast<uint64_t>(k.p.period_us / 4 + 1));
            }
            k.p = pick();
            for (int i = 0; i < 20; i++) {
                t += static_cast<int64_t>(rng() % static_cast<uint64_t>(k.p.period_us / 4 + 1));
                int64_t cost = 1 + static_cast<int64_t>(rng() % static_cast<uint64_t>(k.p.capacity()));
                Key before = k;
                rl::Decision d = k.hit(t, cost);
                ASSERT_GE(d.remaining, 0) << rl::algo_name(algo) << " round " << round;
                ASSERT_GE(d.reset_us, 0) << rl::algo_name(algo) << " round " << round;
                if (!d.allowed) {
                    ASSERT_GT(d.retry_after_us, 0) << rl::algo_name(algo) << " round " << round;
                    ASSERT_TRUE(before.allowed(t + d.retry_after_us, cost)) << rl::algo_name(algo) << " round " << round;
                    checked++;
                }
            }
        }
    }
    EXPECT_GT(checked, 1000);
}

}  // namespace
