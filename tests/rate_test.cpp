// Configuration numbers: rates, durations, bounded integers, and algorithm names.
#include "core/algo/algorithm.h"
#include "core/algo/policy.h"
#include "core/text/rate.h"

#include <gtest/gtest.h>

#include <string>

namespace {

constexpr int64_t kSec = rl::kUsPerSec;

struct Rate {
    bool ok;
    int64_t requests;
    int64_t period_us;
};

Rate rate(std::string_view s) {
    Rate r{false, -7, -7};  // sentinels: a failed parse must leave the outputs alone
    r.ok = rl::parse_rate(s, r.requests, r.period_us);
    return r;
}

// The parsed duration in microseconds, or -1 if rejected.
int64_t dur(std::string_view s) {
    int64_t us = -7;
    if (!rl::parse_duration(s, us)) {
        EXPECT_EQ(us, -7) << "a rejected duration must not write its output: " << s;
        return -1;
    }
    return us;
}

// --- parse_rate ---------------------------------------------------------------------------

TEST(ParseRate, EachUnit) {
    Rate r = rate("10r/s");
    EXPECT_TRUE(r.ok);
    EXPECT_EQ(r.requests, 10);
    EXPECT_EQ(r.period_us, kSec);

    r = rate("300r/m");
    EXPECT_TRUE(r.ok);
    EXPECT_EQ(r.requests, 300);
    EXPECT_EQ(r.period_us, 60 * kSec);

    r = rate("1r/h");
    EXPECT_TRUE(r.ok);
    EXPECT_EQ(r.requests, 1);
    EXPECT_EQ(r.period_us, 3600 * kSec);

    r = rate("7r/d");
    EXPECT_TRUE(r.ok);
    EXPECT_EQ(r.requests, 7);
    EXPECT_EQ(r.period_us, 86400 * kSec);
}

TEST(ParseRate, RequestBounds) {
    EXPECT_FALSE(rate("0r/s").ok);
    EXPECT_FALSE(rate("00r/s").ok);
    EXPECT_TRUE(rate("1r/s").ok);

    Rate r = rate("1000000000000r/s");
    EXPECT_TRUE(r.ok);
    EXPECT_EQ(r.requests, rl::kMaxRequests);
    EXPECT_EQ(r.requests, 1000000000000LL);

    EXPECT_FALSE(rate("1000000000001r/s").ok);
    EXPECT_FALSE(rate("9223372036854775807r/s").ok);
    EXPECT_FALSE(rate("9223372036854775808r/s").ok);  // would overflow int64
    EXPECT_FALSE(rate("99999999999999999999999r/s").ok);
}

TEST(ParseRate, RejectsJunk) {
    for (const char* s : {"", "10r/x", "abc", "r/s", "10 r/s", "-1r/s", "+1r/s", "10", "10r", "10r/", "10/s",
                          "10rs", "10r/ss", "10r/s ", " 10r/s", "10r/S", "10R/s", "10r/ms", "10r/1s", "1.5r/s",
                          "0x10r/s", "10r\\s", "10r/s\n"}) {
        Rate r = rate(s);
        EXPECT_FALSE(r.ok) << '"' << s << '"';
        EXPECT_EQ(r.requests, -7) << s;
        EXPECT_EQ(r.period_us, -7) << s;
    }
    EXPECT_FALSE(rate(std::string_view("10r/s\0", 6)).ok);
}

TEST(ParseRate, RequestsPerDuration) {
    Rate r = rate("100/15m");
    EXPECT_TRUE(r.ok);
    EXPECT_EQ(r.requests, 100);
    EXPECT_EQ(r.period_us, 15 * 60 * kSec);

    r = rate("5/1h30m");
    EXPECT_TRUE(r.ok);
    EXPECT_EQ(r.requests, 5);
    EXPECT_EQ(r.period_us, 90 * 60 * kSec);

    r = rate("3/500ms");
    EXPECT_TRUE(r.ok);
    EXPECT_EQ(r.requests, 3);
    EXPECT_EQ(r.period_us, 500 * rl::kUsPerMs);

    r = rate("7/30");  // a bare number is seconds, as in every nginx duration
    EXPECT_TRUE(r.ok);
    EXPECT_EQ(r.period_us, 30 * kSec);

    r = rate("1000000000000/366d");
    EXPECT_TRUE(r.ok);
    EXPECT_EQ(r.requests, rl::kMaxRequests);
    EXPECT_EQ(r.period_us, rl::kMaxPeriodUs);

    for (const char* s : {"1/1w", "1/52w", "1/1M", "1/1y", "1/366d"}) EXPECT_TRUE(rate(s).ok) << s;
    EXPECT_EQ(rate("1/1y").period_us, 365 * 86400 * kSec);
    EXPECT_FALSE(rate("1/53w").ok);

    // The unit forms and their duration spelling agree.
    EXPECT_EQ(rate("60/1h").period_us, rate("60r/h").period_us);
    EXPECT_EQ(rate("10/1s").period_us, rate("10r/s").period_us);
}

TEST(ParseRate, RequestsPerDurationJunk) {
    for (const char* s : {"100/", "/15m", "0/15m", "100/0s", "100/367d", "100/15m ", "100/ 15m", "100/15x", "100/m",
                          "100/-1s", "100/15m/", "100//15m", "100r/15m", "1000000000001/1h", "100/1s1", "100/1.5s",
                          "-100/15m", "100 /15m"}) {
        Rate r = rate(s);
        EXPECT_FALSE(r.ok) << '"' << s << '"';
        EXPECT_EQ(r.requests, -7) << s;
        EXPECT_EQ(r.period_us, -7) << s;
    }
}

// --- parse_duration -----------------------------------------------------------------------

TEST(ParseDuration, SingleUnits) {
    EXPECT_EQ(dur("500ms"), 500 * rl::kUsPerMs);
    EXPECT_EQ(dur("1ms"), 1000);
    EXPECT_EQ(dur("90s"), 90 * kSec);
    EXPECT_EQ(dur("15m"), 15 * 60 * kSec);
    EXPECT_EQ(dur("1h"), 3600 * kSec);
    EXPECT_EQ(dur("2d"), 2 * 86400 * kSec);
}

// nginx's larger units (ngx_parse_time): w, M (30 days), y (365 days), within the year bound.
TEST(ParseDuration, WeeksMonthsYears) {
    const int64_t day = 86400 * kSec;
    EXPECT_EQ(dur("1w"), 7 * day);
    EXPECT_EQ(dur("52w"), 364 * day);
    EXPECT_EQ(dur("1M"), 30 * day);
    EXPECT_EQ(dur("12M"), 360 * day);
    EXPECT_EQ(dur("1y"), 365 * day);
    EXPECT_EQ(dur("1y1d"), rl::kMaxPeriodUs);
    EXPECT_EQ(dur("1y24h"), rl::kMaxPeriodUs);
    EXPECT_EQ(dur("1M2w3d4h"), (30 + 14 + 3) * day + 4 * 3600 * kSec);
    EXPECT_EQ(dur("52w2d"), rl::kMaxPeriodUs);
    EXPECT_EQ(dur("1y1d1ms"), -1);  // beyond the year bound
    EXPECT_EQ(dur("1y2d"), -1);
    EXPECT_EQ(dur("53w"), -1);
    EXPECT_EQ(dur("13M"), -1);
    EXPECT_EQ(dur("2y"), -1);
    EXPECT_EQ(dur("1w1y"), -1);  // largest first, each once
    EXPECT_EQ(dur("1d1w"), -1);
    EXPECT_EQ(dur("1M1y"), -1);
    EXPECT_EQ(dur("1w1w"), -1);
    EXPECT_EQ(dur("1y1M1w1d1h1m1s1ms"), -1);  // every unit in order, but beyond the bound
    EXPECT_EQ(dur("11M1w1d1h1m1s1ms"), (330 + 7 + 1) * day + 3661 * kSec + rl::kUsPerMs);
}

TEST(ParseDuration, BareNumberIsSeconds) {
    EXPECT_EQ(dur("1"), kSec);
    EXPECT_EQ(dur("60"), 60 * kSec);
    EXPECT_EQ(dur("007"), 7 * kSec);
}

TEST(ParseDuration, Compound) {
    EXPECT_EQ(dur("1h30m"), 90 * 60 * kSec);
    EXPECT_EQ(dur("1d12h"), 36 * 3600 * kSec);
    EXPECT_EQ(dur("1m30s"), 90 * kSec);
    EXPECT_EQ(dur("1s500ms"), 1500 * rl::kUsPerMs);
    EXPECT_EQ(dur("1d2h3m4s5ms"), ((((1 * 24 + 2) * 60 + 3) * 60 + 4) * 1000 + 5) * rl::kUsPerMs);
    EXPECT_EQ(dur("0h30m"), 30 * 60 * kSec);
    EXPECT_EQ(dur("1m30"), 90 * kSec);  // a trailing bare number is seconds, as in nginx
}

TEST(ParseDuration, UnitsLargestFirstAndOnce) {
    EXPECT_EQ(dur("30m1h"), -1);
    EXPECT_EQ(dur("1m1m"), -1);
    EXPECT_EQ(dur("500ms1s"), -1);
    EXPECT_EQ(dur("1s1"), -1);     // a bare number after seconds would be seconds again
    EXPECT_EQ(dur("500ms5"), -1);
}

TEST(ParseDuration, MinAndMax) {
    EXPECT_EQ(dur("1ms"), 1000);  // the smallest expressible duration
    EXPECT_EQ(dur("0"), -1);
    EXPECT_EQ(dur("0s"), -1);
    EXPECT_EQ(dur("0ms"), -1);
    EXPECT_EQ(dur("0h0m0s"), -1);

    EXPECT_EQ(dur("366d"), rl::kMaxPeriodUs);
    EXPECT_EQ(dur("365d24h"), rl::kMaxPeriodUs);
    EXPECT_EQ(dur("31622400s"), rl::kMaxPeriodUs);
    EXPECT_EQ(dur("31622400000ms"), rl::kMaxPeriodUs);
    EXPECT_EQ(dur("31622400"), rl::kMaxPeriodUs);
    EXPECT_EQ(dur("366d1ms"), -1);
    EXPECT_EQ(dur("367d"), -1);
    EXPECT_EQ(dur("31622401s"), -1);
    EXPECT_EQ(dur("31622400001ms"), -1);
    EXPECT_EQ(dur("365d23h59m59s999ms"), rl::kMaxPeriodUs - 1000);
    EXPECT_EQ(dur("365d23h59m59s1000ms"), rl::kMaxPeriodUs);
    EXPECT_EQ(dur("365d23h59m59s1001ms"), -1);
}

TEST(ParseDuration, RejectsOverflow) {
    // Values whose product or sum would wrap an int64 must not come back as small numbers.
    EXPECT_EQ(dur("106751991167d"), -1);         // d * 86400e6 > 2^63
    EXPECT_EQ(dur("9223372036854775807ms"), -1);
    EXPECT_EQ(dur("9223372036854775808"), -1);
    EXPECT_EQ(dur("18446744073709551617s"), -1);  // 2^64 + 1: wraps to 1 if unchecked
    EXPECT_EQ(dur("99999999999999999999999999h"), -1);
    EXPECT_EQ(dur("200d200d"), -1);
    EXPECT_EQ(dur("200d4800h"), -1);  // each part fits, the sum does not
}

TEST(ParseDuration, RejectsJunk) {
    for (const char* s : {"", "s", "ms", "h1", "1x", "1 h", " 1h", "1h ", "-1s", "+1s", "1.5s", "1sm", "1mss",
                          "1H", "1W", "1Y", "1D", "1mo", "1hh", "1h30m ", "1h 30m", "abc", "m30", "1e3", "0x10"}) {
        EXPECT_EQ(dur(s), -1) << '"' << s << '"';
    }
}

// --- parse_int ----------------------------------------------------------------------------

TEST(ParseInt, InRange) {
    int64_t v = -7;
    EXPECT_TRUE(rl::parse_int("0", 0, 10, v));
    EXPECT_EQ(v, 0);
    EXPECT_TRUE(rl::parse_int("10", 0, 10, v));
    EXPECT_EQ(v, 10);
    EXPECT_TRUE(rl::parse_int("0042", 0, 100, v));
    EXPECT_EQ(v, 42);
    EXPECT_TRUE(rl::parse_int("1000000000000", 1, 1000000000000LL, v));
    EXPECT_EQ(v, 1000000000000LL);
    EXPECT_TRUE(rl::parse_int("9223372036854775807", 0, INT64_MAX, v));
    EXPECT_EQ(v, INT64_MAX);
}

TEST(ParseInt, OutOfRange) {
    int64_t v = -7;
    EXPECT_FALSE(rl::parse_int("11", 0, 10, v));
    EXPECT_FALSE(rl::parse_int("0", 1, 10, v));
    EXPECT_FALSE(rl::parse_int("1000000000001", 1, 1000000000000LL, v));
    EXPECT_FALSE(rl::parse_int("9223372036854775808", 0, INT64_MAX, v));
    EXPECT_FALSE(rl::parse_int("18446744073709551617", 0, INT64_MAX, v));  // 2^64 + 1
    EXPECT_FALSE(rl::parse_int("99999999999999999999999999", 0, INT64_MAX, v));
    EXPECT_FALSE(rl::parse_int("5", 10, 0, v));  // empty range
    EXPECT_EQ(v, -7);
}

TEST(ParseInt, RejectsSignsSpacesAndJunk) {
    int64_t v = -7;
    for (const char* s : {"", "-1", "+1", " 1", "1 ", "1a", "a1", "0x1", "1.0", "1e3", "-0"}) {
        EXPECT_FALSE(rl::parse_int(s, -100, 100, v)) << '"' << s << '"';
    }
    EXPECT_EQ(v, -7);
}

// --- algorithm names ----------------------------------------------------------------------

TEST(AlgoName, ParsesEveryNameAndRoundTrips) {
    const struct {
        const char* name;
        rl::Algo algo;
    } cases[] = {{"gcra", rl::Algo::gcra},       {"token", rl::Algo::token}, {"leaky", rl::Algo::leaky},
                 {"sliding", rl::Algo::sliding}, {"fixed", rl::Algo::fixed}, {"log", rl::Algo::log}};
    static_assert(sizeof(cases) / sizeof(cases[0]) == rl::kAlgoCount, "every algorithm is tested");
    for (const auto& c : cases) {
        rl::Algo a = rl::Algo::gcra;
        EXPECT_TRUE(rl::parse_algo(c.name, a)) << c.name;
        EXPECT_EQ(a, c.algo) << c.name;
        EXPECT_EQ(rl::algo_name(c.algo), c.name);
    }
}

TEST(AlgoName, RejectsUnknownNames) {
    for (const char* s : {"", "foo", "GCRA", "gcra ", "tok", "tokens", "sliding_window", "log\n"}) {
        rl::Algo a = rl::Algo::fixed;
        EXPECT_FALSE(rl::parse_algo(s, a)) << '"' << s << '"';
        EXPECT_EQ(a, rl::Algo::fixed);
    }
}

}  // namespace

