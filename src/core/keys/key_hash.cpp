// SipHash-2-4 with 128-bit output (Aumasson & Bernstein), written from the paper's
// description: 2 compression rounds per 8-byte word, 4 finalisation rounds per output word.
#include "core/keys/key_hash.h"

#include <cstring>

namespace rl {

namespace {

inline uint64_t rotl(uint64_t x, int b) { return (x << b) | (x >> (64 - b)); }

// An 8-byte little-endian word: memcpy avoids unaligned access; a swap only on big-endian hosts.
inline uint64_t load_le64(const unsigned char* p) {
    uint64_t v;
    std::memcpy(&v, p, sizeof v);
#if defined(__BYTE_ORDER__) && defined(__ORDER_LITTLE_ENDIAN__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    return v;
#elif defined(__BYTE_ORDER__) && defined(__ORDER_BIG_ENDIAN__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    return __builtin_bswap64(v);
#else
    (void)v;
    uint64_t r = 0;
    for (int i = 7; i >= 0; i--) r = (r << 8) | p[i];
    return r;
#endif
}

struct Sip {
    uint64_t v0, v1, v2, v3;

    void round() {
        v0 += v1; v1 = rotl(v1, 13); v1 ^= v0; v0 = rotl(v0, 32);
        v2 += v3; v3 = rotl(v3, 16); v3 ^= v2;
        v0 += v3; v3 = rotl(v3, 21); v3 ^= v0;
        v2 += v1; v1 = rotl(v1, 17); v1 ^= v2; v2 = rotl(v2, 32);
    }

    void compress(uint64_t m) {
        v3 ^= m;
        round();
        round();
        v0 ^= m;
    }

    uint64_t finish_word() {
        for (int i = 0; i < 4; i++) round();
        return v0 ^ v1 ^ v2 ^ v3;
    }
};

}  // namespace

KeyHash hash_key(const void* data, size_t len, uint64_t k0, uint64_t k1) {
    const auto* in = static_cast<const unsigned char*>(data);
    // "somepseudorandomlygeneratedbytes"; v1 ^= 0xee marks the 128-bit variant.
    Sip s{k0 ^ 0x736f6d6570736575ULL, k1 ^ 0x646f72616e646f6dULL ^ 0xee, k0 ^ 0x6c7967656e657261ULL,
          k1 ^ 0x7465646279746573ULL};

    size_t whole = len - len % 8;
    for (size_t i = 0; i < whole; i += 8) s.compress(load_le64(in + i));

    // Last word: the 0..7 remaining bytes, little-endian, with len mod 256 in the top byte.
    uint64_t last = static_cast<uint64_t>(len & 0xff) << 56;
    for (size_t i = 0; i < len % 8; i++) last |= static_cast<uint64_t>(in[whole + i]) << (8 * i);
    s.compress(last);

    KeyHash h;
    s.v2 ^= 0xee;
    h.lo = s.finish_word();
    s.v1 ^= 0xdd;
    h.hi = s.finish_word();
    return h;
}

}  // namespace rl
