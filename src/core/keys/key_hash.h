// 128-bit hash of a limit key (SipHash-2-4-128): fixed size whatever the key's length, so
// slots and Redis keys stay small, and wide enough that no client can make its key share
// state with another's. The key is public (every host must name a client's state in Redis
// alike), so a client can compute the hashes of keys it makes up: the shared-memory table
// places them in buckets with a secret of its own (slot_table.h).
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

// The fixed SipHash key: every host hashes a client's key alike.
constexpr uint64_t kDefaultHashK0 = 0x6e67696e78726174ULL;  // "nginxrat"
constexpr uint64_t kDefaultHashK1 = 0x656c696d69746d6fULL;  // "elimitmo"

}  // namespace rl
