// Rejections remembered (src/core/keys/rejected.h) and the table lookup they use.
#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "algo_test_util.h"
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
    rl::Policy once = gcra(1, 1000000);
    once.algo = rl::Algo::sliding;  // no asker (take_ask): each entry ends with its wait
    hint = rl::raised_hint(hint, late, once);
    hint = rl::raised_hint(hint, early, once);  // an earlier end does not lower it
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

using rltest::kSec;

// Policies a Redis zone may have: the buckets (with a burst, delay, max_delay), windows.
std::vector<rl::Policy> policies() {
    using rl::Algo;
    std::vector<rl::Policy> ps;
    for (Algo a : {Algo::gcra, Algo::token, Algo::leaky}) {
        ps.push_back(rltest::policy(a, 100, kSec, 10));        // the flood's (issue 33)
        ps.push_back(rltest::policy(a, 1, 60 * kSec));         // 1r/m
        ps.push_back(rltest::policy(a, 7, 3 * kSec, 4));       // refill / token not whole
        ps.push_back(rltest::policy(a, 3000, 7 * kSec, 50));
        ps.push_back(rltest::policy(a, 10, kSec, 8, 2));                 // delay=2
        ps.push_back(rltest::policy(a, 10, kSec, 8, 2, 300000));         // max_delay: its own limit
        ps.push_back(rltest::policy(a, 10, kSec, 8, rl::kNoDelay, 0));
    }
    ps.push_back(rltest::policy(Algo::fixed, 10, kSec));
    ps.push_back(rltest::policy(Algo::fixed, 5, 60 * kSec));
    return ps;
}

// A key driven at about twice its rate, with costs 1..3, from t = 1 s.
template <typename F>
void drive(const rl::Policy& p, uint32_t seed, F&& each) {
    std::mt19937_64 rng(seed);
    rltest::Key key(p);
    int64_t now = kSec;
    int64_t gap = p.period_us / p.requests / 2 + 1;
    for (int i = 0; i < 400; i++) {
        now += static_cast<int64_t>(rng() % static_cast<uint64_t>(2 * gap)) + 1;
        int64_t cost = 1 + static_cast<int64_t>(rng() % 3);
        rl::State before = key.s;
        rl::Decision d = key.hit(now, cost);
        each(before, key.s, d, now, cost);
    }
}

TEST(RejectedAfterAdmission, TheNextOfItsCostIsRejectedUntilThen) {
    int installed = 0;
    for (const rl::Policy& p : policies()) {
        for (uint32_t seed = 1; seed <= 5; seed++) {
            drive(p, seed, [&](const rl::State&, const rl::State& after, const rl::Decision& d, int64_t now, int64_t cost) {
                rl::Decision r;
                bool left = rl::rejection_after_admission(d, p, cost, &r);
                if (!d.allowed) {
                    EXPECT_FALSE(left);
                    return;
                }
                rl::Decision next = rl::decide(after, p, now, cost);
                if (!left) {
                    // Nothing remembered: the next may fit, or its wait is not worth it (a
                    // sliding window's, a rounding's microsecond).
                    if (!next.allowed && next.retry_after_us != rl::kNever && rl::is_bucket(p.algo)) {
                        EXPECT_LE(next.retry_after_us, 1) << rl::algo_name(p.algo);
                    }
                    return;
                }
                installed++;
                ASSERT_TRUE(rl::rejection_cacheable(r, p, cost));
                EXPECT_FALSE(next.allowed);
                // Never longer than Redis's own wait, and at most a microsecond shorter.
                EXPECT_LE(r.retry_after_us, next.retry_after_us) << rl::algo_name(p.algo) << " " << p.requests;
                EXPECT_GE(r.retry_after_us, next.retry_after_us - 1) << rl::algo_name(p.algo) << " " << p.requests;
                EXPECT_FALSE(rl::decide(after, p, now + r.retry_after_us - 1, cost).allowed);
                EXPECT_EQ(r.remaining, d.remaining);
                EXPECT_EQ(r.reset_us, d.reset_us);
            });
        }
    }
    EXPECT_GT(installed, 1000);  // the drive holds keys at their limit
}

TEST(RejectedAfterAdmission, OnlyWhenNoRoomIsLeft) {
    rl::Policy p = rltest::policy(rl::Algo::gcra, 100, kSec, 10);
    rltest::Key key(p);
    rl::Decision r;
    rl::Decision d = key.hit(kSec);
    EXPECT_FALSE(rl::rejection_after_admission(d, p, 1, &r));  // 10 more fit
    for (int i = 0; i < 10; i++) d = key.hit(kSec);
    ASSERT_TRUE(d.allowed);
    ASSERT_TRUE(rl::rejection_after_admission(d, p, 1, &r));  // the burst is spent
    EXPECT_EQ(r.retry_after_us, 10000);                       // one unit frees every 10 ms
    EXPECT_FALSE(r.allowed);
    rl::Decision no = rl::decide(key.s, p, kSec, 1);
    EXPECT_FALSE(rl::rejection_after_admission(no, p, 1, &r));  // a rejection is Redis's own
    rl::Policy s = rltest::policy(rl::Algo::sliding, 1, kSec);
    rltest::Key sk(s);
    EXPECT_FALSE(rl::rejection_after_admission(sk.hit(kSec), s, 1, &r));  // not derived for this one
}

// The entry of a rejection Redis gave at `now` (sent then) for a request of `cost`.
rl::State remembered(const rl::Decision& d, int64_t now, int64_t cost) { return rl::remember_rejection(d, now, cost); }

