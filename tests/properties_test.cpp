// Properties every algorithm keeps on random timelines: the three buckets decide alike,
// Retry-After is exact, no algorithm admits more than its limit, a clock going back
// admits nothing extra. Seeds are fixed so a failure reproduces.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <deque>
#include <random>

#include "algo_test_util.h"

namespace {

using rltest::Key;
using rltest::kSec;
using rltest::policy;

const rl::Algo kAll[] = {rl::Algo::gcra, rl::Algo::token, rl::Algo::leaky,
                         rl::Algo::fixed, rl::Algo::sliding, rl::Algo::log};

struct Event {
    int64_t at;
    int64_t cost;
};

rl::Policy random_policy(std::mt19937_64& rng, rl::Algo algo) {
    static const int64_t kRequests[] = {1, 2, 3, 5, 7, 10, 60, 100, 999};
    static const int64_t kPeriods[] = {333333, kSec, 7 * kSec, 60 * kSec, 3600 * kSec, 86400 * kSec};
    int64_t burst = rl::is_bucket(algo) ? static_cast<int64_t>(rng() % 12) : 0;
    return policy(algo, kRequests[rng() % 9], kPeriods[rng() % 6], burst);
}

// Bursts, steady traffic around the rate, and idle gaps, with costs 0..capacity+1.
std::vector<Event> random_timeline(std::mt19937_64& rng, const rl::Policy& p, size_t n) {
    std::vector<Event> ev;
    int64_t t = 1600000000LL * kSec + static_cast<int64_t>(rng() % (1000 * kSec));
    int64_t interval = std::max<int64_t>(1, p.period_us / p.requests);
    for (size_t i = 0; i < n; i++) {
        switch (rng() % 10) {
            case 0: case 1: case 2: break;                                                    // same instant
            case 3: t += 1 + static_cast<int64_t>(rng() % 3); break;                         // microseconds
            case 9: t += static_cast<int64_t>(rng() % static_cast<uint64_t>(3 * p.period_us)); break;  // idle
            default: t += static_cast<int64_t>(rng() % static_cast<uint64_t>(2 * interval)); break;
        }
        int64_t cost = 1;
        uint64_t c = rng() % 10;
        if (c == 0) cost = 0;
        else if (c == 1) cost = 1 + static_cast<int64_t>(rng() % static_cast<uint64_t>(p.capacity() + 1));
        ev.push_back({t, cost});
    }
    return ev;
}

TEST(Properties, GcraTokenAndLeakyMakeIdenticalDecisions) {
    std::mt19937_64 rng(20261122);
    size_t compared = 0;
    for (int round = 0; round < 300; round++) {
        rl::Policy pg = random_policy(rng, rl::Algo::gcra);
        rl::Policy pt = pg, pl = pg;
        pt.algo = rl::Algo::token;
        pl.algo = rl::Algo::leaky;
        Key g(pg), t(pt), l(pl);
        for (const Event& e : random_timeline(rng, pg, 400)) {
            rl::Decision dg = g.hit(e.at, e.cost), dt = t.hit(e.at, e.cost), dl = l.hit(e.at, e.cost);
            for (const rl::Decision* d : {&dt, &dl}) {
                ASSERT_EQ(dg.allowed, d->allowed) << "round " << round;
                ASSERT_EQ(dg.remaining, d->remaining) << "round " << round;
                ASSERT_EQ(dg.reset_us, d->reset_us) << "round " << round;
                ASSERT_EQ(dg.retry_after_us, d->retry_after_us) << "round " << round;
            }
            compared++;
        }
    }
    EXPECT_EQ(compared, 300u * 400u);
}

TEST(Properties, RetryAfterIsExact) {
    std::mt19937_64 rng(7);
    for (rl::Algo algo : kAll) {
        size_t checked = 0;
        for (int round = 0; round < 100; round++) {
            rl::Policy p = random_policy(rng, algo);
            Key k(p);
            for (const Event& e : random_timeline(rng, p, 300)) {
                rl::Decision d = k.hit(e.at, e.cost);
                if (d.allowed || d.retry_after_us == rl::kNever) continue;
                ASSERT_GT(d.retry_after_us, 0) << rl::algo_name(algo);
                Key on_time = k, early = k;
                ASSERT_TRUE(on_time.allowed(e.at + d.retry_after_us, e.cost))
                    << rl::algo_name(algo) << " round " << round << " retry " << d.retry_after_us;
                ASSERT_FALSE(early.allowed(e.at + d.retry_after_us - 1, e.cost))
                    << rl::algo_name(algo) << " round " << round << " retry " << d.retry_after_us;
                checked++;
            }
        }
        EXPECT_GT(checked, 1000u) << rl::algo_name(algo);
    }
}

TEST(Properties, CostBeyondCapacityIsNeverAdmitted) {
    for (rl::Algo algo : kAll) {
        rl::Policy p = policy(algo, 5, kSec, rl::is_bucket(algo) ? 2 : 0);
        Key k(p);
        rl::Decision d = k.hit(kSec, p.capacity() + 1);
        EXPECT_FALSE(d.allowed) << rl::algo_name(algo);
        EXPECT_EQ(d.retry_after_us, rl::kNever) << rl::algo_name(algo);
        EXPECT_TRUE(k.allowed(kSec, p.capacity())) << rl::algo_name(algo);
    }
}

// Admitted units in [from, to] for a list of (time, units) admissions.
int64_t admitted_between(const std::vector<Event>& adm, int64_t from, int64_t to) {
    int64_t n = 0;
    for (const Event& a : adm) n += a.at >= from && a.at <= to ? a.cost : 0;
    return n;
}

TEST(Properties, NeverAboveTheLimit) {
    std::mt19937_64 rng(99);
    for (rl::Algo algo : kAll) {
        for (int round = 0; round < 60; round++) {
            rl::Policy p = random_policy(rng, algo);
            Key k(p);
            std::vector<Event> adm;
            for (const Event& e : random_timeline(rng, p, 250)) {
                if (k.allowed(e.at, e.cost) && e.cost > 0) adm.push_back(e);
            }
            for (size_t i = 0; i < adm.size(); i++) {
                const int64_t t = adm[i].at;
                int64_t got;
                int64_t bound;
                switch (algo) {
                    case rl::Algo::fixed: {
                        int64_t start = t - t % p.period_us;
                        got = admitted_between(adm, start, start + p.period_us - 1);
                        bound = p.requests;
                        break;
                    }
                    case rl::Algo::log:
                        got = admitted_between(adm, t - p.period_us + 1, t);
                        bound = p.requests;
                        break;
                    case rl::Algo::sliding:  // the estimate can err, but never past two windows' worth
                        got = admitted_between(adm, t - p.period_us + 1, t);
                        bound = 2 * p.requests;
                        break;
                    default:  // buckets: capacity plus what the rate refills since any earlier admission
                        for (size_t j = 0; j <= i; j++) {
                            int64_t span = t - adm[j].at;
                            got = admitted_between(adm, adm[j].at, t);
                            bound = p.burst + 1 + span * p.requests / p.period_us;
                            ASSERT_LE(got, bound) << rl::algo_name(algo) << " round " << round;
                        }
                        continue;
                }
                ASSERT_LE(got, bound) << rl::algo_name(algo) << " round " << round;
            }
        }
    }
}

// A clock that steps back: while it is behind the newest time seen, no algorithm admits more
// than it would have with the clock frozen at that newest time.
TEST(Properties, ClockGoingBackAdmitsNothingExtra) {
    std::mt19937_64 rng(4242);
    const int64_t kBacks[] = {1, 1000, kSec, 3600 * kSec, int64_t{1} << 49};
    for (rl::Algo algo : kAll) {
        for (int round = 0; round < 80; round++) {
            rl::Policy p = random_policy(rng, algo);
            Key k(p);
            std::vector<Event> tl = random_timeline(rng, p, 60);
            for (const Event& e : tl) k.hit(e.at, e.cost);
            const int64_t newest = tl.back().at;
            const int64_t back = kBacks[rng() % 5];
            Key stepped = k, frozen = k;
            int64_t got_stepped = 0, got_frozen = 0;
            int64_t t = newest - back;
            for (int i = 0; i < 40; i++) {
                int64_t cost = 1 + static_cast<int64_t>(rng() % 2);
                got_stepped += stepped.allowed(t, cost) ? cost : 0;
                got_frozen += frozen.allowed(newest, cost) ? cost : 0;
                t = std::min(newest, t + static_cast<int64_t>(rng() % 1000));
            }
            ASSERT_LE(got_stepped, got_frozen) << rl::algo_name(algo) << " round " << round << " back " << back;
        }
        // A clock at zero after a real date: no crash, nothing admitted beyond the state.
        Key k(policy(algo, 2, kSec, rl::is_bucket(algo) ? 1 : 0));
        EXPECT_TRUE(k.allowed(1700000000LL * kSec, 2));
        rl::Decision d = k.hit(0, 1);
        EXPECT_FALSE(d.allowed) << rl::algo_name(algo);
        EXPECT_GT(d.retry_after_us, 0) << rl::algo_name(algo);
    }
}

// The sliding window counter approximates the exact log. On Poisson traffic between 0.5x and
// 2x the limit, each sliding decision is compared with what the exact log would decide on the
// same admitted history; both kinds of error are printed and must stay small.
TEST(Properties, SlidingAgainstLog) {
    std::mt19937_64 rng(1234);
    int64_t decisions = 0, false_admit = 0, false_reject = 0, over_worst = 0, admitted = 0, log_admitted = 0;
    for (int round = 0; round < 50; round++) {
        const int64_t requests = 100, period = 10 * kSec;
        Key s(policy(rl::Algo::sliding, requests, period)), l(policy(rl::Algo::log, requests, period));
        double load = 0.5 + 1.5 * static_cast<double>(rng() % 1000) / 1000.0;
        std::exponential_distribution<double> gap(load * requests / static_cast<double>(period));
        std::deque<int64_t> history;  // what the sliding counter admitted in the trailing period
        int64_t t = 1700000000LL * kSec;
        for (int i = 0; i < 5000; i++) {
            t += static_cast<int64_t>(gap(rng)) + 1;
            while (!history.empty() && t - history.front() >= period) history.pop_front();
            bool exact = static_cast<int64_t>(history.size()) + 1 <= requests;
            bool got = s.allowed(t);
            decisions++;
            false_admit += got && !exact;
            false_reject += !got && exact;
            if (got) {
                history.push_back(t);
                admitted++;
            }
            over_worst = std::max(over_worst, static_cast<int64_t>(history.size()) - requests);
            log_admitted += l.allowed(t);  // the log on its own, for the totals
        }
    }
    double pa = 100.0 * static_cast<double>(false_admit) / static_cast<double>(decisions);
    double pr = 100.0 * static_cast<double>(false_reject) / static_cast<double>(decisions);
    double total = 100.0 * static_cast<double>(admitted - log_admitted) / static_cast<double>(log_admitted);
    std::printf("sliding vs log: %lld decisions: %.2f%% admitted that the log would reject, %.2f%% rejected that "
                "it would admit; worst trailing window %+lld over the limit of 100; total admitted %+.2f%% vs the log\n",
                static_cast<long long>(decisions), pa, pr, static_cast<long long>(over_worst), total);
    RecordProperty("false_admit_pct", std::to_string(pa));
    RecordProperty("false_reject_pct", std::to_string(pr));
    // Bounds a few points above what this traffic measures: a wrong weight breaks them.
    EXPECT_LT(pa, 8.0);
    EXPECT_LT(pr, 18.0);
    EXPECT_LE(over_worst, 10);
    EXPECT_LT(total < 0 ? -total : total, 2.0);
}

}  // namespace
