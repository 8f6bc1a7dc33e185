#include "core/text/rate.h"

namespace rl {

namespace {

bool is_digit(char c) { return c >= '0' && c <= '9'; }

// Reads a run of digits at text[*pos]; false if there is none or it exceeds `max`
// (checked before each step, so it never overflows).
bool read_number(std::string_view text, size_t* pos, int64_t max, int64_t* out) {
    size_t i = *pos;
    int64_t v = 0;
    while (i < text.size() && is_digit(text[i])) {
        int d = text[i] - '0';
        if (v > (max - d) / 10) return false;
        v = v * 10 + d;
        i++;
    }
    if (i == *pos) return false;
    *pos = i;
    *out = v;
    return true;
}

}  // namespace

bool parse_int(std::string_view text, int64_t min, int64_t max, int64_t& out) {
    if (max < 0 || min > max) return false;  // no sign accepted, so nothing below 0 can match
    size_t pos = 0;
    int64_t v;
    if (!read_number(text, &pos, max, &v) || pos != text.size() || v < min) return false;
    out = v;
    return true;
}

bool parse_rate(std::string_view text, int64_t& requests, int64_t& period_us) {
    size_t pos = 0;
    int64_t n;
    if (!read_number(text, &pos, kMaxRequests, &n) || n < 1) return false;
    std::string_view unit = text.substr(pos);
    if (unit.size() > 1 && unit[0] == '/') {  // "N/TIME"
        int64_t period;
        if (!parse_duration(unit.substr(1), period)) return false;
        requests = n;
        period_us = period;
        return true;
    }
    if (unit.size() != 3 || unit[0] != 'r' || unit[1] != '/') return false;
    int64_t period;
    switch (unit[2]) {
        case 's': period = kUsPerSec; break;
        case 'm': period = 60 * kUsPerSec; break;
        case 'h': period = 3600 * kUsPerSec; break;
        case 'd': period = 86400 * kUsPerSec; break;
        default: return false;
    }
    requests = n;
    period_us = period;
    return true;
}

bool parse_duration(std::string_view text, int64_t& us) {
    // nginx's time units (ngx_parse_time): y (365 days), M (30 days), w, d, h, m, s, ms. Units
    // must come largest first, each at most once ("1h30m", not "30m1h"), as in nginx. A trailing
    // number without a unit counts as seconds ("1m30" = 90s), also as in nginx.
    enum Rank { kNone, kYear, kMonth, kWeek, kDay, kHour, kMin, kSec, kMsec };
    constexpr int64_t kDayUs = 86400 * kUsPerSec;
    int last = kNone;
    int64_t total = 0;
    size_t pos = 0;
    if (text.empty()) return false;
    while (pos < text.size()) {
        int64_t v;
        if (!read_number(text, &pos, kMaxPeriodUs, &v)) return false;
        int rank;
        int64_t scale;
        if (pos == text.size()) {
            rank = kSec;
            scale = kUsPerSec;
        } else {
            char c = text[pos++];
            if (c == 'm' && pos < text.size() && text[pos] == 's') {
                pos++;
                rank = kMsec;
                scale = kUsPerMs;
            } else if (c == 'y') {
                rank = kYear;
                scale = 365 * kDayUs;
            } else if (c == 'M') {
                rank = kMonth;
                scale = 30 * kDayUs;
            } else if (c == 'w') {
                rank = kWeek;
                scale = 7 * kDayUs;
            } else if (c == 'd') {
                rank = kDay;
                scale = kDayUs;
            } else if (c == 'h') {
                rank = kHour;
                scale = 3600 * kUsPerSec;
            } else if (c == 'm') {
                rank = kMin;
                scale = 60 * kUsPerSec;
            } else if (c == 's') {
                rank = kSec;
                scale = kUsPerSec;
            } else {
                return false;
            }
        }
        if (rank <= last) return false;
        last = rank;
        if (v > (kMaxPeriodUs - total) / scale) return false;  // also keeps v * scale in range
        total += v * scale;
    }
    if (total <= 0) return false;
    us = total;
    return true;
}

int64_t parse_cost(std::string_view text) {
    if (text.empty()) return -1;
    for (char ch : text) {
        if (ch < '0' || ch > '9') return -1;
    }
    int64_t cost;
    return parse_int(text, 0, kMaxRequests, cost) ? cost : kCostTooLarge;
}

}  // namespace rl
