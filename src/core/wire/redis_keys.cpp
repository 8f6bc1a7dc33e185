#include "core/wire/redis_keys.h"

#include <cstring>

namespace rl {

namespace {

constexpr size_t kMaxAlgoNameLen = 11;  // "concurrency"

// The bytes around the hex: '{', ':' after the zone, '}', ':' before the algorithm.
constexpr size_t kPunctuation = 4;

size_t put(char* p, std::string_view s) {
    if (!s.empty()) std::memcpy(p, s.data(), s.size());
    return s.size();
}

// Two hex digits per byte value: a key is formatted for every Redis check.
struct HexPairs {
    char v[512];
};

constexpr HexPairs make_hex_pairs() {
    HexPairs t{};
    const char* digits = "0123456789abcdef";
    for (int b = 0; b < 256; b++) {
        t.v[2 * b] = digits[b >> 4];
        t.v[2 * b + 1] = digits[b & 0xf];
    }
    return t;
}

constexpr HexPairs kHexPairs = make_hex_pairs();

size_t put_hex64(char* p, uint64_t v) {
    for (int i = 7; i >= 0; i--) {
        std::memcpy(p + 2 * i, &kHexPairs.v[2 * (v & 0xff)], 2);
        v >>= 8;
    }
    return 16;
}

}  // namespace

size_t redis_key_len(std::string_view prefix, std::string_view zone, Algo a) noexcept {
    return prefix.size() + zone.size() + kPunctuation + kKeyHashHexLen + algo_name(a).size();
}

size_t redis_key_max_len(std::string_view prefix, std::string_view zone) noexcept {
    return prefix.size() + zone.size() + kPunctuation + kKeyHashHexLen + kMaxAlgoNameLen;
}

size_t redis_key(char* buf, std::string_view prefix, std::string_view zone, const KeyHash& h, Algo a) noexcept {
    char* p = buf;
    p += put(p, prefix);
    *p++ = '{';
    p += put(p, zone);
    *p++ = ':';
    p += put_hex64(p, h.hi);
    p += put_hex64(p, h.lo);
    *p++ = '}';
    *p++ = ':';
    p += put(p, algo_name(a));
    return static_cast<size_t>(p - buf);
}

namespace {

size_t put_decimal(char* p, uint64_t v) {
    char tmp[20];
    size_t n = 0;
    do {
        tmp[sizeof tmp - 1 - n++] = static_cast<char>('0' + v % 10);
        v /= 10;
    } while (v > 0);
    if (p != nullptr) std::memcpy(p, tmp + sizeof tmp - n, n);
    return n;
}

}  // namespace

size_t concurrency_member_len(uint64_t owner, uint64_t seq, uint64_t i) noexcept {
    return concurrency_member(nullptr, owner, seq, i);
}

size_t concurrency_member(char* buf, uint64_t owner, uint64_t seq, uint64_t i) noexcept {
    size_t n = put_decimal(buf, owner & kOwnerMask);
    if (buf != nullptr) buf[n] = '.';
    n++;
    return n + put_decimal(buf != nullptr ? buf + n : nullptr, (seq & kSeqMask) + i);
}

constexpr std::string_view kHostsSuffix = "}:hosts";

size_t hosts_key_len(std::string_view prefix, std::string_view zone) noexcept {
    return prefix.size() + 1 + zone.size() + kHostsSuffix.size();
}

size_t hosts_key(char* buf, std::string_view prefix, std::string_view zone) noexcept {
    char* p = buf;
    p += put(p, prefix);
    *p++ = '{';
    p += put(p, zone);
    p += put(p, kHostsSuffix);
    return static_cast<size_t>(p - buf);
}

namespace {

// CRC16/XMODEM one byte at a time: the table of the eight bit steps for each byte value.
struct Crc16Table {
    uint16_t v[256];
};

constexpr Crc16Table make_crc16_table() {
    Crc16Table t{};
    for (int b = 0; b < 256; b++) {
        auto crc = static_cast<uint16_t>(b << 8);
        for (int bit = 0; bit < 8; bit++) crc = static_cast<uint16_t>(crc & 0x8000 ? (crc << 1) ^ 0x1021 : crc << 1);
        t.v[b] = crc;
    }
    return t;
}

constexpr Crc16Table kCrc16 = make_crc16_table();

}  // namespace

uint16_t crc16_xmodem(const void* data, size_t len) noexcept {
    const auto* in = static_cast<const unsigned char*>(data);
    uint16_t crc = 0;
    for (size_t i = 0; i < len; i++) crc = static_cast<uint16_t>((crc << 8) ^ kCrc16.v[((crc >> 8) ^ in[i]) & 0xff]);
    return crc;
}

uint16_t cluster_slot(std::string_view key) noexcept {
    // The tag is what lies between the first '{' and the first '}' after it, if non-empty.
    size_t open = key.find('{');
    if (open != std::string_view::npos) {
        size_t close = key.find('}', open + 1);
        if (close != std::string_view::npos && close > open + 1) key = key.substr(open + 1, close - open - 1);
    }
    return static_cast<uint16_t>(crc16_xmodem(key.data(), key.size()) % kClusterSlots);
}

}  // namespace rl
