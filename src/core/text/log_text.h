// Bytes from outside (a Redis error reply, a client's header) made safe for one log line.
#pragma once
#include <cstddef>

namespace rl {

// Copies at most `cap` bytes of text into `out`: printable ASCII as is, every other byte as
// \xHH, and "..." when `in` did not fit; so no control character (CR, LF, ESC) reaches the
// log, and no line can be forged or grow without bound. Returns the bytes written (<= cap).
size_t log_text(const void* in, size_t len, char* out, size_t cap);

// Room for log_text's output that says enough for an operator to see what came.
constexpr size_t kLogTextCap = 256;

}  // namespace rl
