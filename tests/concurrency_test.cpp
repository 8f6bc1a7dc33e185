// In-flight slots: the decision and who holds them (src/core/algo/concurrency.h).
#include <gtest/gtest.h>

#include "core/algo/concurrency.h"
#include "core/algo/decide.h"
#include "core/algo/refund.h"

namespace {

rl::Policy conc(int64_t n) {
    rl::Policy p;
    p.algo = rl::Algo::concurrency;
    p.requests = n;
    p.period_us = 30000000;
    EXPECT_EQ(rl::finish_policy(p), nullptr);
    return p;
}

TEST(Concurrency, TakesUpToTheLimitThenRejects) {
    rl::Policy p = conc(3);
    rl::State s;
    for (int i = 0; i < 3; i++) {
        rl::Decision d = rl::decide(s, p, 0, 1);
        ASSERT_TRUE(d.allowed);
        EXPECT_EQ(d.remaining, 2 - i);
        EXPECT_EQ(d.reset_us, 0);
        s = d.next;
    }
    rl::Decision d = rl::decide(s, p, 0, 1);
    EXPECT_FALSE(d.allowed);
    EXPECT_EQ(d.retry_after_us, rl::kConcurrencyRetryUs);
    EXPECT_EQ(d.remaining, 0);
    EXPECT_EQ(d.next, s);  // a rejection takes nothing
    EXPECT_EQ(d.limit, 3);
}

TEST(Concurrency, ReleaseFreesASlotAndNeverGoesNegative) {
    rl::Policy p = conc(1);
    rl::State s = rl::decide(rl::State{}, p, 0, 1).next;
    EXPECT_FALSE(rl::decide(s, p, 5, 1).allowed);
    rl::refund(s, nullptr, p, 10, 0, 1);
    EXPECT_EQ(s.a, 0);
    rl::refund(s, nullptr, p, 10, 0, 1);  // a release of a slot the key lost (eviction)
    EXPECT_EQ(s.a, 0);
    EXPECT_TRUE(rl::decide(s, p, 11, 1).allowed);
}

TEST(Concurrency, CostZeroReportsAndCostOverLimitIsNever) {
    rl::Policy p = conc(2);
    rl::State s{2, 0, 0};
    rl::Decision d = rl::decide(s, p, 0, 0);
    EXPECT_TRUE(d.allowed);
    EXPECT_EQ(d.next, s);
    EXPECT_EQ(rl::decide(rl::State{}, p, 0, 3).retry_after_us, rl::kNever);
}

TEST(Holders, AddRemoveAndReapTheDead) {
    rl::Holders hs{};
    EXPECT_TRUE(rl::holders_add(hs, 100, 2));
    EXPECT_TRUE(rl::holders_add(hs, 200, 1));
    EXPECT_TRUE(rl::holders_add(hs, 100, 1));
    EXPECT_EQ(rl::holders_remove(hs, 100, 1), 1);
    EXPECT_EQ(rl::holders_remove(hs, 300, 1), 0);  // not a holder
    int64_t freed = rl::holders_reap(hs, [](int32_t pid) { return pid != 100; });
    EXPECT_EQ(freed, 2);
    EXPECT_EQ(rl::holders_reap(hs, [](int32_t) { return false; }), 1);  // 200's one
    EXPECT_EQ(rl::holders_reap(hs, [](int32_t) { return false; }), 0);
}

TEST(Holders, FullWhenEveryEntryIsAnotherProcess) {
    rl::Holders hs{};
    for (int i = 1; i <= rl::kHolders; i++) ASSERT_TRUE(rl::holders_add(hs, i, 1));
    EXPECT_FALSE(rl::holders_add(hs, 999, 1));
    EXPECT_TRUE(rl::holders_add(hs, 5, 1));  // an existing holder still counts more
    EXPECT_EQ(rl::holders_remove(hs, 3, 5), 1);  // gives back only what it held
    EXPECT_TRUE(rl::holders_add(hs, 999, 1));  // its entry is free again
}

}  // namespace
