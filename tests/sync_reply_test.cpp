// What a sync reply may say (src/core/reconcile/sync_reply.h, issue 23): the rule, the clock, a key's
// handling of a refused reply, the refresh of a rejecting view, and the clamp of a delta's
// time on Redis's side (sync_key).
#include "core/reconcile/sync_reply.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>

#include "algo_test_util.h"
#include "core/algo/decide.h"
#include "core/algo/exact_math.h"

namespace {

using rltest::kSec;
constexpr int64_t kT0 = 1763900000LL * kSec;
const rl::Algo kSyncAlgos[] = {rl::Algo::gcra, rl::Algo::token, rl::Algo::leaky, rl::Algo::fixed, rl::Algo::sliding};

rl::Policy pol(rl::Algo a, int64_t requests, int64_t period, int64_t burst = 0) {
    return rltest::policy(a, requests, period, rl::is_bucket(a) ? burst : 0);
}

rl::ReplyBounds bounds(int64_t hosts = 2) {
    rl::ReplyBounds b;
    b.hosts = hosts;
    b.interval_us = 100000;
    b.round_trip_us = 500000;
    return b;
}

rl::SyncItem item(const rl::Policy& p) {
    rl::SyncItem it;
    it.zone = "z";
    it.policy = &p;
    return it;
}

// The lease: 1r/m burst=2, sync=100ms: the longest wait is about the drain of the
// highest level the bound allows, never 2^52 us.
TEST(SyncReply, RetryBounded) {
    rl::Policy p = pol(rl::Algo::gcra, 1, 60 * kSec, 2);
    rl::ReplyBounds b = bounds(1);
    int64_t most = rl::reply_max_retry(p, b);
    // one host: a debt of (C + r (3T + L)) = 3 + 1 units on top of the 3 of the bucket: 7 minutes
    EXPECT_EQ(rl::reply_max_debt(p, b), 4);
    EXPECT_EQ(most, 7 * 60 * kSec);
    rl::SyncItem it = item(p);
    it.want = it.need = 1;
    rl::SyncResult r;
    r.retry_after_us = int64_t{1} << 52;
    EXPECT_EQ(rl::check_key_reply(p, it, r, kT0, b), rl::ReplyFault::retry);
    r.retry_after_us = most + 1;
    EXPECT_EQ(rl::check_key_reply(p, it, r, kT0, b), rl::ReplyFault::retry);
    r.retry_after_us = rl::kNever;  // a need within the capacity always fits some day
    EXPECT_EQ(rl::check_key_reply(p, it, r, kT0, b), rl::ReplyFault::retry);
    r.retry_after_us = most;
    EXPECT_EQ(rl::check_key_reply(p, it, r, kT0, b), rl::ReplyFault::none);
    r.retry_after_us = int64_t{1} << 52;
    r.granted = 1;  // granted: the retry says nothing
    EXPECT_EQ(rl::check_key_reply(p, it, r, kT0, b), rl::ReplyFault::none);
    r.granted = 2;  // more than asked
    EXPECT_EQ(rl::check_key_reply(p, it, r, kT0, b), rl::ReplyFault::granted);
    // windows: two periods
    rl::Policy w = pol(rl::Algo::sliding, 10, kSec);
    EXPECT_EQ(rl::reply_max_retry(w, b), 2 * kSec);
}

// Every genuine reply is within the rule: three hosts that admit what their views allow and
// send their deltas at once, Redis's replies from sync_key (the simulation of
// tests/sync_sim_test.cpp checks the same over its 1080 runs).
TEST(SyncReply, GenuineRepliesPass) {
    std::mt19937_64 rng(7);
    for (rl::Algo a : kSyncAlgos) {
        for (int64_t burst : {0, 4, 20}) {
            rl::Policy p = pol(a, 10, kSec, burst);
            rl::ReplyBounds b = bounds(3);
            rl::State global, view[3];
            int64_t now = kT0;
            for (int i = 0; i < 3000; i++) {
                now += static_cast<int64_t>(rng() % 40000);
                size_t h = rng() % 3;
                rl::SyncItem it = item(p);
                for (int64_t n = static_cast<int64_t>(rng() % 4); n > 0; n--) {
                    rl::Decision d = rl::decide(view[h], p, now, 1);
                    if (!d.allowed) break;
                    view[h] = d.next;
                    rl::delta_add(it.delta, p, rl::is_bucket(a) ? now : std::max(now, view[h].a), 1);
                }
                it.need = rng() % 3 == 0 ? 1 : 0;
                it.want = it.need + static_cast<int64_t>(rng() % 3);
                it.hosts = 3;
                rl::SyncResult r = rl::sync_key(global, it, now);
                ASSERT_EQ(rl::check_key_reply(p, it, r, now, b), rl::ReplyFault::none)
                    << rl::algo_name(a) << " burst " << burst << " step " << i << " state {" << r.global.a << ","
                    << r.global.b << "," << r.global.c << "} retry " << r.retry_after_us;
                global = view[h] = r.global;
            }
        }
    }
}

// The impossible states: refused.
TEST(SyncReply, ImpossibleStatesRefused) {
    const int64_t big = int64_t{1} << 52;
    rl::ReplyBounds b = bounds(2);
    rl::Policy g = pol(rl::Algo::gcra, 1, 60 * kSec, 2);
    rl::SyncItem it = item(g);
    rl::SyncResult r;
    r.global = rl::State{big, 0, 0};
    EXPECT_EQ(rl::check_key_reply(g, it, r, kT0, b), rl::ReplyFault::level);
    r.global = rl::State{kT0, big, 0};  // b: a remainder below refill
    EXPECT_EQ(rl::check_key_reply(g, it, r, kT0, b), rl::ReplyFault::level);
    r.global = rl::State{kT0 + 180 * kSec, 0, 0};  // full: 3 units of 60 s
    EXPECT_EQ(rl::check_key_reply(g, it, r, kT0, b), rl::ReplyFault::none);
    r.global = rl::State{kT0 + rl::reply_max_retry(g, b) + kSec, 0, 0};
    EXPECT_EQ(rl::check_key_reply(g, it, r, kT0, b), rl::ReplyFault::level);

    rl::Policy t = pol(rl::Algo::token, 1, 60 * kSec, 2);
    it = item(t);
    r.global = rl::State{-big, kT0, 1};
    EXPECT_EQ(rl::check_key_reply(t, it, r, kT0, b), rl::ReplyFault::level);
    r.global = rl::State{0, kT0 + 3600 * kSec, 1};  // refilled from an hour ahead: never drains
    EXPECT_EQ(rl::check_key_reply(t, it, r, kT0, b), rl::ReplyFault::level);
    r.global = rl::State{t.depth, kT0, 1};
    EXPECT_EQ(rl::check_key_reply(t, it, r, kT0, b), rl::ReplyFault::none);

    rl::Policy l = pol(rl::Algo::leaky, 1, 60 * kSec, 2);
    it = item(l);
    r.global = rl::State{-1, kT0, 0};
    EXPECT_EQ(rl::check_key_reply(l, it, r, kT0, b), rl::ReplyFault::level);
    r.global = rl::State{l.depth, kT0 + big / 4, 0};
    EXPECT_EQ(rl::check_key_reply(l, it, r, kT0, b), rl::ReplyFault::level);

    rl::Policy f = pol(rl::Algo::fixed, 3, 60 * kSec);
    it = item(f);
    int64_t w = rl::window_start(kT0, f.period_us);
    r.global = rl::State{w, 3, kT0};
    EXPECT_EQ(rl::check_key_reply(f, it, r, kT0, b), rl::ReplyFault::none);
    r.global = rl::State{w, 3 * 3 + 1, kT0};  // (H + 1) R at most
    EXPECT_EQ(rl::check_key_reply(f, it, r, kT0, b), rl::ReplyFault::window);
    r.global = rl::State{w, -1, kT0};
    EXPECT_EQ(rl::check_key_reply(f, it, r, kT0, b), rl::ReplyFault::window);
    r.global = rl::State{rl::window_start(big, f.period_us), 3, 0};  // the window of 2112
    EXPECT_EQ(rl::check_key_reply(f, it, r, kT0, b), rl::ReplyFault::window);
    r.global = rl::State{w + 1, 3, 0};  // not a window's start
    EXPECT_EQ(rl::check_key_reply(f, it, r, kT0, b), rl::ReplyFault::window);
    r.global = rl::State{w - 100 * f.period_us, 3, 0};  // a window long over: harmless
    EXPECT_EQ(rl::check_key_reply(f, it, r, kT0, b), rl::ReplyFault::none);

    rl::Policy s = pol(rl::Algo::sliding, 3, 60 * kSec);
    it = item(s);
    r.global = rl::State{kT0, 3, big};
    EXPECT_EQ(rl::check_key_reply(s, it, r, kT0, b), rl::ReplyFault::window);
    r.global = rl::State{kT0 + 3600 * kSec, 1, 1};
    EXPECT_EQ(rl::check_key_reply(s, it, r, kT0, b), rl::ReplyFault::window);
    r.global = rl::State{kT0, 3, 3};
    EXPECT_EQ(rl::check_key_reply(s, it, r, kT0, b), rl::ReplyFault::none);
}

// A refused reply stores nothing of it: the view is full (rejects, for at most the longest
// wait), plus what the host admitted since; a lease takes no grant and asks again soon.
TEST(SyncReply, RefusedKeyHandling) {
    rl::ReplyBounds b = bounds(2);
    for (rl::Algo a : kSyncAlgos) {
        rl::Policy p = pol(a, 1, 60 * kSec, 2);
        rl::SyncKeyState k;
        rl::SyncItem it = item(p);
        it.want = it.need = 1;
        rl::SyncResult r;
        r.global = rl::State{int64_t{1} << 51, 0, 0};
        if (a == rl::Algo::token) r.global = rl::State{-(int64_t{1} << 51), kT0, 1};
        r.retry_after_us = int64_t{1} << 52;
        r.granted = 0;
        rl::KeyReply kr = rl::take_key_reply(k, it, r, kT0, true, b);
        EXPECT_TRUE(kr.refused) << rl::algo_name(a);
        EXPECT_FALSE(kr.need_granted);
        EXPECT_EQ(k.retry_at, kT0 + b.interval_us) << rl::algo_name(a);
        rl::Decision d = rl::decide(k.view, p, kT0, 1);
        EXPECT_FALSE(d.allowed) << rl::algo_name(a);
        EXPECT_LE(d.retry_after_us, rl::reply_max_retry(p, b)) << rl::algo_name(a);
        EXPECT_GT(d.retry_after_us, 0) << rl::algo_name(a);
        // a genuine reply afterwards replaces it
        r = rl::SyncResult{};
        r.granted = 1;
        r.global = rl::decide(rl::State{}, p, kT0 + 1, 1).next;
        kr = rl::take_key_reply(k, it, r, kT0 + 1, true, b);
        EXPECT_FALSE(kr.refused);
        EXPECT_TRUE(kr.need_granted);
        EXPECT_EQ(k.retry_at, 0);
        EXPECT_EQ(k.view, r.global);
    }
}

// Redis's clock: a step beyond kMaxClockStep is refused, unless kClockConfirm replies in a row
// agree on it (the clock really moved); small drifts pass and follow.
TEST(SyncReply, Clock) {
    rl::SyncClock c;
    const int64_t local = kT0;
    EXPECT_TRUE(rl::accept_clock(c, kT0 + 2 * kSec, local));  // 2 s off the host's clock: fine
    EXPECT_EQ(c.offset, 2 * kSec);
    EXPECT_TRUE(rl::accept_clock(c, kT0 + 3 * kSec + 29 * kSec, local + kSec));
    EXPECT_FALSE(rl::accept_clock(c, rl::kExact, local + 2 * kSec));  // 2^52: the year 2112
    EXPECT_FALSE(rl::accept_clock(c, 0, local + 3 * kSec));          // 1970
    EXPECT_EQ(c.offset, 31 * kSec);                                  // unchanged
    EXPECT_TRUE(rl::accept_clock(c, local + 4 * kSec + 31 * kSec, local + 4 * kSec));
    // a real step of an hour: accepted on the third reply that says so
    EXPECT_FALSE(rl::accept_clock(c, local + 3600 * kSec, local + 5 * kSec));
    EXPECT_FALSE(rl::accept_clock(c, local + 3601 * kSec, local + 6 * kSec));
    EXPECT_TRUE(rl::accept_clock(c, local + 3602 * kSec, local + 7 * kSec));
    EXPECT_EQ(c.offset, 3595 * kSec);
    // one wild reply between two of a step starts the count again
    EXPECT_FALSE(rl::accept_clock(c, local, local + 8 * kSec));
    EXPECT_FALSE(rl::accept_clock(c, rl::kExact, local + 9 * kSec));
    EXPECT_FALSE(rl::accept_clock(c, local + 10 * kSec, local + 10 * kSec));
    EXPECT_EQ(c.offset, 3595 * kSec);
}

// A rejecting view asks Redis again at most once per kRefreshIntervals intervals.
TEST(SyncReply, RefreshRateLimited) {
    int64_t at = 0;
    const int64_t T = 100000;
    int n = 0;
    for (int64_t now = kT0; now < kT0 + 10 * kSec; now += 1000) n += rl::refresh_due(at, now, T);
    EXPECT_EQ(n, 10 * kSec / (rl::kRefreshIntervals * T));
    at = kT0 + 3600 * kSec;  // set by a clock far ahead: not a wait of an hour
    EXPECT_TRUE(rl::refresh_due(at, kT0, T));
}

// Redis's side: a delta's time within Redis's clock (clamp_delta, in sync_key and the Lua).
TEST(SyncReply, DeltaClampedToRedisClock) {
    const int64_t P = 60 * kSec;
    rl::Policy f = pol(rl::Algo::fixed, 3, P);
    const int64_t w = rl::window_start(kT0, P);
    rl::SyncItem it = item(f);
    // repro 3: a host whose clock says 2112 sends its window: counted in Redis's window
    it.delta = rl::Delta{4, 1, rl::window_start(rl::kExact, P)};
    rl::SyncResult r = rl::sync_key(rl::State{}, it, kT0);
    EXPECT_EQ(r.global.a, w);
    EXPECT_EQ(r.global.b, 5);
    rl::Decision d;
    rl::sync_key(rl::State{}, it, kT0, &d);
    EXPECT_LE(d.reset_us, P);  // the TTL of its key: within its window
    // a delta of windows over: nothing
    it.delta = rl::Delta{4, 1, w - 2 * P};
    EXPECT_EQ(rl::sync_key(rl::State{}, it, kT0).global, rl::State{});
    // the previous window: kept as the previous count
    rl::Policy s = pol(rl::Algo::sliding, 3, P);
    it = item(s);
    it.delta = rl::Delta{2, 1, w - P};
    r = rl::sync_key(rl::State{}, it, kT0);
    EXPECT_EQ(r.global.c, 2);  // counted in the previous window (the state's own: its a)
    EXPECT_EQ(r.global.b, 1);
    EXPECT_EQ(rl::window_start(r.global.a, P), w - P);
    // buckets: poured at most a period back, never ahead of Redis
    rl::Policy g = pol(rl::Algo::gcra, 1, P, 2);
    it = item(g);
    it.delta = rl::Delta{1, 0, rl::kExact};
    r = rl::sync_key(rl::State{}, it, kT0);
    EXPECT_EQ(r.global.a, kT0 + P);  // one unit poured now
    it.delta = rl::Delta{1, 0, 0};
    r = rl::sync_key(rl::State{}, it, kT0);
    EXPECT_EQ(r.global.a, kT0);  // poured a period ago: drained by now
}

}  // namespace
