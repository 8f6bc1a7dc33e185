// Rejections remembered (src/core/keys/rejected.h) and the table lookup they use.
#include <gtest/gtest.h>

#include <vector>

#include "core/algo/concurrency.h"
#include "core/keys/rejected.h"
#include "core/keys/slot_table.h"

namespace {

rl::Policy gcra(int64_t requests, int64_t period_us) {
    rl::Policy p;
    p.requests = requests;
    p.period_us = period_us;
    EXPECT_EQ(rl::finish_policy(p), nullptr);
    return p;
}

rl::Decision rejection(int64_t retry_us, int64_t reset_us) {
    rl::Decision d;
    d.retry_after_us = retry_us;
    d.reset_us = reset_us;
    return d;
}

TEST(Rejected, HoldsUntilRetryAfterThenNot) {
    rl::Policy p = gcra(1, 60000000);
    rl::State s = rl::remember_rejection(rejection(57000000, 58000000), 1000, 1);
    rl::Decision d;
    ASSERT_TRUE(rl::cached_rejection(s, p, 1000 + 7000000, 1, &d));
    EXPECT_FALSE(d.allowed);
    EXPECT_EQ(d.retry_after_us, 50000000);  // counted down
    EXPECT_EQ(d.reset_us, 51000000);
    EXPECT_EQ(d.limit, 1);
    EXPECT_EQ(d.remaining, 0);
    EXPECT_FALSE(rl::cached_rejection(s, p, 1000 + 57000000, 1, &d));  // Redis may admit now
}

TEST(Rejected, OnlyTheSameCost) {
    rl::Policy p = gcra(10, 1000000);
    rl::Decision r = rejection(500000, 900000);
    r.remaining = 2;
    rl::State s = rl::remember_rejection(r, 0, 3);
    rl::Decision d;
    EXPECT_TRUE(rl::cached_rejection(s, p, 10, 3, &d));
    EXPECT_EQ(d.remaining, 2);  // as Redis reported it
    EXPECT_FALSE(rl::cached_rejection(s, p, 10, 5, &d));  // may wait longer, or never fit
    EXPECT_FALSE(rl::cached_rejection(s, p, 10, 2, &d));  // a cheaper request may fit
    EXPECT_FALSE(rl::cached_rejection(s, p, 10, 0, &d));  // a report is always asked
    EXPECT_FALSE(rl::cached_rejection(rl::State{}, p, 10, 1, &d));  // nothing remembered
}

TEST(Rejected, WhatIsWorthRemembering) {
    rl::Policy p = gcra(10, 1000000);
    EXPECT_TRUE(rl::rejection_cacheable(rejection(100, 100), p, 1));
    rl::Decision allowed = rejection(0, 0);
    allowed.allowed = true;
    EXPECT_FALSE(rl::rejection_cacheable(allowed, p, 1));
    EXPECT_FALSE(rl::rejection_cacheable(rejection(rl::kNever, 0), p, 1));  // never admitted: not a wait
    EXPECT_FALSE(rl::rejection_cacheable(rejection(100, 100), p, 0));
    rl::Policy c = p;
    c.algo = rl::Algo::concurrency;  // a slot may free at any moment
    EXPECT_FALSE(rl::rejection_cacheable(rejection(rl::kConcurrencyRetryUs, 0), c, 1));
}

TEST(TableFind, FindsWithoutCreatingOrReordering) {
    std::vector<char> mem(64 * 1024);
    rl::TableHeader* t = rl::table_format(mem.data(), mem.size(), rl::slot_size_for(0), 12345);
    ASSERT_NE(t, nullptr);
    rl::KeyHash a{1, 2}, b{3, 4};
    EXPECT_EQ(rl::table_find(t, a, 0), nullptr);
    EXPECT_EQ(t->used, 0u);
    rl::Slot* sa = rl::table_acquire(t, a, 0, nullptr);
    rl::table_acquire(t, b, 0, nullptr);
    uint32_t head = t->lru_head;
    EXPECT_EQ(rl::table_find(t, a, 0), sa);
    EXPECT_EQ(t->lru_head, head);  // b stays the most recently used
    EXPECT_EQ(rl::table_find(t, a, rl::kRejectedTag), nullptr);  // another slot of the same key
    EXPECT_EQ(t->used, 2u);
}

}  // namespace

