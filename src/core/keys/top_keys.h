// The keys a zone rejects most, lately: a heavy-hitter summary of K entries laid out inside one
// caller-given memory block (nginx shared memory), plain data and offsets only, no heap. The
// caller serialises access (the zone's lock) and gives the time to every call.
//
// Filtered Space-Saving (Homem and Carvalho, 2010): Space-Saving's K counters, each an upper
// bound `count` on its key's rejections with `error` (count - error <= true <= count), plus M
// cells that stand for the keys not in the table. A key not in the table adds to its cell
// (a keyed hash of its key picks one) and enters the table only once its cell's count exceeds
// the smallest entry's, evicting it (whose count then goes to the victim's cell); it enters with
// count = cell + 1, error = cell. A cell counts its first key apart from the others (TopCell). Chosen over plain Space-Saving, whose every new key evicts
// the smallest (many keys rejected once each keep replacing each other and push out a key that
// floods at a lower rate than their sum: 3 keys flooding among 1,500 rejected once are its top 3
// from K = 34 on, counted exactly in half the orders at K = 64; here from K = 4, exactly:
// tests/bench/top_keys.sh), and over Misra-Gries, whose decrements make every count a lower
// bound that each new key lowers. It keeps Space-Saving's bound: every error and every cell stays below the
// smallest count, the counts sum to at most N, so error <= N / K for N rejections; and any key
// rejected more than N / K times is in the table.
//
// Counts cover a window: the current one (aligned on multiples of the window, a minute by
// default) and the previous one, each its own summary: a key's count is the sum of both (from
// the other summary's cell when it is absent there), so the table shows the last one to two
// minutes, and a key that stops falls out after two. The bound is then N / K with N the
// rejections of the two windows.
//
// A key's text (the caller's readable form of it) is kept, cut at kTopTextMax bytes. Memory:
// top_keys_bytes(K) (two summaries: entries of 128 bytes, the heap, the index, the cells).
#pragma once
#include <cstddef>
#include <cstdint>
#include "core/keys/key_hash.h"

namespace rl {

constexpr size_t kTopTextMax = 64;      // bytes of a key's text kept (an IPv6 prefix is 43)
constexpr uint32_t kTopMaxK = 4096;     // entries a summary may have
constexpr int64_t kTopWindowUs = 60000000;  // the default window: a minute

enum class TopKind : uint8_t { rejected = 0, blocked = 1 };

struct TopEntry {
    KeyHash hash;
    uint64_t count;    // upper bound on the key's rejections in this summary's window
    uint64_t error;    // count - error <= the true count
    uint64_t blocked;  // of the count, rejections by a block, counted since the key entered
    int64_t first_us;  // when it entered this summary
    int64_t last_us;   // its latest rejection
    uint32_t heap;     // its place in the summary's min-heap
    uint16_t text_len;
    uint8_t flags;     // kTopLive, kTopTruncated
    uint8_t pad;
    char text[kTopTextMax];
};
static_assert(sizeof(TopEntry) == 128, "entry layout is part of the shared-memory format");

// A cell: bounds for the keys not in the table that its keyed hash picks (top_keys.cpp).
struct TopCell {
    uint32_t fp;     // the owner's fingerprint
    uint32_t own;    // the owner's bound (0: no owner yet)
    uint32_t other;  // every other key's bound
};
static_assert(sizeof(TopCell) == 12, "cell layout is part of the shared-memory format");

// One window's summary; K entries, the heap, the index and the cells follow it.
struct TopSummary {
    int64_t until_us;   // the window's end (exclusive); 0: never used
    uint64_t total;     // rejections recorded in the window (N)
    uint64_t evictions;
    uint32_t used;      // entries handed out (dropped keys' included: they keep their count)
    uint32_t pad;
};

struct TopKeys {
    uint32_t magic;
    uint32_t k;
    uint32_t ncells;       // power of two
    uint32_t nindex;       // power of two, >= 2K
    uint32_t cell_bits;
    uint32_t index_bits;
    uint32_t cur;          // which summary is the current window (0 or 1)
    uint32_t pad;
    int64_t window_us;
    uint64_t secret;       // odd, random: places keys in the index and the cells
    uint64_t summary_bytes;
};

// A key's readable text, written on demand (only when the key enters a summary): `write` puts
// at most `cap` bytes of it into `out` and returns its whole length (more than cap: cut).
struct TopText {
    size_t (*write)(const void* arg, char* out, size_t cap);
    const void* arg;
};
// A TopText of bytes the caller holds: arg points to a TopTextBytes.
struct TopTextBytes {
    const char* data;
    size_t len;
};
size_t top_text_bytes(const void* arg, char* out, size_t cap);

// What a read gives: a key's counts over the two windows, its text copied.
struct TopItem {
    KeyHash hash;
    uint64_t count;    // upper bound on its rejections (blocked included) in the window
    uint64_t error;    // count - error <= true count <= count
    uint64_t blocked;  // rejections by a block counted while it was in the table (a lower bound)
    int64_t first_us;
    int64_t last_us;
    uint16_t text_len;
    bool truncated;
    char text[kTopTextMax];
};

// The window a read covers and the bound every error in it keeps.
struct TopWindow {
    int64_t from_us;     // the start of the older window counted (0: nothing counted)
    int64_t until_us;    // the end of the newer one
    uint64_t total;      // rejections recorded in them (N)
    uint64_t bound;      // N / K, summed over the two summaries: every error is at most this
};

// The cells of a summary of K entries.
uint32_t top_keys_cells(uint32_t k);
// The bytes a summary of K entries takes (0 if K is 0 or above kTopMaxK).
size_t top_keys_bytes(uint32_t k);

// Lays out an empty summary of `k` entries over [mem, mem + bytes); nullptr if it does not fit,
// k is out of range or the window is not positive. `secret` should be random (it is made odd).
TopKeys* top_keys_format(void* mem, size_t bytes, uint32_t k, int64_t window_us, uint64_t secret);

// Whether a summary found in memory (after a reload) has this layout, k and window.
bool top_keys_compatible(const TopKeys* t, uint32_t k, int64_t window_us);

// Counts one rejection of a key at `now_us` (unix microseconds).
void top_keys_record(TopKeys* t, const KeyHash& hash, const TopText& text, TopKind kind, int64_t now_us);

// The `n` keys with the largest counts at `now_us`, largest first, into out[0..n); returns how
// many were written.
size_t top_keys_read(const TopKeys* t, int64_t now_us, TopItem* out, size_t n);

// Forgets a key (its reset): it is no longer shown; its entry keeps its count without a key
// until evicted, so the bound holds for the others. True if the key was there.
bool top_keys_drop(TopKeys* t, const KeyHash& hash);

TopWindow top_keys_window(const TopKeys* t, int64_t now_us);

}  // namespace rl
