// Where a key's state lives in Redis:  <prefix>{<zone>:<hash hex>}:<algorithm>
//
// The braces are a Redis Cluster hash tag: every algorithm's state for one key sits in one
// slot, and different keys of a zone spread over the cluster. The user-controlled key only
// appears as its fixed-length hash, so a hostile key cannot inject braces or name a slot by
// its text (the nginx side validates that prefix and zone contain none); the hash's key is
// public, so a client can compute which slot its own keys land on, not reach another's state.
// The algorithm suffix keeps a string state (5 algorithms), a list (the log) and a sorted set
// (the concurrency's slots) from ever sharing a name.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string_view>
#include "core/algo/algorithm.h"
#include "core/keys/key_hash.h"

namespace rl {

constexpr size_t kKeyHashHexLen = 32;  // hi then lo, 16 lowercase hex digits each

// Exact length of redis_key()'s output, and an upper bound over all algorithms.
size_t redis_key_len(std::string_view prefix, std::string_view zone, Algo a) noexcept;
size_t redis_key_max_len(std::string_view prefix, std::string_view zone) noexcept;

// Writes the key into buf (room for redis_key_len bytes; no NUL) and returns its length.
size_t redis_key(char* buf, std::string_view prefix, std::string_view zone, const KeyHash& h, Algo a) noexcept;

// A concurrency slot's member in the key's sorted set: "<owner>.<seq>" in decimal, slot i of a
// request being seq + i. owner is taken below 2^48 and seq below 2^52 (masked: exact in the
// Lua's doubles, so the record sent to the Lua and these names always agree).
constexpr uint64_t kOwnerMask = (uint64_t{1} << 48) - 1;
constexpr uint64_t kSeqMask = (uint64_t{1} << 52) - 1;
constexpr size_t kMemberMaxLen = 15 + 1 + 16;  // 2^48 - 1, '.', (2^52 - 1) + i below 2^53
size_t concurrency_member_len(uint64_t owner, uint64_t seq, uint64_t i = 0) noexcept;
size_t concurrency_member(char* buf, uint64_t owner, uint64_t seq, uint64_t i = 0) noexcept;

// A sync zone's hosts (sync_command.h): one sorted set per zone, "<prefix>{<zone>}:hosts"
// (hash-tagged by the zone: one slot, whichever host asks).
size_t hosts_key_len(std::string_view prefix, std::string_view zone) noexcept;
size_t hosts_key(char* buf, std::string_view prefix, std::string_view zone) noexcept;

// The Redis Cluster slot of a key: CRC16 (XMODEM) of its hash tag, or of the whole key when
// it has none, mod 16384.
constexpr uint16_t kClusterSlots = 16384;
uint16_t cluster_slot(std::string_view key) noexcept;

// CRC16/XMODEM (polynomial 0x1021, initial 0, no reflection): Redis Cluster's key hash.
uint16_t crc16_xmodem(const void* data, size_t len) noexcept;

}  // namespace rl
