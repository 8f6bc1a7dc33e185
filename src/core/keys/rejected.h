// Rejections Redis made, remembered on the host until they expire: a key Redis rejected with
// Retry-After X stays rejected there until X unless units are given back (other hosts can only
// consume more), so its requests until then are rejected without asking Redis, with what Redis
// would answer. Kept in a slot of the zone's table beside the key's own (its algo byte tagged).
// State: a = until (local clock, us), b = when the key is back to fresh (reset), c = the cost
// that was rejected and the remaining units Redis reported, as cost * 2^31 + remaining (each
// below 2^31, or nothing is remembered): only requests of that cost are answered from it (a
// cheaper one may fit sooner, a costlier one may wait longer or never fit: Redis is asked).
//
// Hints: the zone's table keeps, per group of keys (TableHeader::hints), until when a rejection
// remembered for one of them may hold (0: none), raised with every entry and cleared only once
// passed. Read without the lock, it spares the lock, the lookup and the clock to every key of a
// group with none (a zone that never rejected, or not lately): a stale read only means a call
// to Redis.
#pragma once
#include <cstddef>
#include <cstdint>
#include "core/algo/decision.h"
#include "core/keys/key_hash.h"
#include "core/algo/policy.h"
#include "core/algo/state.h"

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

// How many hints a table keeps (TableHeader::hints), and which covers a key (its hash).
constexpr size_t kRejectionHints = 16;
inline size_t rejection_hint(const KeyHash& key) { return static_cast<size_t>(key.hi >> 60); }
static_assert(kRejectionHints == 16, "rejection_hint takes the hash's top 4 bits");
// The hint covering an entry, once `entry` is remembered: its new value.
inline int64_t raised_hint(int64_t hint, const State& entry) { return entry.a > hint ? entry.a : hint; }
// Whether an entry of a key whose hint is `hint` may hold at `now`: if not, there is none to look up.
inline bool hint_may_hold(int64_t hint, int64_t now) { return hint > now; }

}  // namespace rl
