// Fixed-slot hash table with exact LRU order, laid out inside one caller-given memory block
// (nginx shared memory). Plain data and 32-bit offsets only, so every worker can use it at
// whatever address, and it survives a reload untouched. The caller serialises access.
//
// Key hashes are public (the same on every host, for Redis), so a client could choose keys
// whose hashes share a bucket and make every lookup walk one long chain. The bucket index is
// therefore a keyed multiply-shift of the hash with a random secret of the table's own.
//
// A slot is 56 bytes (hash, chain, LRU links, algorithm, generation, State) plus, for the
// sliding log, its ring of timestamps. A bucket head is 4 bytes, so a plain key costs about 60
// bytes.
//
// Lives: a slot is born again each time its state starts from nothing (made for a key, recycled
// for another, reset by the API). Its generation, 24 bits, counts its births; a request that
// took from a key's state records which life it took from (SlotLife) and gives back or settles
// only to that one, so a key's new life owes nothing of the old one and gets nothing of it.
#pragma once
#include <cstddef>
#include <cstdint>
#include "core/keys/key_hash.h"
#include "core/algo/state.h"

namespace rl {

struct Slot {
    KeyHash hash;
    uint32_t chain;      // next slot in the same bucket, index + 1 (0 = end)
    uint32_t lru_prev;   // towards the most recently used, index + 1
    uint32_t lru_next;   // towards the least recently used, index + 1
    uint8_t algo;
    uint8_t gen[3];      // its generation, little-endian: kept when the rest is zeroed (slot_gen)
    State state;
};
static_assert(sizeof(Slot) == 56, "slot layout is part of the shared-memory format");

struct TableHeader {
    uint32_t magic;
    uint32_t slot_size;   // bytes per slot, ring included
    uint32_t nslots;
    uint32_t nbuckets;    // power of two
    uint32_t used;        // slots ever handed out; they are recycled only by eviction
    uint32_t lru_head;    // most recently used, index + 1
    uint32_t lru_tail;    // least recently used, index + 1
    uint32_t bucket_bits; // nbuckets == 1 << bucket_bits
    uint64_t evictions;
    uint64_t secret;      // odd, random: the bucket index's multiplier
    // The user's words, kept with the table (zeroed when it is laid out, kept across reloads);
    // the user may read them without its lock, atomically (rejected.h's hints).
    int64_t hints[16];
    int64_t block_until;  // the user's (under its lock): when every block after abuse kept in the table has ended
};

// Which life of which slot a key's state was taken from. A later life of the same slot
// matches only after 2^24 births of that one slot (the generation wraps) with the key born in
// it last: see table_find_life.
struct SlotLife {
    uint32_t ref = 0;  // the slot, index + 1 (0: nothing taken)
    uint32_t gen = 0;
};

constexpr uint32_t kGenMask = 0xffffff;

inline uint32_t slot_gen(const Slot* s) {
    return s->gen[0] | static_cast<uint32_t>(s->gen[1]) << 8 | static_cast<uint32_t>(s->gen[2]) << 16;
}

// Bytes one slot takes for a ring of `ring_bytes`.
uint32_t slot_size_for(uint64_t ring_bytes);

// How many slots a block of `bytes` holds at `slot_size` (0 if not even one).
uint32_t table_capacity(size_t bytes, uint32_t slot_size);

// Whether a table found in memory (after a reload) has this module's layout and slot size.
bool table_compatible(const TableHeader* t, uint32_t slot_size);

// How many timestamps the ring of each slot holds.
inline uint64_t ring_capacity(const TableHeader* t) { return (t->slot_size - sizeof(Slot)) / sizeof(int64_t); }

// Lays out an empty table over [mem, mem + bytes); nullptr if not one slot fits. `secret`
// should be random (it is made odd): it places keys in buckets.
TableHeader* table_format(void* mem, size_t bytes, uint32_t slot_size, uint64_t secret);

// How many slots share the bucket of (hash, algo), the key's own included if present.
uint32_t table_chain_length(TableHeader* t, const KeyHash& hash, uint8_t algo);

// The slot of (hash, algo), created if absent (zeroed: a fresh key, in a new life) by recycling
// the least recently used slot when the table is full. Marks it most recently used. Never fails.
Slot* table_acquire(TableHeader* t, const KeyHash& hash, uint8_t algo, bool* fresh);

// The slot of (hash, algo) if present, nullptr otherwise: nothing created, the LRU order unchanged.
Slot* table_find(TableHeader* t, const KeyHash& hash, uint8_t algo);

// The life a slot lives now (recorded by a request that takes from its state).
SlotLife slot_life(const TableHeader* t, const Slot* s);

// The slot of (hash, algo) if it still lives `life`, nullptr otherwise (the key reset, dropped
// from a full table, made again elsewhere or in the same slot, the table laid out anew): nothing
// created, the LRU order unchanged.
Slot* table_find_life(TableHeader* t, const KeyHash& hash, uint8_t algo, SlotLife life);

// The key's state starts afresh where it is (the API's reset): state and ring zeroed, a new life.
void table_reset(TableHeader* t, Slot* s);

// Slots by reference (index + 1, 1 .. t->used): lists kept beside the table (the dirty keys of
// a sync zone) name slots this way. A slot may since have been recycled for another key.
Slot* table_slot(TableHeader* t, uint32_t ref);
uint32_t table_ref(const TableHeader* t, const Slot* s);

// The sliding log's ring that follows a slot (slot_size - sizeof(Slot) bytes).
inline int64_t* slot_ring(Slot* s) { return reinterpret_cast<int64_t*>(s + 1); }

}  // namespace rl
