// A decide reply read straight from the bytes Redis sent: an array of exactly the integers the
// batch expects, without building a reply object per element. Anything else (an error, MOVED,
// another length, a nested or non-integer element, an odd encoding) is not this parser's: the
// caller hands those bytes to the general reader, which treats them as it always has.
#pragma once

#include <cstddef>
#include <cstdint>

namespace rl {

enum class RespInts {
    kDone,   // the reply was `want` integers, now in out[0, want); *used bytes of `in` were it
    kMore,   // a prefix of such a reply: call again with more bytes (from the same start)
    kOther,  // not such a reply: nothing of `in` is consumed
};

// Parses the reply at the start of in[0, len). Strict: "*<want>\r\n" then `want` times
// ":<int64>\r\n", digits without a sign but a leading '-', no leading zeros, no overflow.
// Restartable rather than resumable: a reply split between reads is parsed again from its start
// once more bytes came (bounded: `want` is the batch's, a few hundred integers).
RespInts parse_int_array(const char* in, size_t len, size_t want, int64_t* out, size_t* used) noexcept;

}  // namespace rl
