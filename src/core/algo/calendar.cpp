#include "core/algo/calendar.h"

// Debian's libdate-tz is built with the system's tz database (-ldate-tz).
#ifndef USE_OS_TZDB
#define USE_OS_TZDB 1
#endif
#include <date/tz.h>

#include <chrono>

namespace rl {

namespace {

constexpr int64_t kHourUs = int64_t{3600} * 1000000;
constexpr int64_t kDayUs = 24 * kHourUs;

using Us = std::chrono::microseconds;

// Local days -> the UTC instant of their midnight in tz (nullptr: UTC).
int64_t midnight(const date::time_zone* tz, date::local_days d) {
    date::local_time<Us> lt{std::chrono::duration_cast<Us>(d.time_since_epoch())};
    if (tz == nullptr) return lt.time_since_epoch().count();
    // choose::earliest: an ambiguous midnight is its first occurrence; a nonexistent one maps
    // to the end of the gap.
    return tz->to_sys(lt, date::choose::earliest).time_since_epoch().count();
}

// The local day starting the period that holds day d, and the next period's first day.
date::local_days period_first(Calendar c, date::local_days d) {
    using namespace date;
    switch (c) {
        case Calendar::week: return d - (weekday{d} - Monday);
        case Calendar::month: {
            year_month_day ymd{d};
            return local_days{ymd.year() / ymd.month() / 1};
        }
        case Calendar::year: return local_days{year_month_day{d}.year() / January / 1};
        default: return d;
    }
}

date::local_days period_after(Calendar c, date::local_days first) {
    using namespace date;
    switch (c) {
        case Calendar::week: return first + days{7};
        case Calendar::month: {
            year_month_day ymd{first};
            return local_days{(ymd.year() / ymd.month() / 1) + months{1}};
        }
        case Calendar::year: return local_days{(year_month_day{first}.year() + years{1}) / January / 1};
        default: return first + days{1};
    }
}

date::local_days period_before(Calendar c, date::local_days first) {
    using namespace date;
    switch (c) {
        case Calendar::week: return first - days{7};
        case Calendar::month: {
            year_month_day ymd{first};
            return local_days{(ymd.year() / ymd.month() / 1) - months{1}};
        }
        case Calendar::year: return local_days{(year_month_day{first}.year() - years{1}) / January / 1};
        default: return first - days{1};
    }
}

}  // namespace

bool parse_calendar(std::string_view name, Calendar& out) noexcept {
    if (name == "day") out = Calendar::day;
    else if (name == "week") out = Calendar::week;
    else if (name == "month") out = Calendar::month;
    else if (name == "year") out = Calendar::year;
    else return false;
    return true;
}

std::string_view calendar_name(Calendar c) noexcept {
    switch (c) {
        case Calendar::day: return "day";
        case Calendar::week: return "week";
        case Calendar::month: return "month";
        case Calendar::year: return "year";
        default: return "";
    }
}

int64_t calendar_longest_us(Calendar c) noexcept {
    switch (c) {
        case Calendar::day: return kDayUs + kHourUs;
        case Calendar::week: return 7 * kDayUs + kHourUs;
        case Calendar::month: return 31 * kDayUs + kHourUs;
        case Calendar::year: return 366 * kDayUs + kHourUs;
        default: return 0;
    }
}

const void* find_time_zone(std::string_view name) noexcept {
    try {
        return date::locate_zone(name);
    } catch (...) {
        return nullptr;
    }
}

bool calendar_window(Calendar c, const void* tz, int64_t t_us, CalendarWindow& out) noexcept {
    if (c == Calendar::none) return false;
    try {
        const auto* zone = static_cast<const date::time_zone*>(tz);
        date::sys_time<Us> t{Us{t_us}};
        date::local_time<Us> lt = zone != nullptr ? zone->to_local(t) : date::local_time<Us>{t.time_since_epoch()};
        date::local_days first = period_first(c, date::floor<date::days>(lt));
        date::local_days after = period_after(c, first);
        CalendarWindow w;
        w.prev = midnight(zone, period_before(c, first));
        w.start = midnight(zone, first);
        w.end = midnight(zone, after);
        w.next = midnight(zone, period_after(c, after));
        if (!(w.prev < w.start && w.start <= t_us && t_us < w.end && w.end < w.next)) return false;
        out = w;
        return true;
    } catch (...) {
        return false;
    }
}

bool calendar_shift(CalendarWindow& w, int64_t now) noexcept {
    if (now >= w.start && now < w.end) return true;
    if (now >= w.end && now < w.next) {
        w = CalendarWindow{w.start, w.end, w.next, w.next + (w.next - w.end)};
        return true;
    }
    if (now >= w.prev && now < w.start) {
        w = CalendarWindow{w.prev - (w.start - w.prev), w.prev, w.start, w.end};
        return true;
    }
    return false;
}

int64_t calendar_start_of(const CalendarWindow& w, int64_t t) noexcept {
    if (t >= w.start && t < w.end) return w.start;
    if (t >= w.prev && t < w.start) return w.prev;
    if (t >= w.end && t < w.next) return w.end;
    return -1;
}

int64_t calendar_before(const CalendarWindow& w, int64_t start) noexcept {
    if (start == w.start) return w.prev;
    if (start == w.end) return w.start;
    return -1;
}

}  // namespace rl
