// Bytes from outside (a Redis reply, a node's or a host's name, a Sentinel's answer, a
// certificate's names, a client's header) made safe for one log line: the one rule every log
// path applies to them.
#pragma once
#include <cstddef>
#include <string_view>

namespace rl {

// Copies at most `cap` bytes of text into `out`: printable ASCII as is, every other byte as
// \xHH, and "..." when `in` did not fit; so no control character (CR, LF, ESC) reaches the
// log, and no line can be forged or grow without bound. Returns the bytes written (<= cap).
size_t log_text(const void* in, size_t len, char* out, size_t cap);

// Room for log_text's output that says enough for an operator to see what came.
constexpr size_t kLogTextCap = 256;

// log_text into a buffer of its own, for a log call's "%*s": LogText t(p, n); ... t.len, t.text.
struct LogText {
    char text[kLogTextCap];
    size_t len;
    LogText(const void* in, size_t n) : len(log_text(in, n, text, sizeof(text))) {}
    explicit LogText(std::string_view s) : LogText(s.data(), s.size()) {}
};

}  // namespace rl
