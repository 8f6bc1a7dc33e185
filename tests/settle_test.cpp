// rl::charge and kNeedOne (settle.h): a settle's charge goes past the limit as far as one more
// capacity, never further; later requests wait for the debt, with an exact retry; a request
// of quantity 0 with settle= needs room for one unit and takes none. (The script's charge mode
// is compared with them in redis_diff_test.cpp.)
#include "core/algo/settle.h"

#include <gtest/gtest.h>

#include "algo_test_util.h"

namespace {

using rltest::Key;
using rltest::kSec;
using rltest::policy;

const rl::Algo kAll[] = {rl::Algo::gcra, rl::Algo::token, rl::Algo::leaky,
                         rl::Algo::fixed, rl::Algo::sliding, rl::Algo::log};

int64_t charge(Key& k, int64_t now, int64_t cost) {
    return rl::charge(k.s, k.ring.data(), k.p, rl::debt_policy(k.p), now, cost);
}

TEST(Settle, DebtPolicyDoublesTheCapacity) {
    for (rl::Algo algo : kAll) {
        rl::Policy p = policy(algo, 10, kSec, rl::is_bucket(algo) ? 4 : 0, 2, 0);
        rl::Policy d = rl::debt_policy(p);
        EXPECT_EQ(d.capacity(), algo == rl::Algo::log ? p.capacity() : 2 * p.capacity()) << rl::algo_name(algo);
        EXPECT_EQ(d.delay_level, rl::kNoDelay) << rl::algo_name(algo);  // a charge never shapes
        EXPECT_EQ(d.period_us, p.period_us);
        if (rl::is_bucket(algo)) {
            EXPECT_EQ(d.refill * p.token, p.refill * d.token) << "the same rate";
        }
    }
}

// A charge past the limit: later requests are rejected until the debt is paid, and the retry
// says exactly when.
TEST(Settle, ChargeGoesIntoDebtAtMostOneCapacity) {
    const int64_t t = 1700000000LL * kSec;
    for (rl::Algo algo : kAll) {
        Key k(policy(algo, 10, kSec, rl::is_bucket(algo) ? 4 : 0));
        int64_t cap = k.p.capacity();
        ASSERT_TRUE(k.allowed(t, 1));
        int64_t want = algo == rl::Algo::log ? cap - 1 : 2 * cap - 1;  // what room there is
        EXPECT_EQ(charge(k, t, 1000), want) << rl::algo_name(algo);
        EXPECT_EQ(charge(k, t, 1), 0) << rl::algo_name(algo) << ": nothing past the debt";
        rl::Decision d = k.hit(t, 1);
        ASSERT_FALSE(d.allowed) << rl::algo_name(algo);
        ASSERT_GT(d.retry_after_us, 0) << rl::algo_name(algo);
        // Exact: rejected a microsecond before the retry, admitted at it.
        EXPECT_FALSE(k.hit(t + d.retry_after_us - 1, 1).allowed) << rl::algo_name(algo);
        EXPECT_TRUE(k.hit(t + d.retry_after_us, 1).allowed) << rl::algo_name(algo);
        if (rl::is_bucket(algo)) {
            // One unit drains in 0.1 s; a full bucket in debt (5 units past full) takes 0.5 s more.
            EXPECT_EQ(d.retry_after_us, (cap + 1) * kSec / 10) << rl::algo_name(algo);
        }
    }
}

// A charge within the limit is the same as having asked for it at the decision.
TEST(Settle, ChargeWithinTheLimitIsAnAdmission) {
    const int64_t t = 1700000000LL * kSec;
    for (rl::Algo algo : kAll) {
        Key a(policy(algo, 10, kSec, rl::is_bucket(algo) ? 4 : 0)), b = a;
        ASSERT_TRUE(a.allowed(t, 3));
        ASSERT_TRUE(b.allowed(t, 1));
        EXPECT_EQ(charge(b, t, 2), 2) << rl::algo_name(algo);
        EXPECT_EQ(a.s, b.s) << rl::algo_name(algo);
        EXPECT_EQ(a.hit(t + kSec / 7, 0).remaining, b.hit(t + kSec / 7, 0).remaining) << rl::algo_name(algo);
    }
}

TEST(Settle, ChargeOfNothingChangesNothing) {
    const int64_t t = 1700000000LL * kSec;
    for (rl::Algo algo : kAll) {
        Key k(policy(algo, 10, kSec, rl::is_bucket(algo) ? 4 : 0));
        ASSERT_TRUE(k.allowed(t, 2));
        rl::State before = k.s;
        EXPECT_EQ(charge(k, t, 0), 0);
        EXPECT_EQ(charge(k, t, -4), 0);
        EXPECT_EQ(k.s, before) << rl::algo_name(algo);
    }
}

// quantity=0 with settle=: admitted only with room for one unit, taking none.
TEST(Settle, NeedOneTakesNothingButNeedsAUnit) {
    const int64_t t = 1700000000LL * kSec;
    for (rl::Algo algo : kAll) {
        Key k(policy(algo, 5, 60 * kSec, rl::is_bucket(algo) ? 4 : 0));
        int64_t cap = k.p.capacity();
        for (int i = 0; i < 20; i++) {
            rl::Decision d = k.hit(t, rl::kNeedOne);
            ASSERT_TRUE(d.allowed) << rl::algo_name(algo);
            EXPECT_EQ(d.remaining, cap) << rl::algo_name(algo);  // nothing taken
        }
        ASSERT_TRUE(k.allowed(t, cap));
        rl::Decision d = k.hit(t, rl::kNeedOne);
        EXPECT_FALSE(d.allowed) << rl::algo_name(algo) << ": a full key rejects it";
        EXPECT_GT(d.retry_after_us, 0) << rl::algo_name(algo);
        EXPECT_EQ(k.hit(t + d.retry_after_us, rl::kNeedOne).allowed, true) << rl::algo_name(algo);
    }
}

}  // namespace
