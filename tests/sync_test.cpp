// The pure functions of sync zones (src/core/reconcile/sync.h): deltas recorded and merged, deltas added
// to states (never overwriting, nothing lost, debts kept), grants and leases.
#include "core/reconcile/sync.h"

#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "algo_test_util.h"
#include "core/algo/exact_math.h"
#include "core/reconcile/sync_command.h"

namespace {

using rltest::kSec;

const rl::Algo kSyncAlgos[] = {rl::Algo::gcra, rl::Algo::token, rl::Algo::leaky, rl::Algo::fixed, rl::Algo::sliding};
constexpr int64_t kT0 = 1763900000LL * kSec;  // a Redis-like clock

rl::Policy pol(rl::Algo a, int64_t requests, int64_t period, int64_t burst = 0) {
    return rltest::policy(a, requests, period, rl::is_bucket(a) ? burst : 0);
}

int64_t remaining(const rl::State& s, const rl::Policy& p, int64_t now) { return rl::decide(s, p, now, 0).remaining; }

TEST(SyncDelta, RecordsUnitsAndWindows) {
    rl::Policy g = pol(rl::Algo::gcra, 10, kSec, 4);
    rl::Delta d;
    rl::delta_add(d, g, kT0 + 5, 2);
    rl::delta_add(d, g, kT0 + 3, 1);  // a clock that went back: the last admission stays
    EXPECT_EQ(d.units, 3);
    EXPECT_EQ(d.at, kT0 + 5);

    rl::Policy w = pol(rl::Algo::sliding, 10, kSec);
    rl::Delta e;
    rl::delta_add(e, w, kT0 + 100, 2);
    EXPECT_EQ(e.at, rl::window_start(kT0 + 100, kSec));
    rl::delta_add(e, w, e.at + kSec + 1, 3);  // the next window: what came before becomes prev
    EXPECT_EQ(e.units, 3);
    EXPECT_EQ(e.prev, 2);
    rl::delta_add(e, w, e.at - 1, 1);  // clock back into the previous window: counted in the newer
    EXPECT_EQ(e.units, 4);
    rl::delta_add(e, w, e.at - 1, -1);  // a refund in the previous window
    EXPECT_EQ(e.prev, 1);
    rl::delta_add(e, w, e.at + 3 * kSec, 1);  // two windows on: all before is over
    EXPECT_EQ(e.units, 1);
    EXPECT_EQ(e.prev, 0);
}

// Every algorithm: two hosts' deltas added in either order, or merged first, give one state.
TEST(SyncDelta, WindowsAddInAnyOrder) {
    std::mt19937_64 rng(7);
    for (rl::Algo a : {rl::Algo::fixed, rl::Algo::sliding}) {
        for (int round = 0; round < 2000; round++) {
            rl::Policy p = pol(a, 1 + static_cast<int64_t>(rng() % 50), 1000 + static_cast<int64_t>(rng() % 5000));
            int64_t base = kT0 + static_cast<int64_t>(rng() % 100000);
            auto rand_delta = [&]() {
                rl::Delta d;
                int64_t t = base;
                for (int i = 0, n = static_cast<int>(rng() % 6); i < n; i++) {
                    t += static_cast<int64_t>(rng() % static_cast<uint64_t>(p.period_us));
                    rl::delta_add(d, p, t, 1 + static_cast<int64_t>(rng() % 3));
                }
                return d;
            };
            rl::State s;
            rl::Delta seed = rand_delta();
            s = rl::apply_delta(s, p, base, seed);
            rl::Delta x = rand_delta(), y = rand_delta();
            int64_t now = base + 3 * p.period_us;
            rl::State xy = rl::apply_delta(rl::apply_delta(s, p, now, x), p, now, y);
            rl::State yx = rl::apply_delta(rl::apply_delta(s, p, now, y), p, now, x);
            rl::Delta m = x;
            rl::delta_merge(m, y, p);
            ASSERT_EQ(xy, yx) << round;
            ASSERT_EQ(rl::apply_delta(s, p, now, m), xy) << round;
        }
    }
}

// Nothing lost: a window's count is the sum of every host's admissions in it, including
// across the boundary (prev of one host, cur of another).
TEST(SyncDelta, WindowsCrossingABoundary) {
    for (rl::Algo a : {rl::Algo::fixed, rl::Algo::sliding}) {
        rl::Policy p = pol(a, 100, kSec);
        int64_t w0 = rl::window_start(kT0, kSec);
        rl::Delta h1, h2;
        rl::delta_add(h1, p, w0 + 900000, 5);         // window w0
        rl::delta_add(h1, p, w0 + kSec + 10, 7);      // window w0 + 1 s
        rl::delta_add(h2, p, w0 + 999999, 11);        // window w0 only
        rl::State g;
        g = rl::apply_delta(g, p, w0 + kSec + 20, h2);  // global at w0: 11
        g = rl::apply_delta(g, p, w0 + kSec + 20, h1);
        EXPECT_EQ(g.a, w0 + kSec);
        if (a == rl::Algo::sliding) {
            EXPECT_EQ(g.b, 16);  // 5 + 11 in the previous window
            EXPECT_EQ(g.c, 7);
            // The estimate counts both: 100 - 16 * (1 - 30 us / 1 s) - 7 = 77.0005 left.
            EXPECT_EQ(remaining(g, p, w0 + kSec + 30), 77);
        } else {
            EXPECT_EQ(g.b, 7);  // the previous window is over
            EXPECT_EQ(remaining(g, p, w0 + kSec + 30), 93);
        }
        // A delta of a window already over adds nothing.
        rl::Delta old;
        rl::delta_add(old, p, w0 - kSec, 3);
        EXPECT_EQ(rl::apply_delta(g, p, w0 + kSec + 40, old), g);
    }
}

// Buckets: two deltas poured at one time add exactly, in either order; the debt beyond a full
// bucket is kept and paid by waiting.
TEST(SyncDelta, BucketsAddUnitsAndKeepDebt) {
    for (rl::Algo a : {rl::Algo::gcra, rl::Algo::token, rl::Algo::leaky}) {
        rl::Policy p = pol(a, 10, kSec, 9);  // 10/s, capacity 10, 100 ms per unit
        int64_t t = kT0;
        rl::Delta x{7, 0, t}, y{8, 0, t};
        rl::State s;
        rl::State xy = rl::apply_delta(rl::apply_delta(s, p, t, x), p, t, y);
        rl::State yx = rl::apply_delta(rl::apply_delta(s, p, t, y), p, t, x);
        EXPECT_EQ(xy, yx) << rl::algo_name(a);
        // 15 units in a bucket of 10: 5 in debt, paid over 500 ms, then one more per 100 ms.
        rl::Decision d = rl::decide(xy, p, t, 1);
        EXPECT_FALSE(d.allowed);
        EXPECT_EQ(d.retry_after_us, 600000) << rl::algo_name(a);
        EXPECT_FALSE(rl::decide(xy, p, t + 599999, 1).allowed);
        EXPECT_TRUE(rl::decide(xy, p, t + 600000, 1).allowed);

        // A non-empty bucket gains exactly the units, whatever the order of earlier pours.
        rl::Delta early{2, 0, t + 10000}, late{3, 0, t + 20000};
        rl::State e1 = rl::apply_delta(rl::apply_delta(s, p, t + 30000, early), p, t + 30000, late);
        rl::State e2 = rl::apply_delta(rl::apply_delta(s, p, t + 30000, late), p, t + 30000, early);
        rl::State base = rl::apply_delta(s, p, t, rl::Delta{10, 0, t});
        rl::State b1 = rl::apply_delta(rl::apply_delta(base, p, t + 30000, early), p, t + 30000, late);
        rl::State b2 = rl::apply_delta(rl::apply_delta(base, p, t + 30000, late), p, t + 30000, early);
        EXPECT_EQ(b1, b2) << rl::algo_name(a);
        // 10 at t, 5 more by 20 ms: 14.8 units then, one more fits once 5.8 have drained.
        EXPECT_TRUE(rl::decide(b1, p, t + 600000, 1).allowed) << rl::algo_name(a);
        EXPECT_FALSE(rl::decide(b1, p, t + 600000 - 1, 1).allowed) << rl::algo_name(a);
        // An empty bucket in between: the order may only make it stricter, never lose units.
        EXPECT_GE(rl::decide(e2, p, t + 30000, 0).reset_us, rl::decide(e1, p, t + 30000, 0).reset_us);
        EXPECT_EQ(rl::decide(e1, p, t + 30000, 0).remaining, 5);
    }
}

// Conservative: a host's delta (poured at its last admission) never leaves more room than
// replaying its admissions one by one, and with the others' never less than their sum.
TEST(SyncDelta, NeverMoreRoomThanTheAdmissionsOneByOne) {
    std::mt19937_64 rng(11);
    for (rl::Algo a : kSyncAlgos) {
        for (int round = 0; round < 500; round++) {
            rl::Policy p = pol(a, 1 + static_cast<int64_t>(rng() % 20), 10000 + static_cast<int64_t>(rng() % 100000),
                               static_cast<int64_t>(rng() % 10));
            rl::State exact, merged;
            rl::Delta hosts[3];
            int64_t t = kT0, now = kT0;
            for (int i = 0; i < 30; i++) {
                t += static_cast<int64_t>(rng() % static_cast<uint64_t>(p.period_us / 4));
                rl::Decision d = rl::decide(exact, p, t, 1);
                if (!d.allowed) continue;
                exact = d.next;
                rl::delta_add(hosts[rng() % 3], p, t, 1);
            }
            now = t;
            for (const rl::Delta& h : hosts) merged = rl::apply_delta(merged, p, now, h);
            for (int64_t later : {int64_t{0}, p.period_us / 3, p.period_us, 2 * p.period_us}) {
                ASSERT_LE(remaining(merged, p, now + later), remaining(exact, p, now + later))
                    << rl::algo_name(a) << " round " << round;
            }
        }
    }
}

TEST(SyncDelta, NegativeUnitsNeverBelowEmpty) {
    for (rl::Algo a : kSyncAlgos) {
        rl::Policy p = pol(a, 10, kSec, 9);
        rl::State s = rl::apply_delta(rl::State{}, p, kT0, rl::Delta{3, 0, rl::is_bucket(a) ? kT0 : rl::window_start(kT0, kSec)});
        rl::Delta back;
        rl::delta_add(back, p, kT0, -5);
        rl::State n = rl::apply_delta(s, p, kT0, back);
        EXPECT_EQ(remaining(n, p, kT0), 10) << rl::algo_name(a);
    }
}

TEST(SyncGrant, FairShareNeedAndNoOvershoot) {
    for (rl::Algo a : kSyncAlgos) {
        rl::Policy p = pol(a, 100, kSec, 99);  // capacity 100 either way
        rl::State s;
        rl::Grant g = rl::grant(s, p, kT0, 80, 0, 4);  // fair share: 25 of 100
        EXPECT_EQ(g.granted, 25) << rl::algo_name(a);
        EXPECT_EQ(remaining(g.decision.next, p, kT0), 75);
        g = rl::grant(g.decision.next, p, kT0, 5, 30, 4);  // need beyond the share: granted
        EXPECT_EQ(g.granted, 30);
        s = g.decision.next;
        g = rl::grant(s, p, kT0, 1000, 0, 1);  // at most what remains
        EXPECT_EQ(g.granted, 45);
        s = g.decision.next;
        EXPECT_EQ(remaining(s, p, kT0), 0);
        g = rl::grant(s, p, kT0, 3, 2, 1);  // need does not fit: nothing, and when it would
        EXPECT_EQ(g.granted, 0);
        EXPECT_EQ(g.decision.next, s);
        EXPECT_GT(g.decision.retry_after_us, 0);
        EXPECT_TRUE(rl::decide(s, p, kT0 + g.decision.retry_after_us, 2).allowed) << rl::algo_name(a);
        EXPECT_FALSE(rl::decide(s, p, kT0 + g.decision.retry_after_us - 1, 2).allowed) << rl::algo_name(a);
        EXPECT_EQ(rl::grant(s, p, kT0, 1, 101, 1).decision.retry_after_us, rl::kNever);
    }
}

TEST(SyncLease, WindowsLastTheirWindow) {
    rl::Policy p = pol(rl::Algo::fixed, 10, kSec);
    int64_t w = rl::window_start(kT0, kSec);
    rl::Lease l;
    rl::Grant g = rl::grant(rl::State{}, p, w + 10, 4, 0, 1);
    rl::lease_add(l, p, w + 10, g.granted, g.decision.next);
    EXPECT_EQ(rl::lease_usable(l, p, w + kSec - 1), 4);
    EXPECT_TRUE(rl::lease_take(l, p, w + 20, 3));
    EXPECT_FALSE(rl::lease_take(l, p, w + 20, 2));
    EXPECT_EQ(rl::lease_usable(l, p, w + kSec), 0);  // the next window counts afresh
    // Given back: the window's count drops.
    rl::State back = rl::give_back(g.decision.next, p, w + 30, 1, l.at, l.top);
    EXPECT_EQ(remaining(back, p, w + 30), 7);
}

TEST(SyncLease, BucketsDrainFromTheirTopAndGiveBackOnlyOnTop) {
    rl::Policy p = pol(rl::Algo::gcra, 10, kSec, 9);  // 100 ms per unit, capacity 10
    rl::State s;
    rl::Lease a, b;
    rl::Grant ga = rl::grant(s, p, kT0, 4, 0, 1);
    rl::lease_add(a, p, kT0, ga.granted, ga.decision.next);
    rl::Grant gb = rl::grant(ga.decision.next, p, kT0, 4, 0, 1);
    rl::lease_add(b, p, kT0, gb.granted, gb.decision.next);
    EXPECT_EQ(a.top, 4 * p.token);
    EXPECT_EQ(b.top, 8 * p.token);
    // a's units sit at the bottom: after 100 ms one of them has drained, b's not yet.
    EXPECT_EQ(rl::lease_usable(a, p, kT0 + 100000), 3);
    EXPECT_EQ(rl::lease_usable(b, p, kT0 + 100000), 4);
    EXPECT_EQ(rl::lease_usable(b, p, kT0 + 500000), 3);
    // a is under b: its give-back would move b's units down: refused (they drain).
    s = gb.decision.next;
    EXPECT_EQ(rl::give_back(s, p, kT0 + 1000, 4, a.at, a.top), s);
    // b is on top: its units go back.
    rl::State r = rl::give_back(s, p, kT0 + 1000, 4, b.at, b.top);
    EXPECT_EQ(remaining(r, p, kT0 + 1000), 6);
    // Spending when the lower units have drained: they are gone, not spent later. (Keeping
    // them would let the host spend their count again from the top: the simulation's replay
    // caught that as an admission beyond one limiter.)
    rl::Lease d{2, 2 * p.token, kT0};  // two units at the bottom of the bucket
    EXPECT_EQ(rl::lease_usable(d, p, kT0 + 50000), 1);
    EXPECT_TRUE(rl::lease_take(d, p, kT0 + 50000, 1));
    EXPECT_EQ(d.units, 0);
    EXPECT_EQ(rl::lease_usable(d, p, kT0 + 50000), 0);
    // Stacked: more units on an unspent lease count just above it.
    rl::Lease c;
    rl::lease_add(c, p, kT0, 2, rl::apply_delta(rl::State{}, p, kT0, rl::Delta{2, 0, kT0}));
    rl::lease_add(c, p, kT0 + 100000, 2, rl::apply_delta(rl::State{}, p, kT0, rl::Delta{9, 0, kT0}));
    EXPECT_EQ(c.units, 3);  // one of the first two had drained
    EXPECT_EQ(c.top, 3 * p.token);
}

// A lease pays once a key sees two requests within one interval (sync.h, Warmth): until then
// its requests are asked for one by one.
TEST(SyncLease, ColdUntilTwoRequestsWithinAnInterval) {
    constexpr int64_t T = 100000;
    rl::Warmth w;
    EXPECT_FALSE(rl::warmth_hot(w, kT0, T));
    rl::warmth_arrival(w, kT0, T);
    EXPECT_FALSE(rl::warmth_hot(w, kT0, T)) << "one request: cold";
    rl::warmth_arrival(w, kT0 + T, T);
    EXPECT_FALSE(rl::warmth_hot(w, kT0 + T, T)) << "the next one an interval later: still cold";
    rl::warmth_arrival(w, kT0 + 2 * T + 1, T);
    EXPECT_FALSE(rl::warmth_hot(w, kT0 + 2 * T + 1, T));
    rl::warmth_arrival(w, kT0 + 3 * T, T);  // within one interval of the one before
    EXPECT_TRUE(rl::warmth_hot(w, kT0 + 3 * T, T)) << "two within one interval: hot";
    EXPECT_TRUE(rl::warmth_hot(w, kT0 + 4 * T - 1, T)) << "for one interval from that request";
    EXPECT_FALSE(rl::warmth_hot(w, kT0 + 4 * T, T));
    rl::warmth_arrival(w, kT0 + 5 * T, T);  // after a pause: cold again
    EXPECT_FALSE(rl::warmth_hot(w, kT0 + 5 * T, T));
    // Several at once (the same loop turn) are within one interval.
    rl::Warmth burst;
    rl::warmth_arrival(burst, kT0, T);
    rl::warmth_arrival(burst, kT0, T);
    EXPECT_TRUE(rl::warmth_hot(burst, kT0, T));
    // A clock that went back (another worker's reading) counts as close, and never moves it back.
    rl::Warmth back;
    rl::warmth_arrival(back, kT0 + 10, T);
    rl::warmth_arrival(back, kT0, T);
    EXPECT_TRUE(rl::warmth_hot(back, kT0 + 10, T));
    EXPECT_EQ(back.arrived_at, kT0 + 10);
}

// A cold key's count ask (want = need, no share asked) is one per-request check: Redis grants
// exactly the need or nothing, and the state moves by that grant alone.
TEST(SyncLease, ColdAskIsOnePerRequestCheck) {
    for (rl::Algo a : kSyncAlgos) {
        rl::Policy p = pol(a, 10, kSec, 3);
        rl::SyncItem it;
        it.policy = &p;
        it.hosts = 3;
        it.want = it.need = 2;
        rl::State s;
        int64_t admitted = 0;
        for (int k = 0; k < 10; k++) {
            rl::Decision d;
            rl::SyncResult r = rl::sync_key(s, it, kT0 + k, &d);
            rl::Decision one = rl::decide(s, p, kT0 + k, 2);  // (no delay= here: a grant is unshaped)
            EXPECT_EQ(r.granted, one.allowed ? 2 : 0) << rl::algo_name(a) << " ask " << k;
            if (one.allowed) {
                EXPECT_EQ(r.global, one.next) << rl::algo_name(a) << " ask " << k;
            }
            admitted += r.granted;
            s = r.global;
        }
        EXPECT_EQ(admitted, p.capacity() / 2 * 2) << rl::algo_name(a);
    }
}

}  // namespace
