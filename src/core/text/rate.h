// Parsing of the configuration's numbers: rates ("10r/s"), durations ("1m", "500ms").
// Time in the core is integer microseconds: exact in a Redis Lua number (a double) for
// any date, which lets the Lua scripts make the very decisions the C++ core makes.
#pragma once
#include <cstdint>
#include <string_view>

namespace rl {

constexpr int64_t kUsPerMs = 1000;
constexpr int64_t kUsPerSec = 1000000;
constexpr int64_t kMaxPeriodUs = 366LL * 86400 * kUsPerSec;  // periods and durations: at most a leap year
constexpr int64_t kMaxRequests = 1000000000000LL;          // 10^12

// "Nr/s", "Nr/m", "Nr/h", "Nr/d", or "N/TIME" with TIME as parse_duration takes it
// ("100/15m", "5/1h30m"); N in 1..10^12. Returns false if malformed.
bool parse_rate(std::string_view text, int64_t& requests, int64_t& period_us);

// nginx-style duration (ngx_parse_time's units): a sequence like "1h30m", units ms s m h d w
// M (30 days) y (365 days), largest first, each once (no unit = seconds);
// result in microseconds, > 0 and <= kMaxPeriodUs. Returns false if malformed or out of range.
bool parse_duration(std::string_view text, int64_t& us);

// Decimal integer in [min, max]; no sign, no spaces.
bool parse_int(std::string_view text, int64_t min, int64_t max, int64_t& out);

// The cost of a number too large to represent: above every limit's capacity (at most
// burst + 1 <= kMaxRequests + 1), so every algorithm rejects it (kNever).
constexpr int64_t kCostTooLarge = kMaxRequests + 2;

// A request's quantity from outside (a variable): its decimal value in [0, kMaxRequests];
// kCostTooLarge for digits beyond that, however many; -1 for what is not a number.
int64_t parse_cost(std::string_view text);

}  // namespace rl
