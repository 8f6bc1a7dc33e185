// Bucket leases as shares (core/reconcile/share.h): Redis's book and pool, the host's bucket.
#include <gtest/gtest.h>

#include "algo_test_util.h"
#include "core/algo/exact_math.h"
#include "core/reconcile/share.h"
#include "core/reconcile/sync.h"
#include "core/reconcile/sync_command.h"

namespace {

using rltest::kSec;
constexpr int64_t kMs = 1000;
constexpr int64_t kT0 = 1763900000LL * kSec;  // a multiple of every epoch below
constexpr int64_t kQ = 200 * kMs;
constexpr int64_t S = rl::kShareParts;

int64_t tokens_of(const rl::State& s, const rl::Policy& p, int64_t t) {
    return (p.depth - rl::bucket_level(s, p, t)) / p.token;
}

// An ask of epoch k (0: the current one, 1: the next).
rl::ShareAsk ask_for(int k, int64_t demand, int64_t rate, int64_t burst) {
    rl::ShareAsk a;
    a.epoch_us = kQ;
    a.demand = demand;
    a.rate[k] = rate;
    a.burst[k] = burst;
    return a;
}

TEST(SharePool, RefillsAtTheRateNotSharedAndHoldsAtMostWhatNoShareHolds) {
    rl::Policy p = rltest::policy(rl::Algo::gcra, 1000, kSec, 99);  // C = 100
    rl::State s;
    rl::ShareBook b;
    rl::ShareAsk ask;
    ask.epoch_us = kQ;
    ask.demand = S / 4;
    ask.rate[0] = ask.rate[1] = S / 4;
    ask.burst[0] = ask.burst[1] = 25;
    int64_t admitted = 0, moved = 0;
    rl::ShareGrant g = rl::share_grant(s, b, p, kT0, ask, 5, 0, 1, &admitted, &moved);
    EXPECT_EQ(admitted, 5);  // from the pool, before the share takes its part
    EXPECT_EQ(g.epoch_at, kT0);
    EXPECT_EQ(g.rate[0], S / 4);
    EXPECT_EQ(g.burst[1], 25);
    EXPECT_EQ(b.rate[0], S / 4);
    EXPECT_EQ(tokens_of(s, p, kT0), 75);  // at most C - B: 5 admitted, 25 held by the share
    // Spend the pool, then 40 ms later: 3/4 of the rate came back (30 units), not 40.
    s = rl::apply_delta(s, p, kT0, rl::Delta{75, 0, kT0});
    EXPECT_EQ(tokens_of(s, p, kT0), 0);
    s = rl::share_settle(s, b, p, kT0 + 40 * kMs);
    EXPECT_EQ(tokens_of(s, p, kT0 + 40 * kMs), 30);
    // Long after, within the epochs held: never above C - B.
    s = rl::share_settle(s, b, p, kT0 + 150 * kMs);
    EXPECT_EQ(tokens_of(s, p, kT0 + 150 * kMs), 75);
    // The next epoch: the book rolls.
    s = rl::share_settle(s, b, p, kT0 + kQ + 1);
    EXPECT_EQ(b.epoch_at, kT0 + kQ);
    EXPECT_EQ(b.rate[0], S / 4);
    EXPECT_EQ(b.rate[1], 0);
    // Both epochs over: the book is gone; the pool refills at the whole rate up to C.
    s = rl::share_settle(s, b, p, kT0 + 2 * kQ + 1);
    EXPECT_TRUE(b.empty());
    EXPECT_EQ(tokens_of(s, p, kT0 + 2 * kQ + 1), 75);
    EXPECT_EQ(tokens_of(s, p, kT0 + 2 * kQ + 20 * kMs), 95);
    EXPECT_EQ(tokens_of(s, p, kT0 + 3 * kQ), 100);
}

// The book's burst never exceeds the part of the capacity that its rate is of the rate: the
// pool keeps room for what it refills (else its rate is lost: a host holding 60% of the rate
// and the whole burst found the pool full for every request its bucket could not admit).
TEST(SharePool, BurstNoMoreThanTheRatesPart) {
    rl::Policy p = rltest::policy(rl::Algo::gcra, 100, kSec, 4);  // C = 5
    rl::State s;
    rl::ShareBook b;
    int64_t admitted = 0, moved = 0;
    rl::ShareAsk a = ask_for(1, S, S * 6 / 10, 5);
    rl::ShareGrant g = rl::share_grant(s, b, p, kT0, a, 0, 0, 1, &admitted, &moved);
    EXPECT_EQ(g.rate[1], S * 6 / 10);
    EXPECT_EQ(g.burst[1], 3);  // 60% of 5
    // More of the rate brings more of the burst, up to all of it with all of the rate.
    a.rate[1] = S / 10;
    g = rl::share_grant(s, b, p, kT0, a, 0, 0, 1, &admitted, &moved);
    EXPECT_EQ(g.burst[1], 1);  // 70% of 5: 4 in all
    a.rate[1] = S;
    g = rl::share_grant(s, b, p, kT0, a, 0, 0, 1, &admitted, &moved);
    EXPECT_EQ(b.rate[1], S);
    EXPECT_EQ(b.burst[1], 5);
}

TEST(SharePool, GrantsAtMostWhatIsFreeAndTheHostsPart) {
    rl::Policy p = rltest::policy(rl::Algo::token, 1000, kSec, 99);
    rl::State s;
    rl::ShareBook b;
    int64_t admitted = 0, moved = 0;
    auto ask_next = [&](int64_t demand, int64_t rate, int64_t burst) {
        rl::ShareAsk a;
        a.epoch_us = kQ;
        a.demand = demand;
        a.rate[1] = rate;
        a.burst[1] = burst;
        return rl::share_grant(s, b, p, kT0 + 10, a, 0, 0, 4, &admitted, &moved);
    };
    // The first host of a key, no demand recorded yet: as if every host of 4 had its demand.
    rl::ShareGrant g1 = ask_next(S / 2, S, 100);
    EXPECT_EQ(g1.rate[1], S / 4);
    EXPECT_EQ(g1.burst[1], 25);
    EXPECT_EQ(b.demand[1], S / 2);
    // Others: still no demand recorded for the current epoch, so 4 times theirs at least.
    rl::ShareGrant g2 = ask_next(S / 2, S, 100);
    EXPECT_EQ(g2.rate[1], S / 4);
    EXPECT_EQ(g2.burst[1], 25);
    EXPECT_EQ(ask_next(S / 2, S, 100).rate[1], S / 4);
    rl::ShareGrant g4 = ask_next(S, S, 100);  // its part would be S * 1 / (4 * 1): all that is free
    EXPECT_EQ(g4.rate[1], S / 4);
    EXPECT_EQ(ask_next(S, S, 100).rate[1], 0);  // nothing free
    EXPECT_LE(b.rate[1], S);
    EXPECT_LE(b.burst[1], 100);
    // A give-back frees it: the next ask gets it.
    rl::ShareAsk back;
    back.epoch_us = kQ;
    back.back_at = kT0 + kQ;  // its epoch: the next one of the book
    back.back_rate[0] = S / 4;
    back.back_burst[0] = 25;
    rl::share_give_back(b, back);
    EXPECT_EQ(b.rate[1], 3 * S / 4);
    EXPECT_EQ(ask_next(S / 2, S, 100).rate[1], S / 8);  // its part of the demands recorded (4 S)
    // Another interval's ask: nothing while this book lasts.
    rl::ShareAsk other;
    other.epoch_us = kQ / 2;
    other.demand = S;
    other.rate[0] = S;
    EXPECT_EQ(rl::share_grant(s, b, p, kT0 + 20, other, 0, 0, 1, &admitted, &moved).epoch_at, 0);
}

TEST(SharePool, NeedAdmittedAsFarAsThePoolHolds) {
    rl::Policy p = rltest::policy(rl::Algo::leaky, 10, kSec, 9);  // C = 10
    rl::State s;
    rl::ShareBook b;
    rl::ShareAsk draw;
    draw.epoch_us = kQ;
    int64_t admitted = 0, moved = 0;
    rl::share_grant(s, b, p, kT0, draw, 7, 5, 1, &admitted, &moved);
    EXPECT_EQ(admitted, 7);
    EXPECT_EQ(moved, 0);  // a draw: no share of the current epoch asked, nothing moved
    rl::share_grant(s, b, p, kT0, draw, 7, 5, 1, &admitted, &moved);
    EXPECT_EQ(admitted, 3);
    rl::share_grant(s, b, p, kT0, draw, 1, 0, 1, &admitted, &moved);
    EXPECT_EQ(admitted, 0);
    // A first share of the current epoch: its bucket starts with units of the pool, up to its burst.
    rl::State fresh;
    rl::ShareBook fb;
    rl::ShareAsk cold = rl::share_cold_ask(p, kQ, 2, kT0);  // burst 5 of 10
    rl::share_grant(fresh, fb, p, kT0, cold, 1, 9, 2, &admitted, &moved);
    EXPECT_EQ(admitted, 1);
    EXPECT_EQ(moved, 5);
    EXPECT_EQ(tokens_of(fresh, p, kT0), 4);  // 10 - 1 - 5, and at most C - B = 5
    // Through sync_key: the reply says how many, and when the rest would fit.
    rl::SyncItem it;
    it.policy = &p;
    it.need = 2;
    it.share = draw;
    rl::SyncResult r = rl::sync_key(s, it, kT0, nullptr, &b);
    EXPECT_EQ(r.granted, 0);
    EXPECT_GT(r.retry_after_us, 0);
}

// A cold key's count ask (no share asked, want = need) on a key whose book holds other hosts'
// shares: the book is settled first, and the need comes from the pool alone (never from the
// bursts the shares hold), as far as it holds it; nothing else is granted.
TEST(SharePool, CountAskTakesOnlyFromThePool) {
    rl::Policy p = rltest::policy(rl::Algo::gcra, 100, kSec, 9);  // C = 10, r 2T = 20 >= C
    rl::State s;
    rl::ShareBook b;
    int64_t admitted = 0, moved = 0;
    // Another host holds a share of half the rate and 5 units of the burst.
    rl::share_grant(s, b, p, kT0, ask_for(0, S / 2, S / 2, 5), 0, 0, 2, &admitted, &moved);
    ASSERT_EQ(b.burst[0], 5);
    EXPECT_EQ(tokens_of(s, p, kT0), 5);  // the pool: C - B
    rl::SyncItem it;
    it.policy = &p;
    it.hosts = 2;
    it.want = it.need = 3;  // a count ask: it.share.epoch_us == 0
    rl::SyncResult r = rl::sync_key(s, it, kT0, nullptr, &b);
    EXPECT_EQ(r.granted, 3);
    EXPECT_EQ(r.share.epoch_at, 0) << "no share granted";
    EXPECT_EQ(b.burst[0], 5) << "the shares are kept";
    EXPECT_EQ(tokens_of(r.global, p, kT0), 2);
    r = rl::sync_key(r.global, it, kT0, nullptr, &b);
    EXPECT_EQ(r.granted, 2) << "as far as the pool holds: the shares' bursts stay theirs";
    EXPECT_EQ(tokens_of(r.global, p, kT0), 0);
    rl::SyncResult none = rl::sync_key(r.global, it, kT0, nullptr, &b);
    EXPECT_EQ(none.granted, 0);
    EXPECT_GT(none.retry_after_us, 0);
    // The pool refills at the rate no share holds (r / 2): 50 ms bring 2.5 units, not 5.
    rl::SyncResult later = rl::sync_key(none.global, it, kT0 + 50 * kMs, nullptr, &b);
    EXPECT_EQ(later.granted, 2);
    // Without a book, a count ask is a plain grant of the need (a per-request check).
    rl::ShareBook empty;
    rl::SyncResult plain = rl::sync_key(rl::State{}, it, kT0, nullptr, &empty);
    EXPECT_EQ(plain.granted, 3);
    EXPECT_TRUE(empty.empty()) << "no book written for a count ask";
}

TEST(ShareHost, RefillsAtItsRateUpToItsBurstAndTakesTheSmallerShareAtABoundary) {
    rl::Policy p = rltest::policy(rl::Algo::gcra, 1000, kSec, 99);
    rl::HostShare h;
    rl::ShareAsk asked;
    asked.epoch_us = kQ;
    asked.rate[0] = asked.rate[1] = 1;
    asked.burst[0] = asked.burst[1] = 1;
    rl::ShareGrant g;
    g.epoch_at = kT0;
    g.rate[0] = S / 2;  // 500/s
    g.burst[0] = 20;
    g.rate[1] = S / 4;  // 250/s
    g.burst[1] = 10;
    const int64_t guard = 2 * kMs;
    rl::share_add(h, p, kT0 + 10 * kMs, guard, asked, g, 0);
    EXPECT_TRUE(rl::share_holds(h, kT0));
    EXPECT_TRUE(rl::share_holds(h, kT0 + kQ));
    EXPECT_FALSE(rl::share_take(h, p, kT0 + 10 * kMs, guard, 1));  // a new share's bucket starts empty
    EXPECT_TRUE(rl::share_take(h, p, kT0 + 12 * kMs, guard, 1));   // 500/s: one unit per 2 ms
    EXPECT_FALSE(rl::share_take(h, p, kT0 + 12 * kMs, guard, 1));
    rl::share_advance(h, p, kT0 + 150 * kMs, guard);
    EXPECT_EQ(rl::share_available(h, p), 20);  // its burst
    // Within the guard of the boundary: the smaller of the two shares.
    rl::Share e = rl::share_effective(h, kT0 + kQ - 1 * kMs, guard);
    EXPECT_EQ(e.rate, S / 4);
    EXPECT_EQ(e.burst, 10);
    rl::share_advance(h, p, kT0 + kQ - 1 * kMs, guard);
    EXPECT_EQ(rl::share_available(h, p), 10);
    EXPECT_EQ(rl::share_effective(h, kT0 + kQ - 3 * kMs, guard).rate, S / 2);
    // After its last epoch (and the guard): nothing.
    rl::share_advance(h, p, kT0 + 2 * kQ + guard, guard);
    EXPECT_EQ(rl::share_available(h, p), 0);
    EXPECT_FALSE(rl::share_holds(h, kT0 + kQ));
    EXPECT_FALSE(rl::share_take(h, p, kT0 + 2 * kQ + guard + 50 * kMs, guard, 1));
}

// Around a boundary three epochs count: a round just past it asks the next one while the one
// ending is still in force (within the guard). All three are held: the share in force stays the
// smaller of the two at the boundary, not nothing (its bucket was emptied, every request then
// drew on the pool, in vain once another host's share held all of the burst).
// A host holding no epoch (a cold key's, on every request) is advanced without the walk over
// segments: the same as a host holding an epoch of nothing (which the walk goes through).
TEST(ShareHost, AdvanceWithNothingHeldIsTheWalksOutcome) {
    rl::Policy p = rltest::policy(rl::Algo::gcra, 1000, kSec, 20);
    const int64_t guard = 2 * kMs;
    for (int64_t from : {kT0 - kQ - 1, kT0 - 7 * kMs, kT0 + kQ - 1}) {
        for (int64_t to : {kT0, kT0 + 1, kT0 + guard, kT0 + kQ + 3 * kMs, kT0 + 5 * kQ}) {
            for (int64_t tokens : {int64_t{0}, int64_t{3} * p.token, int64_t{25} * p.token}) {
                rl::HostShare none;
                none.epoch_us = kQ;
                none.tokens = tokens;
                none.frac = tokens > 0 ? S / 3 : 0;
                none.at = from;
                rl::HostShare empty = none;  // an epoch held, of no rate and no burst
                empty.held[0] = rl::Share{kT0 - kQ, 0, 0};
                rl::share_advance(none, p, to, guard);
                rl::share_advance(empty, p, to, guard);
                const std::string where = "from " + std::to_string(from) + " to " + std::to_string(to);
                EXPECT_EQ(none.tokens, empty.tokens) << where;
                EXPECT_EQ(none.frac, empty.frac) << where;
                EXPECT_EQ(none.at, empty.at) << where;
                EXPECT_EQ(none.tokens, to > from ? 0 : tokens) << where;
                EXPECT_EQ(none.at, to > from ? to : from) << where;
            }
        }
    }
}

TEST(ShareHost, HoldsThreeEpochsAroundABoundary) {
    rl::Policy p = rltest::policy(rl::Algo::gcra, 100, kSec, 4);  // C = 5
    const int64_t guard = 2 * kMs;
    rl::HostShare h;
    rl::ShareAsk asked;
    asked.epoch_us = kQ;
    asked.rate[0] = asked.rate[1] = S;
    asked.burst[0] = asked.burst[1] = 5;
    rl::ShareGrant g;
    g.epoch_at = kT0;
    g.rate[0] = g.rate[1] = S;
    g.burst[0] = g.burst[1] = 5;
    rl::share_add(h, p, kT0 + 10 * kMs, guard, asked, g, 5);
    EXPECT_EQ(rl::share_available(h, p), 5);
    // 1 ms past the boundary (its guard: 2 ms), the epoch after the next is granted.
    rl::ShareAsk ahead;
    ahead.epoch_us = kQ;
    ahead.rate[1] = S;
    ahead.burst[1] = 5;
    rl::ShareGrant g2;
    g2.epoch_at = kT0 + kQ;
    g2.rate[1] = S;
    g2.burst[1] = 5;
    rl::share_add(h, p, kT0 + kQ + 1 * kMs, guard, ahead, g2, 0);
    EXPECT_TRUE(rl::share_holds(h, kT0));
    EXPECT_TRUE(rl::share_holds(h, kT0 + kQ));
    EXPECT_TRUE(rl::share_holds(h, kT0 + 2 * kQ));
    EXPECT_EQ(rl::share_effective(h, kT0 + kQ + 1 * kMs, guard).burst, 5);
    EXPECT_TRUE(rl::share_take(h, p, kT0 + kQ + 1 * kMs, guard, 5));
    // Past the guard the ending one goes; a give-back names the two latest.
    rl::share_advance(h, p, kT0 + kQ + guard, guard);
    EXPECT_FALSE(rl::share_holds(h, kT0));
    EXPECT_EQ(h.held[0].at, kT0 + kQ);
    EXPECT_EQ(h.held[1].at, kT0 + 2 * kQ);
    rl::ShareAsk a2;
    a2.epoch_us = kQ;
    a2.rate[0] = S;
    rl::ShareGrant g3;
    g3.epoch_at = kT0 - kQ;  // a reply late beyond its epoch (and the one after): nothing held of it
    g3.rate[0] = S;
    rl::share_add(h, p, kT0 + kQ + 3 * kMs, guard, a2, g3, 0);
    EXPECT_FALSE(rl::share_holds(h, kT0 - kQ));
    int64_t units = 0;
    rl::HostShare h3 = h;
    h3.held[2] = h3.held[1];
    h3.held[1] = h3.held[0];
    h3.held[0] = rl::Share{kT0, S, 5};
    rl::ShareAsk back = rl::share_give_back_ask(h3, p, kT0 + kQ + 3 * kMs, guard, &units);
    EXPECT_EQ(back.back_at, kT0 + kQ);
    EXPECT_EQ(back.back_rate[0], S);
    EXPECT_EQ(back.back_rate[1], S);
    // An epoch between two held missing (its ask lost): the latest is named all the same.
    rl::HostShare gap;
    gap.epoch_us = kQ;
    gap.at = kT0 + 10 * kMs;
    gap.held[0] = rl::Share{kT0, S, 5};
    gap.held[1] = rl::Share{kT0 + 2 * kQ, S / 2, 3};
    back = rl::share_give_back_ask(gap, p, kT0 + 20 * kMs, guard, &units);
    EXPECT_EQ(back.back_at, kT0 + kQ);
    EXPECT_EQ(back.back_rate[0], 0);
    EXPECT_EQ(back.back_rate[1], S / 2);
    EXPECT_EQ(back.back_burst[1], 3);
}

// A demand is measured over the last span, or since the key's run began if later, never over
// less than the floor.
TEST(ShareHost, DemandSpan) {
    EXPECT_EQ(rl::share_demand_span(kQ, 0, kT0, 50 * kMs), kQ);                    // no run recorded
    EXPECT_EQ(rl::share_demand_span(kQ, kT0 - 300 * kMs, kT0, 50 * kMs), kQ);      // an old run
    EXPECT_EQ(rl::share_demand_span(kQ, kT0 - 80 * kMs, kT0, 50 * kMs), 80 * kMs); // a young one
    EXPECT_EQ(rl::share_demand_span(kQ, kT0 - 10 * kMs, kT0, 50 * kMs), 50 * kMs); // just begun
    EXPECT_EQ(rl::share_demand_span(kQ, kT0 + 10 * kMs, kT0, 50 * kMs), 50 * kMs); // a clock gone back
}

// More of the current epoch, asked at a round, brings units of the pool with its burst: the
// pool's units are not lost to the floor that the new burst raises.
TEST(SharePool, MoreOfTheCurrentEpochBringsUnitsOfThePool) {
    rl::Policy p = rltest::policy(rl::Algo::gcra, 100, kSec, 4);  // C = 5
    rl::State s;
    rl::ShareBook b;
    int64_t admitted = 0, moved = 0;
    rl::ShareAsk first = ask_for(0, S / 2, S / 2, 3);
    rl::share_grant(s, b, p, kT0, first, 0, 0, 2, &admitted, &moved);
    EXPECT_EQ(b.burst[0], 3);
    EXPECT_EQ(tokens_of(s, p, kT0), 2);  // the pool: C - B
    rl::ShareAsk more = ask_for(0, S, S / 2, 2);
    rl::ShareGrant g = rl::share_grant(s, b, p, kT0 + kMs, more, 0, rl::share_units_wanted(more), 1, &admitted, &moved);
    EXPECT_EQ(g.burst[0], 2);
    EXPECT_EQ(moved, 2);  // the pool's two units go to the host with the burst
    EXPECT_EQ(tokens_of(s, p, kT0 + kMs), 0);
}

// Units moved from the pool travel with the reply, counted in the book of the grant's epoch
// only: a reply that lands once that epoch may be over on Redis's clock (past its end less the
// guard: a replay after a lost reply, or a reply crossing the boundary) brings none, or they
// add to a bucket the next epoch's book does not count them in ("a reply later than its epoch
// brings none", share_add). Compared with the same reply without units.
TEST(ShareHost, ALateReplyBringsNoUnits) {
    rl::Policy p = rltest::policy(rl::Algo::gcra, 100, kSec, 4);  // C = 5
    const int64_t guard = 2 * kMs;
    // Held: epoch kT0 and the next, burst 3 then 5; the bucket spent.
    rl::ShareAsk asked;
    asked.epoch_us = kQ;
    asked.rate[0] = asked.rate[1] = S / 2;
    asked.burst[0] = 3;
    asked.burst[1] = 5;
    rl::ShareGrant g;
    g.epoch_at = kT0;
    g.rate[0] = g.rate[1] = S / 2;
    g.burst[0] = 3;
    g.burst[1] = 5;
    rl::HostShare h;
    rl::share_add(h, p, kT0 + 10 * kMs, guard, asked, g, 0);
    // More of epoch kT0, asked at a round at kT0 + 150 ms: Redis moved 2 units with 2 of burst.
    rl::ShareAsk more;
    more.epoch_us = kQ;
    more.rate[0] = S / 4;
    more.burst[0] = 2;
    rl::ShareGrant gm;
    gm.epoch_at = kT0;
    gm.rate[0] = S / 4;
    gm.burst[0] = 2;
    for (int64_t at : {kT0 + kQ + 40 * kMs, kT0 + kQ + 1 * kMs, kT0 + kQ - 1 * kMs}) {
        rl::HostShare with = h, without = h;
        rl::share_add(with, p, at, guard, more, gm, 2);
        rl::share_add(without, p, at, guard, more, gm, 0);
        EXPECT_EQ(rl::share_available(with, p), rl::share_available(without, p)) << "landed at +" << (at - kT0) / kMs << " ms";
    }
    // In time (the epoch certainly still Redis's), they land.
    rl::HostShare in_time = h;
    rl::share_add(in_time, p, kT0 + 160 * kMs, guard, more, gm, 2);
    rl::HostShare none = h;
    rl::share_add(none, p, kT0 + 160 * kMs, guard, more, gm, 0);
    EXPECT_EQ(rl::share_available(in_time, p), rl::share_available(none, p) + 2);
}

TEST(ShareHost, AsksFollowDemand) {
    rl::Policy p = rltest::policy(rl::Algo::gcra, 1000, kSec, 99);
    rl::HostShare h;
    rl::ShareAsks a;
    rl::ShareAsk cold = rl::share_cold_ask(p, kQ, 4, kT0 + 5 * kMs);
    EXPECT_EQ(cold.rate[0], S / 4);
    EXPECT_EQ(cold.burst[0], 25);
    EXPECT_EQ(cold.rate[1], 0);
    // 300/s measured: the next epoch at 450/s and a burst of half an epoch's demand.
    int64_t d = rl::share_demand(p, 60, kQ);
    EXPECT_EQ(d, rl::ceil_div(3 * S, 10));
    rl::ShareAsk next = rl::share_round_ask(h, a, p, kQ, kT0 + 5 * kMs, d);
    EXPECT_EQ(next.rate[1], d + d / 2 + 1);
    EXPECT_EQ(next.burst[1], 31);
    // With more of the current one, since it holds none of it; each once per epoch.
    EXPECT_EQ(next.rate[0], d + d / 2 + 1);
    EXPECT_EQ(rl::share_round_ask(h, a, p, kQ, kT0 + 150 * kMs, d).epoch_us, 0);
    // The rate all taken (its ask ahead capped): no asking for more.
    a = rl::ShareAsks{};
    rl::SyncItem sent;
    sent.policy = &p;
    sent.share = next;
    rl::SyncResult r;
    r.share.rate[1] = 5;
    rl::share_asks_reply(a, sent, r, kT0);
    EXPECT_EQ(a.capped, 1);
    a.asked_next = kT0 + kQ;
    EXPECT_EQ(rl::share_round_ask(h, a, p, kQ, kT0 + 105 * kMs, d).epoch_us, 0);  // (next asked already)
    // A draw that found the pool dry: no more draws in this epoch.
    EXPECT_TRUE(rl::share_may_draw(a, kQ, kT0));
    sent.share = rl::share_draw_ask(kQ);
    sent.need = 3;
    r = rl::SyncResult{};
    rl::share_asks_reply(a, sent, r, kT0 + 10);
    EXPECT_FALSE(rl::share_may_draw(a, kQ, kT0 + 20));
    EXPECT_TRUE(rl::share_may_draw(a, kQ, kT0 + kQ));
    // Dry in the epoch Redis decided the draw in: one decided 23 us before a boundary (where
    // this host's ending share may hold all of the burst) leaves the next epoch's draws free,
    // however late its reply comes back. (Marked at the reply's arrival, the next epoch went
    // dry: every request beyond its share rejected for a whole epoch under a limit of 10^9/s.)
    a = rl::ShareAsks{};
    rl::share_asks_reply(a, sent, r, kT0 + 2 * kQ - 23);
    EXPECT_FALSE(rl::share_may_draw(a, kQ, kT0 + 2 * kQ - 10));
    EXPECT_TRUE(rl::share_may_draw(a, kQ, kT0 + 2 * kQ + 600));
}

}  // namespace
