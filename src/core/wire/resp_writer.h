// RESP commands written in two passes by one code path (redis_command.cpp, sync_command.cpp):
// measure with a null buffer, then write into a buffer of that size. No heap, no exceptions.
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string_view>
#include "core/algo/algorithm.h"
#include "core/keys/key_hash.h"
#include "core/wire/redis_keys.h"

namespace rl {

// Writes RESP into buf, or only counts the bytes when buf is null: one code path measures
// and writes, so the two passes cannot disagree.
class Resp {
  public:
    explicit Resp(char* buf) : buf_(buf) {}

    size_t size() const { return len_; }

    void array(size_t n) {
        raw("*", 1);
        digits(n);
        raw("\r\n", 2);
    }

    void bulk(std::string_view s) {
        bulk_head(s.size());
        raw(s.data(), s.size());
        raw("\r\n", 2);
    }

    void bulk_int(int64_t v) {
        char tmp[20];
        uint64_t u = v < 0 ? 0 - static_cast<uint64_t>(v) : static_cast<uint64_t>(v);
        size_t n = 0;
        do {
            tmp[sizeof tmp - 1 - n++] = static_cast<char>('0' + u % 10);
            u /= 10;
        } while (u > 0);
        bulk_head(n + (v < 0));
        if (v < 0) raw("-", 1);
        raw(tmp + sizeof tmp - n, n);
        raw("\r\n", 2);
    }

    // A bulk string's head, for a body written piece by piece (then end_bulk()).
    void bulk_head(size_t n) {
        raw("$", 1);
        digits(n);
        raw("\r\n", 2);
    }

    void end_bulk() { raw("\r\n", 2); }

    // An IEEE-754 double, little-endian whatever the host's order: the script unpacks '<d'
    // (cheaper in Lua than an integer). Exact: every value is an integer below 2^53.
    void le_double(int64_t v) {
        static_assert(std::numeric_limits<double>::is_iec559 && sizeof(double) == 8, "IEEE-754 doubles");
        const double d = static_cast<double>(v);
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
        raw(reinterpret_cast<const char*>(&d), 8);  // already in the wire's order
#else
        uint64_t u;
        std::memcpy(&u, &d, sizeof u);
        char b[8];
        for (size_t i = 0; i < 8; i++) b[i] = static_cast<char>((u >> (8 * i)) & 0xff);
        raw(b, 8);
#endif
    }

    // A bulk string of n bytes that write(char*) puts in place (not called when measuring).
    template <class Write>
    void bulk_written(size_t n, Write write) {
        bulk_head(n);
        if (buf_ != nullptr) write(buf_ + len_);
        len_ += n;
        raw("\r\n", 2);
    }

    void bulk_key(std::string_view prefix, std::string_view zone, const KeyHash& h, Algo a) {
        bulk_written(redis_key_len(prefix, zone, a), [&](char* at) { redis_key(at, prefix, zone, h, a); });
    }

  private:
    void raw(const char* s, size_t n) {
        if (buf_ != nullptr && n > 0) std::memcpy(buf_ + len_, s, n);
        len_ += n;
    }

    void digits(uint64_t u) {
        char tmp[20];
        size_t n = 0;
        do {
            tmp[sizeof tmp - 1 - n++] = static_cast<char>('0' + u % 10);
            u /= 10;
        } while (u > 0);
        raw(tmp + sizeof tmp - n, n);
    }

    char* buf_;
    size_t len_ = 0;
};

enum class CommandScript : uint8_t;

// The head of a script call (redis_command.h): the array of 3 + nkeys + nargv, EVAL and the
// text, EVALSHA and the sha or FCALL and the function's name, then nkeys. The keys and the
// arguments follow.
void script_call_head(Resp& r, CommandScript script, bool injected_time, size_t nkeys, size_t nargv);

}  // namespace rl
