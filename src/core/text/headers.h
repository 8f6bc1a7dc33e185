// Response header values: draft-ietf-httpapi-ratelimit-headers-10 (RFC 9651 structured
// field lists) and the legacy X-RateLimit-* trio.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string_view>

namespace rl {

// One applied limit as the headers describe it.
struct HeaderItem {
    std::string_view name;  // policy name (the zone's name), emitted as an sf-string
    int64_t quota = 0;      // q
    int64_t window_s = 0;   // w, seconds; 0: none (a concurrency limit), w= left out
    int64_t remaining = 0;  // r
    int64_t reset_s = 0;    // t, seconds
};

// Seconds for a header from microseconds: rounded up (a client must not come back too early).
int64_t ceil_seconds(int64_t us);
// Retry-After: rounded up and never 0.
int64_t retry_after_seconds(int64_t us);

// Writers fill a caller's buffer (an nginx pool allocation) of at least header_max_len()
// bytes and return the bytes written: no heap allocation on the request path.
size_t header_max_len(const HeaderItem* items, size_t n);
// RateLimit-Policy: "name";q=Q;w=W, "name2";q=...   (list items joined by ", ")
size_t format_policy(char* buf, const HeaderItem* items, size_t n);
// RateLimit: "name";r=R;t=T, ...
size_t format_state(char* buf, const HeaderItem* items, size_t n);

// An RFC 9651 sf-string: "..." with \" and \\ escaped; bytes outside 0x20-0x7e dropped.
size_t write_sf_string(char* buf, std::string_view s);

}  // namespace rl
