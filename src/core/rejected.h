// Rejections Redis made, remembered on the host until they expire: a key Redis rejected with
// Retry-After X stays rejected there until X unless units are given back (other hosts can only
// consume more), so its requests until then are rejected without asking Redis, with what Redis
// would answer. Kept in a slot of the zone's table beside the key's own (its algo byte tagged).
// State: a = until (local clock, us), b = when the key is back to fresh (reset), c = the cost
// that was rejected and the remaining units Redis reported, as cost * 2^31 + remaining (each
// below 2^31, or nothing is remembered): only requests of that cost are answered from it (a
// cheaper one may fit sooner, a costlier one may wait longer or never fit: Redis is asked).
#pragma once
#include <cstdint>
#include "decision.h"
#include "key_hash.h"
#include "policy.h"
#include "state.h"

namespace rl {

constexpr uint8_t kRejectedTag = 0x80;  // slot algo = kRejectedTag | policy algo

// Where the entry of a key's rejections under `p` is kept: the key's hash mixed with the
// policy's numbers (another burst or rate decides otherwise) and the caller's `epoch`.
KeyHash rejection_key(const KeyHash& key, const Policy& p, uint64_t epoch = 0);

// Whether a decision is worth remembering: a rejection with a finite wait, of a rate (a
// concurrency slot may free at any time) without a block (Redis tells a block's rejections
// apart: block.h).
bool rejection_cacheable(const Decision& d, const Policy& p, int64_t cost);
// The entry for a rejection decided at `now` (local clock).
State remember_rejection(const Decision& d, int64_t now, int64_t cost);
// A request of `cost` at `now`: true, with *out the rejection Redis would give, while the
// entry holds for it.
bool cached_rejection(const State& s, const Policy& p, int64_t now, int64_t cost, Decision* out);

}  // namespace rl