namespace {

TEST(Rejected, AnEntryPerPolicy) {
    rl::KeyHash k{11, 22};
    rl::Policy a = gcra(10, 1000000), b = a;
    b.burst = 5;
    ASSERT_EQ(rl::finish_policy(b), nullptr);
    rl::Policy c = gcra(20, 1000000);
    EXPECT_TRUE(rl::rejection_key(k, a) == rl::rejection_key(k, a));
    EXPECT_FALSE(rl::rejection_key(k, a) == rl::rejection_key(k, b));  // another burst
    EXPECT_FALSE(rl::rejection_key(k, a) == rl::rejection_key(k, c));  // another rate (a tier)
    EXPECT_FALSE(rl::rejection_key(k, a) == rl::rejection_key(rl::KeyHash{11, 23}, a));
}

}  // namespace

namespace {

TEST(Rejected, AnEntryPerEpoch) {
    rl::KeyHash k{11, 22};
    rl::Policy a = gcra(10, 1000000);
    EXPECT_TRUE(rl::rejection_key(k, a, 3) == rl::rejection_key(k, a, 3));
    EXPECT_FALSE(rl::rejection_key(k, a, 3) == rl::rejection_key(k, a, 4));  // a connection failed since
}

}  // namespace

namespace {

TEST(RejectedHints, RaisedByEntriesAndClearedOnlyOncePassed) {
    int64_t hint = 0;
    EXPECT_FALSE(rl::hint_may_hold(hint, 1));  // nothing remembered: no lookup
    rl::State late = rl::remember_rejection(rejection(5000, 5000), 1000, 1);  // holds until 6000
    rl::State early = rl::remember_rejection(rejection(1000, 1000), 2000, 1);  // until 3000
    hint = rl::raised_hint(hint, late);
    hint = rl::raised_hint(hint, early);  // an earlier end does not lower it
    EXPECT_EQ(hint, 6000);
    rl::Decision d;
    for (int64_t now : {2000, 2999, 5999}) {  // every instant an entry holds, the hint says it may
        bool held = rl::cached_rejection(late, gcra(1, 1000000), now, 1, &d) ||
                    rl::cached_rejection(early, gcra(1, 1000000), now, 1, &d);
        EXPECT_TRUE(held);
        EXPECT_TRUE(rl::hint_may_hold(hint, now)) << now;
    }
    EXPECT_FALSE(rl::cached_rejection(late, gcra(1, 1000000), 6000, 1, &d));
    EXPECT_FALSE(rl::hint_may_hold(hint, 6000));  // passed with the last entry
}

TEST(RejectedHints, SpreadOverTheTableAndZeroedWhenLaidOut) {
    std::vector<char> mem(64 * 1024, 'x');
    rl::TableHeader* t = rl::table_format(mem.data(), mem.size(), rl::slot_size_for(0), 12345);
    ASSERT_NE(t, nullptr);
    ASSERT_EQ(sizeof(t->hints) / sizeof(t->hints[0]), rl::kRejectionHints);
    for (int64_t h : t->hints) EXPECT_EQ(h, 0);
    std::vector<int> seen(rl::kRejectionHints);
    uint64_t x = 0x243f6a8885a308d3ULL;
    for (int i = 0; i < 1600; i++) {
        x = x * 6364136223846793005ULL + 1442695040888963407ULL;
        size_t h = rl::rejection_hint(rl::KeyHash{x, x * 0x9e3779b97f4a7c15ULL});
        ASSERT_LT(h, rl::kRejectionHints);
        seen[h]++;
    }
    for (int n : seen) EXPECT_GT(n, 50);  // ~100 each: a flooded key leaves most keys lock-free
}

}  // namespace
