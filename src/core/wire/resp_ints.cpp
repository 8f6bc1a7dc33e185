#include "core/wire/resp_ints.h"

namespace rl {

namespace {

// One "<digits>\r\n" number at in[*at, len), after its type byte. kMore if it may continue.
inline RespInts number(const char* in, size_t len, size_t* at, bool sign_ok, int64_t* value) {
    size_t p = *at;
    bool negative = sign_ok && p < len && in[p] == '-';
    p += negative;
    size_t first = p;
    // 19 digits hold every int64: a 20th is looked at only to be refused.
    size_t stop = len - p > 20 ? p + 20 : len;
    uint64_t v = 0;
    for (unsigned d; p < stop && (d = static_cast<unsigned char>(in[p]) - unsigned{'0'}) <= 9; p++) v = v * 10 + d;
    if (p == len) return RespInts::kMore;
    size_t ndigits = p - first;
    if (ndigits == 0 || ndigits > 19 || (ndigits > 1 && in[first] == '0') || (negative && v == 0)) {
        return RespInts::kOther;
    }
    if (v > static_cast<uint64_t>(INT64_MAX) + (negative ? 1 : 0)) return RespInts::kOther;
    if (in[p] != '\r') return RespInts::kOther;
    if (p + 1 == len) return RespInts::kMore;
    if (in[p + 1] != '\n') return RespInts::kOther;
    *value = negative ? static_cast<int64_t>(0 - v) : static_cast<int64_t>(v);
    *at = p + 2;
    return RespInts::kDone;
}

}  // namespace

RespInts parse_int_array(const char* in, size_t len, size_t want, int64_t* out, size_t* used) noexcept {
    if (len == 0) return RespInts::kMore;
    if (in[0] != '*') return RespInts::kOther;
    size_t at = 1;
    int64_t n = 0;
    RespInts r = number(in, len, &at, false, &n);
    if (r != RespInts::kDone) return r;
    if (static_cast<uint64_t>(n) != want) return RespInts::kOther;
    for (size_t i = 0; i < want; i++) {
        if (at == len) return RespInts::kMore;
        if (in[at] != ':') return RespInts::kOther;
        at++;
        r = number(in, len, &at, true, &out[i]);
        if (r != RespInts::kDone) return r;
    }
    *used = at;
    return RespInts::kDone;
}

}  // namespace rl
