// In-flight limits: at most `requests` requests of a key at once (Policy::requests; the
// policy's algo is Algo::concurrency). A request takes a slot when admitted and gives it back
// when it ends (rl::refund with its cost). State: a = slots taken.
//
// In shared memory each key also records who holds its slots (Holders, after the key's Slot):
// a worker that dies without giving its slots back (SIGKILL, a crash) is found out when the
// key is next full, and its slots are taken back then.
#pragma once
#include <cstdint>
#include "core/algo/decision.h"
#include "core/algo/policy.h"
#include "core/algo/state.h"

namespace rl {

// Retry-After of a rejection: a slot frees when a running request ends, which nobody can
// know in advance: the client is told to try again in a second.
constexpr int64_t kConcurrencyRetryUs = 1000000;
constexpr int64_t kMaxConcurrency = 1000000;  // concurrency=N: 1 .. this

// The decision on taking `cost` slots (0: only reports). remaining: slots left after it;
// reset 0 (nothing refills with time); retry kConcurrencyRetryUs, or kNever when cost > limit.
Decision decide_concurrency(const State& s, const Policy& p, int64_t cost);

// Who holds a key's slots: process ids and their counts, in the bytes after the key's Slot.
struct Holder {
    int32_t pid;    // 0: a free entry
    int32_t count;
};
constexpr int kHolders = 16;
struct Holders {
    Holder h[kHolders];
};
static_assert(sizeof(Holders) == 128, "kept per key in shared memory");

// Records `n` slots taken by `pid`; false when every entry is held by other processes (the
// caller then reaps, or refuses).
bool holders_add(Holders& hs, int32_t pid, int32_t n);
// Gives back up to `n` slots of `pid`; returns how many it held of them.
int32_t holders_remove(Holders& hs, int32_t pid, int32_t n);
// Drops every holder for which alive(pid) is false; returns the slots they held.
template <typename Alive>
int64_t holders_reap(Holders& hs, Alive alive) {
    int64_t freed = 0;
    for (Holder& h : hs.h) {
        if (h.pid != 0 && !alive(h.pid)) {
            freed += h.count;
            h = Holder{0, 0};
        }
    }
    return freed;
}

}  // namespace rl