TEST(ParseCost, NumbersInRange) {
    EXPECT_EQ(rl::parse_cost("0"), 0);
    EXPECT_EQ(rl::parse_cost("101"), 101);
    EXPECT_EQ(rl::parse_cost("1000000000000"), rl::kMaxRequests);
}

TEST(ParseCost, NumbersTooLargeAreNeverAdmitted) {
    EXPECT_EQ(rl::parse_cost("1000000000001"), rl::kCostTooLarge);
    EXPECT_EQ(rl::parse_cost("18446744073709551616"), rl::kCostTooLarge);
    EXPECT_EQ(rl::parse_cost(std::string(5000, '9')), rl::kCostTooLarge);
    rl::Policy p;
    p.algo = rl::Algo::gcra;
    p.requests = rl::kMaxRequests;
    p.burst = rl::kMaxRequests;  // the largest capacity the configuration accepts
    EXPECT_GT(rl::kCostTooLarge, p.capacity());
}

TEST(ParseCost, WhatIsNotANumber) {
    EXPECT_EQ(rl::parse_cost(""), -1);
    EXPECT_EQ(rl::parse_cost("-1"), -1);
    EXPECT_EQ(rl::parse_cost("1e3"), -1);
    EXPECT_EQ(rl::parse_cost(" 5"), -1);
    EXPECT_EQ(rl::parse_cost("abc"), -1);
}
