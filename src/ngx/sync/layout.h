// What a sync zone keeps in its shared memory (plain data: it survives reloads): per key, after
// its Slot, the view's companions; per zone, a header and the dirty list at the start of the
// zone's block (the store's area, before the table).
#pragma once

#include "ngx/limits/zone.h"

#include "core/algo/exact_math.h"
#include "core/reconcile/share.h"
#include "core/reconcile/sync.h"

// Per key, after its Slot (in the slot's ring area).
struct rl_sync_key_t {
    rl::Delta unsent;     // optimistic (and lease while Redis is away): admitted since the last send
    union {
        rl::Lease lease;      // lease on a window (or a bucket that cannot be shared): units granted
        rl::HostShare share;  // lease on a bucket: its shares and its own bucket (core/reconcile/share.h)
    };
    rl::ShareAsks asks;   // lease on a bucket: what it asked lately
    int64_t burst;        // the burst of its last admission: which policy the key runs under
    int64_t spent;        // lease: spent since the last round (shares: arrived, admitted or not)
    int64_t rate;         // lease: spent in the last round (sizes the next ask; shares: arrived)
    int64_t used_at;      // lease: last spend or grant, on the zone's clock
    int64_t retry_at;     // lease: when Redis said a refused ask would fit (zone clock), 0 if none
    int64_t asked_at;     // lease: an ask for this key is in flight since then (zone clock), 0 if none
    rl::State fallback;   // lease while Redis is away: the local limit / hosts
    int64_t refresh_at;   // a view that rejects asks Redis again from then (zone clock; lease: before retry_at)
    int64_t refresh;      // optimistic: 1: the next round sends the key, with or without a delta
    rl::Warmth warmth;    // lease: its requests' arrivals: cold keys are asked per request (sync.h)
};
static_assert(sizeof(rl_sync_key_t) % 8 == 0, "kept in shared-memory slots");

constexpr uint32_t kRlSyncMagic = 0x524c5335;  // "RLS5": bump when the layout changes
constexpr size_t kRlHostIdLen = 48;

// Per zone, at the start of its block, then `cap` dirty slot references, then `cap` flags.
struct rl_sync_shm_t {
    uint32_t magic;
    uint32_t cap;            // slots the lists have room for (every slot of the table)
    uint32_t ndirty;         // references in the dirty list
    uint32_t down;           // the last reconciliation failed: decisions report ERROR
    int64_t offset_us;       // Redis's clock - this host's CLOCK_REALTIME
    int64_t clock_candidate; // a larger step of Redis's clock, seen in clock_seen replies in a row
    int64_t clock_seen;      //   (core/reconcile/sync_reply.h, accept_clock)
    uint64_t next_sync_at;   // ngx_current_msec (CLOCK_MONOTONIC: the same in every worker)
    uint64_t syncing_since;  // a round is in flight since then (0: none)
    int64_t syncing_pid;
    int64_t hosts;           // hosts seen by the last heartbeat (>= 1)
    uint64_t last_ok;        // ngx_current_msec of the last round that succeeded
    uint64_t rounds, keys_sent, failures;  // metrics
    u_char host_id[kRlHostIdLen];
    uint32_t host_id_len;
    uint32_t clock_error_us; // how far the offset may be off: half the round trip that measured it, and 1 ms
};

inline rl_sync_key_t* rl_sync_key(rl::Slot* s) { return reinterpret_cast<rl_sync_key_t*>(s + 1); }
inline uint32_t* rl_sync_dirty(rl_sync_shm_t* h) { return reinterpret_cast<uint32_t*>(h + 1); }
inline uint8_t* rl_sync_listed(rl_sync_shm_t* h) { return reinterpret_cast<uint8_t*>(rl_sync_dirty(h) + h->cap); }

// layout.cpp: the store's area (store.h): its bytes for a table of up to `cap` slots
// (8-aligned); a fresh header and empty lists, with a new random host id; whether a header
// found after a reload has this layout and room for `cap` slots.
size_t rl_sync_area_bytes(uint32_t cap);
void rl_sync_area_format(void* area, uint32_t cap);
bool rl_sync_area_compatible(const void* area, uint32_t cap);

// Puts a slot on the dirty list, once (zone locked).
inline void rl_sync_mark(rl_sync_shm_t* h, uint32_t ref) {
    uint8_t* listed = rl_sync_listed(h);
    if (ref == 0 || ref > h->cap || listed[ref - 1]) return;
    listed[ref - 1] = 1;
    rl_sync_dirty(h)[h->ndirty++] = ref;
}

// The zone's clock: CLOCK_REALTIME + the offset measured at the last sync (zone locked).
inline int64_t rl_sync_now(const rl_zone_t* zone, int64_t local_now) { return local_now + zone->sync_shm->offset_us; }

// Lease on a bucket: whether its keys hold shares (core/reconcile/share.h), epochs of two intervals, and
// the guard around their boundaries (the clock's error).
inline int64_t rl_sync_epoch_us(const rl_zone_t* zone) { return 2 * zone->sync_us; }
// Shares where the rate refills the bucket within an epoch (r * 2T >= burst + 1): there a count
// lease drains before it is spent. A slower bucket keeps count leases: a share's units beyond
// its next epoch's burst are dropped at the boundary, and its rate would not bring them back.
inline bool rl_sync_shares(const rl_zone_t* zone, const rl::Policy& p) {
    const int64_t epoch = rl_sync_epoch_us(zone);
    return zone->sync_mode == RL_SYNC_LEASE && rl::share_fits(p, epoch) &&
           static_cast<__int128>(p.requests) * epoch >= static_cast<__int128>(p.capacity()) * p.period_us;
}
// A count lease (not shares): whether the key asks ahead of its requests, for two intervals at
// its rate. Not while it is cold (core/reconcile/sync.h, warmth_hot): its requests are asked
// for what they cost, and nothing is left to give back.
inline bool rl_sync_asks_ahead(const rl_zone_t* zone, const rl_sync_key_t* k, int64_t now) {
    return k->lease.units > 0 || rl::warmth_hot(k->warmth, now, zone->sync_us);
}
inline int64_t rl_sync_guard_us(const rl_zone_t* zone) {
    return zone->sync_shm->clock_error_us > 0 ? zone->sync_shm->clock_error_us : 1000;
}
