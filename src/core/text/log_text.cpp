#include "core/text/log_text.h"

namespace rl {

namespace {

bool is_plain(unsigned char ch) { return ch >= 0x20 && ch < 0x7f && ch != '\\'; }

}  // namespace

size_t log_text(const void* in, size_t len, char* out, size_t cap) {
    static const char kHex[] = "0123456789abcdef";
    constexpr size_t kEllipsis = 3;
    const auto* p = static_cast<const unsigned char*>(in);
    size_t full = 0;
    for (size_t i = 0; i < len && full <= cap; i++) full += is_plain(p[i]) ? 1 : 4;
    // When all of it does not fit, room is kept for the ellipsis; an escape is never cut.
    size_t room = full <= cap ? cap : (cap < kEllipsis ? 0 : cap - kEllipsis);
    size_t o = 0;
    for (size_t i = 0; i < len; i++) {
        bool plain = is_plain(p[i]);
        if (o + (plain ? 1 : 4) > room) break;
        if (plain) {
            out[o++] = static_cast<char>(p[i]);
        } else {
            out[o++] = '\\';
            out[o++] = 'x';
            out[o++] = kHex[p[i] >> 4];
            out[o++] = kHex[p[i] & 15];
        }
    }
    if (full > cap && cap >= kEllipsis) {
        for (size_t k = 0; k < kEllipsis; k++) out[o++] = '.';
    }
    return o;
}

}  // namespace rl
