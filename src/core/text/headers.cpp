#include "core/text/headers.h"

#include <cstring>

#include "core/text/rate.h"  // kUsPerSec

namespace rl {

namespace {

// The draft defines q, w, r and t as non-negative Integers, and RFC 9651 Integers have at
// most 15 digits: a value outside would make a recipient discard the whole field.
constexpr int64_t kMaxSfInteger = 999999999999999LL;
constexpr size_t kMaxIntLen = 20;  // what any int64 could take ("-9223372036854775808")

size_t write_int(char* buf, int64_t v) {
    if (v < 0) v = 0;
    if (v > kMaxSfInteger) v = kMaxSfInteger;
    char tmp[kMaxIntLen];
    size_t n = 0;
    do {
        tmp[n++] = static_cast<char>('0' + v % 10);
        v /= 10;
    } while (v > 0);
    for (size_t i = 0; i < n; i++) buf[i] = tmp[n - 1 - i];
    return n;
}

size_t write_lit(char* buf, const char* s) {
    size_t n = std::strlen(s);
    std::memcpy(buf, s, n);
    return n;
}

// One list item: "name";<k1>=<v1>;<k2>=<v2>, items joined by ", ".
size_t format_items(char* buf, const HeaderItem* items, size_t n, const char* k1, int64_t HeaderItem::*v1,
                    const char* k2, int64_t HeaderItem::*v2) {
    char* p = buf;
    for (size_t i = 0; i < n; i++) {
        if (i > 0) p += write_lit(p, ", ");
        p += write_sf_string(p, items[i].name);
        p += write_lit(p, k1);
        p += write_int(p, items[i].*v1);
        if (v2 == &HeaderItem::window_s && items[i].window_s == 0) continue;  // no window: a concurrency limit
        p += write_lit(p, k2);
        p += write_int(p, items[i].*v2);
    }
    return static_cast<size_t>(p - buf);
}

}  // namespace

int64_t ceil_seconds(int64_t us) {
    if (us <= 0) return 0;
    return us / kUsPerSec + (us % kUsPerSec != 0);
}

int64_t retry_after_seconds(int64_t us) {
    int64_t s = ceil_seconds(us);
    return s < 1 ? 1 : s;
}

size_t header_max_len(const HeaderItem* items, size_t n) {
    // Per item: the name with every byte escaped plus its quotes, two ";k=" and two
    // integers of any int64's width (more than write_int ever emits); ", " between items.
    size_t len = 0;
    for (size_t i = 0; i < n; i++) len += 2 + 2 * items[i].name.size() + 2 * (3 + kMaxIntLen);
    if (n > 1) len += 2 * (n - 1);
    return len;
}

size_t format_policy(char* buf, const HeaderItem* items, size_t n) {
    return format_items(buf, items, n, ";q=", &HeaderItem::quota, ";w=", &HeaderItem::window_s);
}

size_t format_state(char* buf, const HeaderItem* items, size_t n) {
    return format_items(buf, items, n, ";r=", &HeaderItem::remaining, ";t=", &HeaderItem::reset_s);
}

size_t write_sf_string(char* buf, std::string_view s) {
    char* p = buf;
    *p++ = '"';
    for (char ch : s) {
        auto c = static_cast<unsigned char>(ch);
        if (c < 0x20 || c > 0x7e) continue;  // not allowed in an sf-string, and no escape exists
        if (c == '"' || c == '\\') *p++ = '\\';
        *p++ = static_cast<char>(c);
    }
    *p++ = '"';
    return static_cast<size_t>(p - buf);
}

}  // namespace rl
