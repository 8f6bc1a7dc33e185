// Calendar windows (calendar.h) from the system's tz database, and the fixed and sliding
// windows deciding with calendar bounds.
#include <gtest/gtest.h>

#include <date/date.h>

#include "algo_test_util.h"
#include "core/algo/calendar.h"
#include "core/algo/refund.h"

namespace {

using rltest::kSec;
constexpr int64_t kHour = 3600 * kSec;
constexpr int64_t kDay = 24 * kHour;

// An instant given in UTC.
int64_t utc(int y, unsigned m, unsigned d, int h = 0, int min = 0) {
    using namespace date;
    sys_days day{year{y} / month{m} / d};
    return (day.time_since_epoch().count() * int64_t{86400} + h * 3600 + min * 60) * kSec;
}

const void* berlin() {
    const void* tz = rl::find_time_zone("Europe/Berlin");
    EXPECT_NE(tz, nullptr);
    return tz;
}

rl::CalendarWindow window(rl::Calendar c, const void* tz, int64_t t) {
    rl::CalendarWindow w;
    EXPECT_TRUE(rl::calendar_window(c, tz, t, w));
    return w;
}

TEST(Calendar, ParsesPeriodsAndZones) {
    rl::Calendar c;
    EXPECT_TRUE(rl::parse_calendar("day", c));
    EXPECT_EQ(c, rl::Calendar::day);
    EXPECT_TRUE(rl::parse_calendar("year", c));
    EXPECT_EQ(c, rl::Calendar::year);
    EXPECT_FALSE(rl::parse_calendar("fortnight", c));
    EXPECT_EQ(rl::find_time_zone("Mars/Olympus_Mons"), nullptr);
    EXPECT_EQ(rl::find_time_zone(""), nullptr);
    EXPECT_NE(rl::find_time_zone("UTC"), nullptr);
}

TEST(Calendar, BerlinDayAcrossSpringDst) {
    // 2026-03-29: 02:00 CET becomes 03:00 CEST; that day is 23 hours.
    rl::CalendarWindow w = window(rl::Calendar::day, berlin(), utc(2026, 3, 29, 12));
    EXPECT_EQ(w.start, utc(2026, 3, 28, 23));  // local midnight, CET
    EXPECT_EQ(w.end, utc(2026, 3, 29, 22));    // the next local midnight, CEST
    EXPECT_EQ(w.end - w.start, 23 * kHour);
    EXPECT_EQ(w.prev, utc(2026, 3, 27, 23));
    EXPECT_EQ(w.next, utc(2026, 3, 30, 22));
    // Just before and at the boundary.
    EXPECT_EQ(window(rl::Calendar::day, berlin(), utc(2026, 3, 29, 22) - 1).start, w.start);
    EXPECT_EQ(window(rl::Calendar::day, berlin(), utc(2026, 3, 29, 22)).start, w.end);
}

TEST(Calendar, BerlinDayAcrossAutumnDst) {
    // 2026-10-25: 03:00 CEST becomes 02:00 CET; that day is 25 hours.
    rl::CalendarWindow w = window(rl::Calendar::day, berlin(), utc(2026, 10, 25, 1, 30));  // the repeated hour
    EXPECT_EQ(w.start, utc(2026, 10, 24, 22));
    EXPECT_EQ(w.end, utc(2026, 10, 25, 23));
    EXPECT_EQ(w.end - w.start, 25 * kHour);
    EXPECT_EQ(w.start - w.prev, 24 * kHour);
}

TEST(Calendar, WeekStartsMondayLocal) {
    // Wednesday 2026-03-25: the week of Monday 2026-03-23 00:00 CET to Monday 03-30 00:00 CEST.
    rl::CalendarWindow w = window(rl::Calendar::week, berlin(), utc(2026, 3, 25, 12));
    EXPECT_EQ(w.start, utc(2026, 3, 22, 23));
    EXPECT_EQ(w.end, utc(2026, 3, 29, 22));
    EXPECT_EQ(w.end - w.start, 7 * kDay - kHour);
    // Sunday 23:30 local is still that week; Monday 00:00 local begins the next.
    EXPECT_EQ(window(rl::Calendar::week, berlin(), utc(2026, 3, 29, 21, 30)).start, w.start);
    EXPECT_EQ(window(rl::Calendar::week, berlin(), utc(2026, 3, 29, 22)).start, w.end);
    // UTC: Monday 2026-03-23 00:00Z.
    EXPECT_EQ(window(rl::Calendar::week, nullptr, utc(2026, 3, 25, 12)).start, utc(2026, 3, 23));
}

TEST(Calendar, MonthBoundary) {
    // 2026-02-28 23:30Z is March 1st 00:30 in Berlin: March's window, not February's.
    rl::CalendarWindow w = window(rl::Calendar::month, berlin(), utc(2026, 2, 28, 23, 30));
    EXPECT_EQ(w.prev, utc(2026, 1, 31, 23));
    EXPECT_EQ(w.start, utc(2026, 2, 28, 23));
    EXPECT_EQ(w.end, utc(2026, 3, 31, 22));  // April 1st 00:00 CEST
    EXPECT_EQ(w.next, utc(2026, 4, 30, 22));
    EXPECT_EQ(w.end - w.start, 31 * kDay - kHour);
    // In UTC the same instant is still February (28 days).
    rl::CalendarWindow u = window(rl::Calendar::month, nullptr, utc(2026, 2, 28, 23, 30));
    EXPECT_EQ(u.start, utc(2026, 2, 1));
    EXPECT_EQ(u.end, utc(2026, 3, 1));
    // A leap February.
    rl::CalendarWindow leap = window(rl::Calendar::month, nullptr, utc(2028, 2, 10));
    EXPECT_EQ(leap.end - leap.start, 29 * kDay);
}

TEST(Calendar, Year) {
    rl::CalendarWindow w = window(rl::Calendar::year, berlin(), utc(2026, 7, 1));
    EXPECT_EQ(w.start, utc(2025, 12, 31, 23));
    EXPECT_EQ(w.end, utc(2026, 12, 31, 23));
    EXPECT_EQ(w.prev, utc(2024, 12, 31, 23));
    rl::CalendarWindow u = window(rl::Calendar::year, rl::find_time_zone("UTC"), utc(2028, 7, 1));
    EXPECT_EQ(u.start, utc(2028, 1, 1));
    EXPECT_EQ(u.end - u.start, 366 * kDay);
}

TEST(Calendar, UtcDay) {
    rl::CalendarWindow w = window(rl::Calendar::day, nullptr, utc(2026, 3, 29, 12));
    EXPECT_EQ(w.start, utc(2026, 3, 29));
    EXPECT_EQ(w.end, utc(2026, 3, 30));
    EXPECT_EQ(w.prev, utc(2026, 3, 28));
    rl::CalendarWindow z = window(rl::Calendar::day, rl::find_time_zone("UTC"), utc(2026, 3, 29, 12));
    EXPECT_EQ(z.start, w.start);
    EXPECT_EQ(z.end, w.end);
}

TEST(Calendar, ShiftOneWindow) {
    rl::CalendarWindow w{0, 10, 20, 35};
    rl::CalendarWindow s = w;
    EXPECT_TRUE(rl::calendar_shift(s, 15));
    EXPECT_EQ(s.start, 10);
    EXPECT_TRUE(rl::calendar_shift(s, 20));  // the next window; the one after as long as it
    EXPECT_EQ(s.prev, 10);
    EXPECT_EQ(s.start, 20);
    EXPECT_EQ(s.end, 35);
    EXPECT_EQ(s.next, 50);
    s = w;
    EXPECT_TRUE(rl::calendar_shift(s, 9));
    EXPECT_EQ(s.prev, -10);
    EXPECT_EQ(s.start, 0);
    EXPECT_EQ(s.end, 10);
    s = w;
    EXPECT_FALSE(rl::calendar_shift(s, 35));
    EXPECT_FALSE(rl::calendar_shift(s, -1));
    EXPECT_EQ(s.start, 10);
}

// A calendar policy as the zone makes it, its window set for `now` as nginx sets it.
rl::Policy calendar_policy(rl::Algo algo, int64_t requests, rl::Calendar c) {
    rl::Policy p;
    p.algo = algo;
    p.requests = requests;
    p.calendar = c;
    p.period_us = rl::calendar_longest_us(c);
    const char* err = rl::finish_policy(p);
    EXPECT_EQ(err, nullptr) << err;
    return p;
}

struct CalendarKey : rltest::Key {
    CalendarKey(const rl::Policy& pol, const void* zone) : rltest::Key(pol), tz(zone) {}
    rl::Decision at(int64_t now, int64_t cost = 1) {
        EXPECT_TRUE(rl::calendar_window(p.calendar, tz, now, p.win));
        return hit(now, cost);
    }
    const void* tz;
};

TEST(CalendarFixed, DailyQuotaResetsAtLocalMidnightOfAShortDay) {
    CalendarKey k(calendar_policy(rl::Algo::fixed, 3, rl::Calendar::day), berlin());
    const int64_t midnight = utc(2026, 3, 29, 22);  // 2026-03-30 00:00 CEST
    for (int64_t left : {2, 1, 0}) {
        rl::Decision d = k.at(midnight - 30 * 60 * kSec);
        EXPECT_TRUE(d.allowed);
        EXPECT_EQ(d.remaining, left);
        EXPECT_EQ(d.reset_us, 30 * 60 * kSec);  // the boundary
    }
    rl::Decision d = k.at(midnight - kSec);
    EXPECT_FALSE(d.allowed);
    EXPECT_EQ(d.retry_after_us, kSec);
    EXPECT_TRUE(k.at(midnight).allowed);
    EXPECT_EQ(k.at(midnight).reset_us, 24 * kHour);
}

TEST(CalendarFixed, MonthEnd) {
    CalendarKey k(calendar_policy(rl::Algo::fixed, 2, rl::Calendar::month), nullptr);
    EXPECT_TRUE(k.at(utc(2026, 1, 31, 23)).allowed);
    EXPECT_TRUE(k.at(utc(2026, 1, 31, 23, 59)).allowed);
    rl::Decision d = k.at(utc(2026, 1, 31, 23, 59));
    EXPECT_FALSE(d.allowed);
    EXPECT_EQ(d.retry_after_us, 60 * kSec);
    d = k.at(utc(2026, 2, 1));
    EXPECT_TRUE(d.allowed);
    EXPECT_EQ(d.reset_us, 28 * kDay);
}

TEST(CalendarFixed, ClockBackAcrossABoundaryKeepsTheCount) {
    CalendarKey k(calendar_policy(rl::Algo::fixed, 2, rl::Calendar::day), nullptr);
    EXPECT_TRUE(k.at(utc(2026, 5, 2, 0, 1), 2).allowed);  // the quota of May 2nd used
    // The clock steps back into May 1st: those 2 still count, until May 2nd has passed.
    rl::Decision d = k.at(utc(2026, 5, 1, 23, 59));
    EXPECT_FALSE(d.allowed);
    EXPECT_EQ(d.retry_after_us, utc(2026, 5, 3) - utc(2026, 5, 1, 23, 59));
}

TEST(CalendarFixed, BoundsOfAnotherTimeReject) {
    rl::Policy p = calendar_policy(rl::Algo::fixed, 5, rl::Calendar::day);
    ASSERT_TRUE(rl::calendar_window(p.calendar, nullptr, utc(2026, 5, 1, 10), p.win));
    // A clock a little past the boundary: the next window (shifted); days away: rejected, never.
    EXPECT_TRUE(rl::decide(rl::State{}, p, utc(2026, 5, 2, 0, 0), 1).allowed);
    EXPECT_EQ(rl::decide(rl::State{}, p, utc(2026, 5, 2, 1), 1).reset_us, 23 * kHour);
    rl::Decision d = rl::decide(rl::State{}, p, utc(2026, 5, 5), 1);
    EXPECT_FALSE(d.allowed);
    EXPECT_EQ(d.retry_after_us, rl::kNever);
}

TEST(CalendarFixed, RefundInItsWindowOnly) {
    rl::Policy p = calendar_policy(rl::Algo::fixed, 5, rl::Calendar::day);
    ASSERT_TRUE(rl::calendar_window(p.calendar, nullptr, utc(2026, 5, 1, 10), p.win));
    rl::State s;
    rl::Decision d = rl::decide(s, p, utc(2026, 5, 1, 10), 2);
    ASSERT_TRUE(d.allowed);
    s = d.next;
    rl::refund(s, nullptr, p, utc(2026, 5, 1, 10), utc(2026, 5, 1, 10), 1);
    EXPECT_EQ(s.b, 1);
    rl::refund(s, nullptr, p, utc(2026, 5, 1, 10), utc(2026, 4, 30, 10), 1);  // another window's
    EXPECT_EQ(s.b, 1);
}

TEST(CalendarSliding, WeighsThePreviousDayByWhatIsLeftOfThisOne) {
    // UTC days; 100 per day, 80 counted yesterday.
    CalendarKey k(calendar_policy(rl::Algo::sliding, 100, rl::Calendar::day), nullptr);
    EXPECT_TRUE(k.at(utc(2026, 5, 1, 12), 80).allowed);
    // 6 hours into the next day: 80 * 18/24 = 60 weigh, 40 remain.
    rl::Decision d = k.at(utc(2026, 5, 2, 6), 0);
    EXPECT_EQ(d.remaining, 40);
    EXPECT_EQ(d.reset_us, 18 * kHour);  // the previous day's count stops weighing at midnight
    EXPECT_TRUE(k.at(utc(2026, 5, 2, 6), 40).allowed);
    d = k.at(utc(2026, 5, 2, 6));
    EXPECT_FALSE(d.allowed);
    // One more fits once 80 * w <= 59, w <= 59/80: left <= 17.7 h, i.e. 6.3 h in.
    EXPECT_GT(d.retry_after_us, 17 * 60 * kSec);
    EXPECT_LT(d.retry_after_us, 19 * 60 * kSec);
    EXPECT_EQ(k.at(utc(2026, 5, 2, 6), 0).reset_us, 18 * kHour + 24 * kHour);
}

TEST(CalendarSliding, ShortDayWeighsByItsOwnLength) {
    // Berlin's 23-hour day: half of it gone at 11:30 of its hours, half the previous count weighs.
    CalendarKey k(calendar_policy(rl::Algo::sliding, 100, rl::Calendar::day), berlin());
    EXPECT_TRUE(k.at(utc(2026, 3, 28, 12), 100).allowed);
    const int64_t start = utc(2026, 3, 28, 23);
    rl::Decision d = k.at(start + 23 * kHour / 2, 0);
    EXPECT_EQ(d.remaining, 50);
    EXPECT_EQ(d.reset_us, 23 * kHour / 2);
}

TEST(CalendarPolicy, RefusedForBuckets) {
    rl::Policy p;
    p.algo = rl::Algo::gcra;
    p.calendar = rl::Calendar::day;
    p.period_us = rl::calendar_longest_us(rl::Calendar::day);
    EXPECT_NE(rl::finish_policy(p), nullptr);
}

}  // namespace
