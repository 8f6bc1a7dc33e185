// Written from the FIPS 180-4 description: 512-bit blocks, big-endian words, 80 rounds over
// a 5-word state, the message padded with 0x80, zeros and its bit length.
#include "core/wire/sha1.h"

#include <cstring>

namespace rl {

namespace {

inline uint32_t rotl(uint32_t x, int n) { return (x << n) | (x >> (32 - n)); }

void compress(uint32_t h[5], const unsigned char* block) {
    uint32_t w[80];
    for (int t = 0; t < 16; t++) {
        w[t] = static_cast<uint32_t>(block[4 * t]) << 24 | static_cast<uint32_t>(block[4 * t + 1]) << 16 |
               static_cast<uint32_t>(block[4 * t + 2]) << 8 | static_cast<uint32_t>(block[4 * t + 3]);
    }
    for (int t = 16; t < 80; t++) w[t] = rotl(w[t - 3] ^ w[t - 8] ^ w[t - 14] ^ w[t - 16], 1);

    uint32_t a = h[0], b = h[1], c = h[2], d = h[3], e = h[4];
    for (int t = 0; t < 80; t++) {
        uint32_t f, k;
        if (t < 20) {
            f = (b & c) | (~b & d);  // Ch
            k = 0x5a827999;
        } else if (t < 40) {
            f = b ^ c ^ d;  // Parity
            k = 0x6ed9eba1;
        } else if (t < 60) {
            f = (b & c) | (b & d) | (c & d);  // Maj
            k = 0x8f1bbcdc;
        } else {
            f = b ^ c ^ d;
            k = 0xca62c1d6;
        }
        uint32_t tmp = rotl(a, 5) + f + e + k + w[t];
        e = d;
        d = c;
        c = rotl(b, 30);
        b = a;
        a = tmp;
    }
    h[0] += a;
    h[1] += b;
    h[2] += c;
    h[3] += d;
    h[4] += e;
}

}  // namespace

void sha1(const void* data, size_t len, uint8_t out[kSha1Bytes]) {
    uint32_t h[5] = {0x67452301, 0xefcdab89, 0x98badcfe, 0x10325476, 0xc3d2e1f0};
    const auto* in = static_cast<const unsigned char*>(data);
    size_t whole = len - len % 64;
    for (size_t i = 0; i < whole; i += 64) compress(h, in + i);

    // The tail, 0x80, zeros up to 56 mod 64, then the length in bits as a big-endian 64-bit word:
    // one block, or two when fewer than 9 bytes are left in the first.
    unsigned char tail[128] = {};
    size_t rest = len - whole;
    if (rest > 0) std::memcpy(tail, in + whole, rest);
    tail[rest] = 0x80;
    size_t tail_len = rest < 56 ? 64 : 128;
    uint64_t bits = static_cast<uint64_t>(len) * 8;
    for (int i = 0; i < 8; i++) tail[tail_len - 1 - i] = static_cast<unsigned char>(bits >> (8 * i));
    for (size_t i = 0; i < tail_len; i += 64) compress(h, tail + i);

    for (int i = 0; i < 5; i++) {
        out[4 * i] = static_cast<uint8_t>(h[i] >> 24);
        out[4 * i + 1] = static_cast<uint8_t>(h[i] >> 16);
        out[4 * i + 2] = static_cast<uint8_t>(h[i] >> 8);
        out[4 * i + 3] = static_cast<uint8_t>(h[i]);
    }
}

void sha1_hex(const void* data, size_t len, char out[kSha1HexLen + 1]) {
    static const char kHex[] = "0123456789abcdef";
    uint8_t digest[kSha1Bytes];
    sha1(data, len, digest);
    for (size_t i = 0; i < kSha1Bytes; i++) {
        out[2 * i] = kHex[digest[i] >> 4];
        out[2 * i + 1] = kHex[digest[i] & 0xf];
    }
    out[kSha1HexLen] = '\0';
}

}  // namespace rl
