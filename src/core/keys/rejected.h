// Rejections Redis made, remembered on the host until they expire: a key Redis rejected with
// Retry-After X stays rejected there until X unless units are given back (other hosts can only
// consume more), so its requests until then are rejected without asking Redis, with what Redis
// would answer. Kept in a slot of the zone's table beside the key's own (its algo byte tagged).
// State: a = until (local clock, us), b = when the key is back to fresh (reset), c = the cost
// that was rejected and the remaining units Redis reported, as cost * 2^31 + remaining (each
// below 2^31, or nothing is remembered), plus 2^62 while a request asks (below): only requests
// of that cost are answered from it (a cheaper one may fit sooner, a costlier one may wait
// longer or never fit: Redis is asked).
//
// An admission remembers too: when Redis's reply leaves no room for another request of the same
// cost, the rejection that request would get (rejection_after_admission), so that a key held at
// its limit costs one call per admission, not one more for the rejection that follows it.
//
// When an entry runs out, one request asks Redis for the host (take_ask): until its reply, the
// others of that cost are rejected from the entry, for as long as Redis could admit at most one
// of them (a bucket, whose unit frees one cost's interval after the other; at most the Redis
// timeout, so a reply lost leaves no key answered from memory; the asker's reply, its failure
// or its request's end ends it sooner). If the asker is admitted, no other request of that cost
// could be (from any host: others only consume more); if it is rejected, another host took the
// unit, and a request of this host would have been rejected too, unless other hosts' requests
// of another cost left part of it, or the asker reached Redis before the unit freed (an entry
// counts from when its call was sent, so it may run out up to a one-way trip early): then the
// others are rejected, for one round trip, while Redis might have admitted one of them.
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
// The rejection an admission of `cost` reported as `d` leaves behind: true, with *out what the
// next request of that cost would get, if it would be rejected (a bucket: its wait from the
// reply's reset, rounded down; a fixed window: until the next one). Worth remembering as well.
bool rejection_after_admission(const Decision& d, const Policy& p, int64_t cost, Decision* out);
// A request of `cost` at `now` finds `s` run out: true if it is to ask Redis for the host, `s`
// then answering the others until min(now + ask_us, while Redis could admit at most one
// request of that cost) (their Retry-After: that, counted down). False: it asks on its own, as
// every request does (not a bucket, no entry for its cost, one asks already or asked last,
// the entry ran out too long ago).
bool take_ask(State& s, const Policy& p, int64_t now, int64_t cost, int64_t ask_us);
// Whether `s` answers for a request that asks Redis (take_ask).
bool asking(const State& s);

// How many hints a table keeps (TableHeader::hints), and which covers a key (its hash).
constexpr size_t kRejectionHints = 16;
inline size_t rejection_hint(const KeyHash& key) { return static_cast<size_t>(key.hi >> 60); }
static_assert(kRejectionHints == 16, "rejection_hint takes the hash's top 4 bits");
// Until when an entry of `p` may answer a request, itself or through an asker (take_ask).
int64_t entry_end(const State& entry, const Policy& p);
// The hint covering an entry, once `entry` is remembered: its new value.
inline int64_t raised_hint(int64_t hint, const State& entry, const Policy& p) {
    int64_t end = entry_end(entry, p);
    return end > hint ? end : hint;
}
// Whether an entry of a key whose hint is `hint` may hold at `now`: if not, there is none to look up.
inline bool hint_may_hold(int64_t hint, int64_t now) { return hint > now; }

}  // namespace rl
