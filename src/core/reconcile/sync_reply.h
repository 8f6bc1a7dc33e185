// What a host does with Redis's reply to a sync call, per key: pure functions over plain
// data, called by the engine (src/ngx/sync) and by the simulation (tests/sync_sim_test.cpp),
// so that the bound of sync.h is shown on the code that ships.
//
// A reply is not trusted (issue 23). What it may say follows from the policy and the bound of
// sync.h (H hosts seen, interval T, round trip L, C = capacity, r = rate):
//  - granted: at most what was asked (max(want, need)) and at most the capacity;
//  - a retry: at most reply_max_retry (the drain of the highest level the bound allows, for
//    buckets; two periods for windows), never kNever (the host never asks beyond capacity);
//  - buckets: a level in [empty, depth + reply_max_debt units], where the debt allowed is
//    H (C + r (3T + L)): the bound's (H - 1)(C + r (2T + L)), with one more host and one more
//    interval for deltas poured at their last admission; time fields no later than Redis's
//    now + kMaxClockStep;
//  - windows: counts in [0, (H + 1) R] (each host admits at most R per window on its view, and
//    a lease's fallback adds at most R more), a window that starts no later than Redis's now
//    (+ kMaxClockStep), aligned on the period;
//  - Redis's now: within kMaxClockStep of the host's clock plus the offset accepted last
//    (accept_clock); a step beyond it is refused (the call fails, its keys go again) until
//    kClockConfirm replies in a row agree on it: Redis's clock really moved.
// A key whose reply is outside the rule is refused: nothing of it is stored. Its view becomes
// the policy's full state at Redis's now (the host rejects, for at most the policy's longest
// wait, instead of admitting on a view that cannot be right), plus what it admitted since;
// a lease takes no grant and asks again after one interval. A view that rejects is refreshed
// from Redis every kRefreshIntervals intervals at most (refresh_due), so a host recovers by
// itself once Redis answers genuinely.
#pragma once
#include <cstdint>
#include "core/reconcile/sync.h"
#include "core/reconcile/sync_command.h"

namespace rl {

// What bounds a reply, besides the policy.
struct ReplyBounds {
    int64_t hosts = 1;          // hosts seen (the heartbeat's count; at least 1)
    int64_t interval_us = 0;    // sync=
    int64_t round_trip_us = 0;  // the longest round trip a reply can take (the Redis timeout)
};

constexpr int64_t kMaxClockStep = 30 * 1000000LL;  // us: Redis's clock against the host's, between replies
constexpr int64_t kClockConfirm = 3;               // replies in a row that confirm a larger step
constexpr int64_t kRefreshIntervals = 2;           // a rejecting view is asked again at most this often

// The debt (units above the capacity) the bound allows in the global state of a bucket.
int64_t reply_max_debt(const Policy& p, const ReplyBounds& b);
// The longest retry a reply may say for a need that fits the capacity.
int64_t reply_max_retry(const Policy& p, const ReplyBounds& b);

enum class ReplyFault : uint8_t { none = 0, granted, retry, level, window, time };
const char* reply_fault_text(ReplyFault f);

// Whether the reply `r` for item `sent` at Redis's `redis_now` is within the rule.
ReplyFault check_key_reply(const Policy& p, const SyncItem& sent, const SyncResult& r, int64_t redis_now,
                           const ReplyBounds& b);

// Redis's clock against this host's: the offset accepted (Redis - host), and a larger step
// seen lately, waiting for confirmation.
struct SyncClock {
    int64_t offset = 0;
    int64_t candidate = 0;
    int64_t seen = 0;  // replies in a row that agreed with candidate
};
// Whether Redis's `redis_now`, read at the host's `local` time, is accepted; updates c (its
// offset on success: redis_now - local).
bool accept_clock(SyncClock& c, int64_t redis_now, int64_t local);

// What the host keeps per sync key that a reply updates.
struct SyncKeyState {
    State view;      // optimistic: the global state plus what the host admitted since (lease: headers)
    Delta unsent;    // admitted since the send
    Lease lease;     // lease: the units granted and not spent
    int64_t used_at = 0;   // lease: last spend or grant (Redis's clock)
    int64_t retry_at = 0;  // lease: when a refused ask would fit, 0 if none
};

struct KeyReply {
    bool refused = false;      // outside the rule: nothing stored
    ReplyFault fault = ReplyFault::none;
    bool need_granted = false; // lease: the requests that waited for `need` are admitted
    bool keep = false;         // lease: units left: list the key again (given back once idle)
};

// Applies the reply of one key: the view becomes the global state plus k.unsent; lease keys
// take their grant (the need spent at the grant), a refused give-back, and retry_at.
KeyReply take_key_reply(SyncKeyState& k, const SyncItem& sent, const SyncResult& r, int64_t redis_now, bool lease,
                        const ReplyBounds& b);

// Shares (share.h): a reply within the rule (check_key_reply) at the host's `now` (its reading of
// Redis's clock): the shares granted add to those held; returns how many of the units of the
// requests that waited (`need`) Redis admitted (from the pool, at the grant).
int64_t take_share_reply(HostShare& h, const SyncItem& sent, const SyncResult& r, int64_t now, int64_t guard);

// Whether Redis kept a bucket's given-back units (granted above them since), seen from the
// state after the call; false (dropped: they drain) when the item also carried a delta or an
// ask, which moved the level after the give-back.
bool give_back_refused(const SyncItem& sent, const State& global, int64_t now);

// A key rejected by its view: whether to ask Redis for its state now (true at most once per
// kRefreshIntervals intervals; refresh_at, on the same clock as now, is updated).
bool refresh_due(int64_t& refresh_at, int64_t now, int64_t interval_us);

}  // namespace rl
