// Block after abuse (Policy::block_us): once a limit rejects a key by itself, every request of
// the key is rejected until the block ends, whatever its state refills meanwhile. A block
// consumes nothing and leaves the key's state untouched; a rejection while blocked does not
// extend it. Kept beside the key's state: in shared memory a slot of the zone's table with a
// tagged algo byte (State::a = blocked until, on the store's clock), in Redis a key of its own
// (redis_command.h).
#pragma once
#include <cstdint>
#include "core/algo/decision.h"
#include "core/algo/policy.h"

namespace rl {

constexpr uint8_t kBlockTag = 0x40;  // slot algo = kBlockTag | policy algo (kRejectedTag is 0x80)

// Decision::block
constexpr uint8_t kBlockNone = 0;
constexpr uint8_t kBlockLive = 1;     // rejected by a live block: retry_after_us and reset_us are its time left
constexpr uint8_t kBlockStarted = 2;  // rejected by the limit itself, which started a block of block_us

// Whether a block that lasts until `until` still holds at `now`.
inline bool block_live(int64_t until, int64_t now) { return until > now; }

// The decision on any request while a block holds (block_live(until, now)): rejected, nothing
// remaining, retry and reset when the block ends.
Decision blocked_decision(const Policy& p, int64_t until, int64_t now);

// Whether decision d (made without a live block) starts a block: the limit rejected by itself.
inline bool starts_block(const Policy& p, const Decision& d) {
    return p.block_us > 0 && !d.allowed && d.block == kBlockNone;
}

// The wait a rejection announces (Retry-After): the decision's own, or at least the block it
// started; kNever stays kNever.
int64_t block_retry_after(const Policy& p, const Decision& d);

// One request decided with its block, as the shared-memory pass does it for a key alone:
// a live block decides; otherwise decide(), and a rejection starts a block (*until set to
// now + block_us, d.block = kBlockStarted). The reference the Redis Lua is tested against.
Decision decide_blocking(const State& s, int64_t* until, const Policy& p, int64_t now, int64_t cost,
                         const int64_t* ring = nullptr);

}  // namespace rl
