// 128-bit keyed hash of a limit key (SipHash-2-4-128): fixed size whatever the key's length,
// so slots stay small, and keyed so clients cannot aim collisions at one another.
#pragma once
#include <cstddef>
#include <cstdint>

namespace rl {

struct KeyHash {
    uint64_t lo = 0;
    uint64_t hi = 0;
    bool operator==(const KeyHash& o) const { return lo == o.lo && hi == o.hi; }
};

KeyHash hash_key(const void* data, size_t len, uint64_t k0, uint64_t k1);

// Fixed key used when none is configured, so every host hashes the same key alike.
constexpr uint64_t kDefaultHashK0 = 0x6e67696e78726174ULL;  // "nginxrat"
constexpr uint64_t kDefaultHashK1 = 0x656c696d69746d6fULL;  // "elimitmo"

}  // namespace rl
