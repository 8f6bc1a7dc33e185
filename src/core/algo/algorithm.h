// The six limiting algorithms and their names as written in nginx.conf.
#pragma once
#include <cstdint>
#include <string_view>

namespace rl {

enum class Algo : uint8_t {
    gcra = 0,     // generic cell rate algorithm (continuous token bucket, one timestamp)
    token = 1,    // token bucket: (tokens, last refill)
    leaky = 2,    // leaky bucket as a meter: (level, last leak)
    sliding = 3,  // sliding window counter: (last admission, previous count, current count)
    fixed = 4,    // fixed window aligned to multiples of the period
    log = 5,      // exact sliding log of timestamps
    concurrency = 6,  // in-flight requests (concurrency.h): not a rate, never named by algo=
};

constexpr int kAlgoCount = 6;  // the rate algorithms, those algo= names

// Parses "gcra", "token", ... (the rate algorithms); returns false on an unknown name.
bool parse_algo(std::string_view name, Algo& out);
std::string_view algo_name(Algo a);

// Bucket algorithms honour burst; window algorithms count requests per period.
constexpr bool is_rate(Algo a) { return a != Algo::concurrency; }
constexpr bool is_bucket(Algo a) { return a == Algo::gcra || a == Algo::token || a == Algo::leaky; }

}  // namespace rl
