// Shaping (delay=, max_delay=) on gcra, token and leaky: the delays limit_req computes for the
// same rate, burst and delay, max_delay's rejections and their exact Retry-After, and the
// window algorithms left alone.
#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "algo_test_util.h"
#include "core/algo/delay.h"
#include "core/algo/exact_math.h"
#include "core/reconcile/sync.h"

namespace {

using rltest::Key;
using rltest::kSec;
using rltest::policy;

constexpr int64_t kMs = 1000;
constexpr int64_t t0 = 1700000000LL * kSec;

class Delay : public ::testing::TestWithParam<rl::Algo> {};

// The delays of requests arriving together, -1 for a rejection.
std::vector<int64_t> delays_at_once(Key& k, int64_t now, int n) {
    std::vector<int64_t> out;
    for (int i = 0; i < n; i++) {
        rl::Decision d = k.hit(now);
        out.push_back(d.allowed ? d.delay_us : -1);
    }
    return out;
}

// limit_req zone rate=10r/s, burst=5 delay=2: three pass at once, the next three wait 100, 200
// and 300 ms (limit_req: (excess - delay) / rate, excess in requests beyond the first), the
// seventh is beyond the burst.
TEST_P(Delay, SameDelaysAsLimitReq) {
    Key k(policy(GetParam(), 10, kSec, 5, 2));
    EXPECT_EQ(delays_at_once(k, t0, 7), (std::vector<int64_t>{0, 0, 0, 100 * kMs, 200 * kMs, 300 * kMs, -1}));
    EXPECT_EQ(rl::delay_bound(k.p), 300 * kMs);  // the longest of them: a full bucket's
    // 150 ms later one and a half requests drained: the next waits (6 - 1.5 + 1 - 3) * 100 ms
    // (limit_req: excess 4.5, delay (4.5 - 2) / 10r/s).
    rl::Decision d = k.hit(t0 + 150 * kMs);
    EXPECT_TRUE(d.allowed);
    EXPECT_EQ(d.delay_us, 250 * kMs);
    EXPECT_EQ(d.remaining, 0);  // the state after the request, as the headers show it
    // A rejection is what it was without delay=: its retry is when the burst has room.
    d = k.hit(t0 + 150 * kMs);
    EXPECT_FALSE(d.allowed);
    EXPECT_EQ(d.retry_after_us, 50 * kMs);
}

// delay=0 is limit_req without nodelay: every request beyond the first waits its turn.
TEST_P(Delay, DelayZeroSpacesEveryExcessRequest) {
    Key k(policy(GetParam(), 10, kSec, 3, 0));
    EXPECT_EQ(delays_at_once(k, t0, 5), (std::vector<int64_t>{0, 100 * kMs, 200 * kMs, 300 * kMs, -1}));
    // Requests that arrive at the rate never wait.
    Key paced(policy(GetParam(), 10, kSec, 3, 0));
    for (int i = 0; i < 20; i++) EXPECT_EQ(paced.hit(t0 + i * 100 * kMs).delay_us, 0) << i;
}

// nodelay (the default) and a delay at or beyond the burst never delay.
TEST_P(Delay, NodelayAndLargeDelayNeverWait) {
    for (int64_t delay : {rl::kNoDelay, int64_t{4}, int64_t{1000}}) {
        Key k(policy(GetParam(), 10, kSec, 4, delay));
        EXPECT_EQ(delays_at_once(k, t0, 6), (std::vector<int64_t>{0, 0, 0, 0, 0, -1})) << delay;
    }
}

// A third of a second per request: delays are exact microseconds, rounded up.
TEST_P(Delay, FractionalRatesRoundUp) {
    Key k(policy(GetParam(), 3, kSec, 2, 0));
    EXPECT_EQ(delays_at_once(k, t0, 3), (std::vector<int64_t>{0, 333334, 666667}));
}

// A quantity waits for all its units: (level after - (delay + 1) requests) / rate.
TEST_P(Delay, QuantityWaitsForAllItsUnits) {
    Key k(policy(GetParam(), 10, kSec, 9, 1));
    rl::Decision d = k.hit(t0, 4);
    EXPECT_TRUE(d.allowed);
    EXPECT_EQ(d.delay_us, 200 * kMs);
    EXPECT_EQ(d.remaining, 6);
}

// max_delay: a request that would wait longer is rejected, consuming nothing; its retry is
// exactly when the same request would wait max_delay.
TEST_P(Delay, MaxDelayRejectsWithExactRetry) {
    Key k(policy(GetParam(), 10, kSec, 5, 0, 250 * kMs));
    EXPECT_EQ(delays_at_once(k, t0, 3), (std::vector<int64_t>{0, 100 * kMs, 200 * kMs}));
    rl::State before = k.s;
    rl::Decision d = k.hit(t0);
    EXPECT_FALSE(d.allowed);
    EXPECT_EQ(d.retry_after_us, 50 * kMs);  // would wait 300 ms, 50 beyond max_delay
    EXPECT_EQ(d.remaining, 3);              // the burst had room: max_delay rejected it
    EXPECT_EQ(d.delay_us, 0);
    EXPECT_EQ(k.s, before);
    EXPECT_FALSE(k.allowed(t0 + 50 * kMs - 1));
    d = k.hit(t0 + 50 * kMs);
    EXPECT_TRUE(d.allowed);
    EXPECT_EQ(d.delay_us, 250 * kMs);
}

// A max_delay no request can reach (the burst rejects first) changes nothing.
TEST_P(Delay, MaxDelayBeyondTheBurstIsNoLimit) {
    rl::Policy p = policy(GetParam(), 10, kSec, 3, 0, 300 * kMs);
    EXPECT_EQ(p.max_delay_units, rl::kNoDelay);
    Key k(p);
    EXPECT_EQ(delays_at_once(k, t0, 5), (std::vector<int64_t>{0, 100 * kMs, 200 * kMs, 300 * kMs, -1}));
    EXPECT_NE(policy(GetParam(), 10, kSec, 3, 0, 299 * kMs).max_delay_units, rl::kNoDelay);
}

// A quantity that waits longer than max_delay even on an empty bucket is never admitted.
TEST_P(Delay, QuantityBeyondMaxDelayIsNever) {
    Key k(policy(GetParam(), 10, kSec, 9, 1, 250 * kMs));
    rl::Decision d = k.hit(t0, 5);  // waits 300 ms on an empty bucket
    EXPECT_FALSE(d.allowed);
    EXPECT_EQ(d.retry_after_us, rl::kNever);
    d = k.hit(t0, 4);
    EXPECT_TRUE(d.allowed);
    EXPECT_EQ(d.delay_us, 200 * kMs);
}

// Random states, rates, delays and quantities: the delay is the formula, max_delay holds,
// and a rejection's retry is exact (rejected 1 us before it, admitted at it, within max_delay).
TEST_P(Delay, RandomTimelinesKeepTheirPromises) {
    std::mt19937_64 rng(11);
    int64_t delayed = 0, late = 0;
    for (int round = 0; round < 300; round++) {
        int64_t req = 1 + static_cast<int64_t>(rng() % 50), per = 1 + static_cast<int64_t>(rng() % (3 * kSec));
        int64_t burst = static_cast<int64_t>(rng() % 12), delay = static_cast<int64_t>(rng() % 14) - 1;
        int64_t max_delay = rng() % 3 == 0 ? 0 : 1 + static_cast<int64_t>(rng() % static_cast<uint64_t>(per));
        Key k(policy(GetParam(), req, per, burst, delay, max_delay));
        const rl::Policy& p = k.p;
        int64_t now = t0;
        for (int i = 0; i < 40; i++) {
            now += rng() % 2 == 0 ? 0 : static_cast<int64_t>(rng() % static_cast<uint64_t>(per / req + 1));
            int64_t cost = 1 + static_cast<int64_t>(rng() % 3);
            Key probe = k;
            rl::Decision d = k.hit(now, cost);
            if (d.allowed) {
                if (p.max_delay_units != rl::kNoDelay) {
                    ASSERT_LE(d.delay_us, p.max_delay_us);
                }
                if (delay < 0 || delay >= burst) {
                    ASSERT_EQ(d.delay_us, 0);
                }
                ASSERT_LE(d.delay_us, rl::delay_bound(p));  // what a Redis reply's delay is cut to
                delayed += d.delay_us > 0;
                continue;
            }
            if (d.retry_after_us == rl::kNever) continue;
            late++;
            Key before = probe;
            ASSERT_FALSE(before.allowed(now + d.retry_after_us - 1, cost)) << round << " " << i;
            rl::Decision later = probe.hit(now + d.retry_after_us, cost);
            ASSERT_TRUE(later.allowed) << round << " " << i;
            if (p.max_delay_units != rl::kNoDelay) {
                ASSERT_LE(later.delay_us, p.max_delay_us);
            }
        }
    }
    EXPECT_GT(delayed, 500);
    EXPECT_GT(late, 200);
}

INSTANTIATE_TEST_SUITE_P(Buckets, Delay, ::testing::Values(rl::Algo::gcra, rl::Algo::token, rl::Algo::leaky),
                         [](const ::testing::TestParamInfo<rl::Algo>& p) {
                             return std::string(rl::algo_name(p.param));
                         });

// The window algorithms have no bucket to shape: delay= is refused by the configuration, and
// a policy that carries one anyway delays nothing.
TEST(DelayWindows, NeverWait) {
    for (rl::Algo a : {rl::Algo::fixed, rl::Algo::sliding, rl::Algo::log}) {
        rl::Policy p = policy(a, 2, kSec, 0, 0, 100 * kMs);
        EXPECT_EQ(p.delay_level, rl::kNoDelay);
        EXPECT_EQ(p.max_delay_units, rl::kNoDelay);
        Key k(p);
        EXPECT_EQ(delays_at_once(k, t0, 3), (std::vector<int64_t>{0, 0, -1})) << rl::algo_name(a);
    }
}

// Sync zones' grants count units: a shaped policy grants as the same policy unshaped (its
// max_delay would otherwise refuse units the bucket holds).
TEST(DelaySync, GrantsAreUnshaped) {
    rl::Policy shaped = policy(rl::Algo::gcra, 10, kSec, 9, 0, 150 * kMs);
    rl::Policy plain = policy(rl::Algo::gcra, 10, kSec, 9);
    Key k(plain);
    for (int i = 0; i < 3; i++) ASSERT_TRUE(k.allowed(t0));
    for (int64_t want : {1, 4, 7}) {
        rl::Grant a = rl::grant(k.s, shaped, t0, want, 1, 1), b = rl::grant(k.s, plain, t0, want, 1, 1);
        EXPECT_EQ(a.granted, b.granted) << want;
        EXPECT_EQ(a.granted, want) << want;
        EXPECT_EQ(a.decision.next, b.decision.next) << want;
        EXPECT_EQ(a.decision.delay_us, 0) << want;
    }
}

}  // namespace
