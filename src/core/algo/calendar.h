// Calendar quotas: windows that begin at local midnight (day), Monday 00:00 (week), the 1st
// (month) or January 1st (year) of a time zone, from the system's tz database through Howard
// Hinnant's date/tz (USE_OS_TZDB: /usr/share/zoneinfo). A day is 23 or 25 hours across a DST
// change, a month 28 to 31 days. No time-zone rules of our own.
//
// The window algorithms (fixed, sliding) take the bounds from Policy::win (policy.h) when
// Policy::calendar is set: the caller computes them from its clock (calendar_window) and the
// algorithms never look up a time zone. A CalendarWindow holds the current window [start, end)
// and its neighbours: the previous [prev, start) and the next [end, next).
#pragma once
#include <cstdint>
#include <string_view>

namespace rl {

enum class Calendar : uint8_t { none = 0, day = 1, week = 2, month = 3, year = 4 };

struct CalendarWindow {
    int64_t prev = 0, start = 0, end = 0, next = 0;  // microseconds since the epoch (UTC)
};

// "day", "week", "month", "year".
bool parse_calendar(std::string_view name, Calendar& out) noexcept;
std::string_view calendar_name(Calendar c) noexcept;

// The longest window of a calendar period (25 h, 7 d + 1 h, 31 d + 1 h, 366 d + 1 h): a
// calendar policy's period_us, an upper bound wherever a window's length is needed unknown.
int64_t calendar_longest_us(Calendar c) noexcept;

// The time zone named `name` in the system's tz database (an opaque pointer, valid for the
// process's life), or nullptr if there is none of that name. Never throws.
const void* find_time_zone(std::string_view name) noexcept;

// The windows around `t_us` in time zone `tz` (nullptr: UTC). False (out unchanged) if the
// library fails. A local midnight that does not exist (a DST gap at 00:00) begins its window
// at the end of the gap.
bool calendar_window(Calendar c, const void* tz, int64_t t_us, CalendarWindow& out) noexcept;

// Makes `now` fall in [start, end) by moving one window forward or back (a clock that differs
// from the one the bounds were computed with: Redis's, near a boundary). The window beyond the
// known ones is taken to be as long as its neighbour (only reports use it). False, unchanged,
// when now is outside [prev, next).
bool calendar_shift(CalendarWindow& w, int64_t now) noexcept;

// The start of the known window (previous, current or next) that holds t; -1 if none does.
int64_t calendar_start_of(const CalendarWindow& w, int64_t t) noexcept;

// The start of the known window before the one starting at `start`; -1 if not known.
int64_t calendar_before(const CalendarWindow& w, int64_t start) noexcept;

}  // namespace rl