TEST(RejectedAsk, OneAsksTheOthersAreRejectedMeanwhile) {
    rl::Policy p = rltest::policy(rl::Algo::gcra, 100, kSec, 10);
    rl::Decision r;
    r.retry_after_us = 4000;
    r.reset_us = 104000;
    rl::State s = remembered(r, kSec, 1);
    rl::Decision d;
    EXPECT_FALSE(rl::take_ask(s, p, kSec + 3999, 1, 2 * kSec));  // holds still: answered from it
    EXPECT_FALSE(rl::take_ask(s, p, kSec + 4000, 2, 2 * kSec));  // another cost asks on its own
    ASSERT_TRUE(rl::take_ask(s, p, kSec + 4000, 1, 2 * kSec));   // ran out: this one asks
    EXPECT_TRUE(rl::asking(s));
    EXPECT_FALSE(rl::take_ask(s, p, kSec + 4001, 1, 2 * kSec));  // one at a time
    ASSERT_TRUE(rl::cached_rejection(s, p, kSec + 4001, 1, &d)); // the others: rejected
    // ... until another unit could free (10 ms after the first, less a microsecond), counted
    // down from now; the reset as Redis said
    EXPECT_EQ(d.retry_after_us, 4000 + 10000 - 1 - 4001);
    EXPECT_EQ(d.reset_us, 104000 - 4001);
    EXPECT_FALSE(rl::cached_rejection(s, p, kSec + 4000 + 10000 - 1, 1, &d));
    EXPECT_FALSE(rl::take_ask(s, p, kSec + 4000 + 10000 - 1, 1, 2 * kSec));  // then all ask: the asker may be lost
}

TEST(RejectedAsk, AtMostTheTimeout) {
    rl::Policy p = rltest::policy(rl::Algo::gcra, 1, 60 * kSec);
    rl::Decision r;
    r.retry_after_us = 30 * kSec;
    r.reset_us = 30 * kSec;
    rl::State s = remembered(r, 0, 1);
    ASSERT_TRUE(rl::take_ask(s, p, 30 * kSec + 5, 1, 2 * kSec));
    rl::Decision d;
    ASSERT_TRUE(rl::cached_rejection(s, p, 30 * kSec + 5, 1, &d));
    EXPECT_EQ(d.retry_after_us, 2 * kSec);  // the timeout: a lost reply is not waited for longer
    EXPECT_GE(d.reset_us, d.retry_after_us);
    EXPECT_FALSE(rl::cached_rejection(s, p, 32 * kSec + 5, 1, &d));
    EXPECT_FALSE(rl::take_ask(s, p, 32 * kSec + 5, 1, 2 * kSec));
    EXPECT_FALSE(rl::take_ask(s, p, 33 * kSec, 1, 0));  // no timeout: none
}

TEST(RejectedAsk, NotForWindowsNorLongAfter) {
    rl::Decision r;
    r.retry_after_us = 1000;
    r.reset_us = 1000;
    for (rl::Algo a : {rl::Algo::fixed, rl::Algo::sliding, rl::Algo::log}) {
        rl::Policy p = rltest::policy(a, 10, kSec);
        rl::State s = remembered(r, 0, 1);
        EXPECT_FALSE(rl::take_ask(s, p, 1000, 1, kSec)) << rl::algo_name(a);  // a window frees many at once
        EXPECT_EQ(rl::entry_end(s, p), 1000);
    }
    rl::Policy p = rltest::policy(rl::Algo::gcra, 10, kSec);
    rl::State s = remembered(r, 0, 1);
    EXPECT_EQ(rl::entry_end(s, p), 1000 + 100000 - 1);  // the hint covers the asker's span
    EXPECT_FALSE(rl::take_ask(s, p, 1000 + 100000 - 1, 1, kSec));  // more than one may fit by now
    rl::State none;
    EXPECT_FALSE(rl::take_ask(none, p, 5, 1, kSec));  // nothing remembered
}

// Exactness: while the others are rejected (take_ask's span), Redis admits at most one request
// of that cost, the asker's, whenever in the span it arrives: rejecting the others rejects
// nothing Redis would admit.
TEST(RejectedAsk, TheOthersWouldBeRejected) {
    int asked = 0;
    for (const rl::Policy& p : policies()) {
        for (uint32_t seed = 1; seed <= 5; seed++) {
            std::mt19937_64 rng(seed * 7919);
            auto check = [&](const rl::State& key, const rl::Decision& d, int64_t now, int64_t cost) {
                rl::State e;
                if (!d.allowed && rl::rejection_cacheable(d, p, cost)) {
                    e = rl::remember_rejection(d, now, cost);
                } else {
                    rl::Decision r;
                    if (!rl::rejection_after_admission(d, p, cost, &r)) return;
                    e = rl::remember_rejection(r, now, cost);
                }
                int64_t ran_out = e.a;
                if (!rl::take_ask(e, p, ran_out, cost, 1000 * kSec)) return;
                asked++;
                int64_t span = e.a - ran_out;  // the others are rejected in [ran_out, e.a)
                ASSERT_GT(span, 0);
                int64_t t1 = ran_out + static_cast<int64_t>(rng() % static_cast<uint64_t>(span));
                rl::Decision first = rl::decide(key, p, t1, cost);
                ASSERT_TRUE(first.allowed) << rl::algo_name(p.algo);  // the asker's unit is there
                EXPECT_FALSE(rl::decide(first.next, p, e.a - 1, cost).allowed) << rl::algo_name(p.algo);
                EXPECT_FALSE(rl::decide(first.next, p, t1, cost).allowed);
            };
            drive(p, seed, [&](const rl::State& before, const rl::State& after, const rl::Decision& d, int64_t now,
                               int64_t cost) {
                (void)before;
                check(after, d, now, cost);
            });
        }
    }
    EXPECT_GT(asked, 1000);
}

}  // namespace
