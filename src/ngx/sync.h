// Zones with sync=TIME (issue 10): decided in the zone's shared memory, reconciled with Redis
// once per interval per host. What the shared memory keeps for them (plain data: it survives
// reloads), the request path's side (sync_decide.cpp) and the engine (sync.cpp).
#pragma once

#include "ratelimit.h"

#include "core/sync.h"

enum rl_sync_mode_e : uint8_t {
    RL_SYNC_OFF = 0,
    RL_SYNC_OPTIMISTIC,
    RL_SYNC_LEASE,
};

// Per key, after its Slot (in the slot's ring area).
struct rl_sync_key_t {
    rl::Delta unsent;     // optimistic (and lease while Redis is away): admitted since the last send
    rl::Lease lease;      // lease: the units Redis granted this host and it has not spent
    int64_t burst;        // the burst of its last admission: which policy the key runs under
    int64_t spent;        // lease: spent since the last round
    int64_t rate;         // lease: spent in the last round (sizes the next ask)
    int64_t used_at;      // lease: last spend or grant, on the zone's clock
    int64_t retry_at;     // lease: when Redis said a refused ask would fit (zone clock), 0 if none
    int64_t asked_at;     // lease: an ask for this key is in flight since then (zone clock), 0 if none
    rl::State fallback;   // lease while Redis is away: the local limit / hosts
};
static_assert(sizeof(rl_sync_key_t) % 8 == 0, "kept in shared-memory slots");

constexpr uint32_t kRlSyncMagic = 0x524c5331;  // "RLS1": bump when the layout changes
constexpr size_t kRlHostIdLen = 48;

// Per zone, at the start of its block, then `cap` dirty slot references, then `cap` flags.
struct rl_sync_shm_t {
    uint32_t magic;
    uint32_t cap;            // slots the lists have room for (every slot of the table)
    uint32_t ndirty;         // references in the dirty list
    uint32_t down;           // the last reconciliation failed: decisions report ERROR
    int64_t offset_us;       // Redis's clock - this host's CLOCK_REALTIME
    uint64_t next_sync_at;   // ngx_current_msec (CLOCK_MONOTONIC: the same in every worker)
    uint64_t syncing_since;  // a round is in flight since then (0: none)
    int64_t syncing_pid;
    int64_t hosts;           // hosts seen by the last heartbeat (>= 1)
    uint64_t last_ok;        // ngx_current_msec of the last round that succeeded
    uint64_t rounds, keys_sent, failures;  // metrics
    u_char host_id[kRlHostIdLen];
    uint32_t host_id_len;
    uint32_t pad;
};

inline rl_sync_key_t* rl_sync_key(rl::Slot* s) { return reinterpret_cast<rl_sync_key_t*>(s + 1); }
inline uint32_t* rl_sync_dirty(rl_sync_shm_t* h) { return reinterpret_cast<uint32_t*>(h + 1); }
inline uint8_t* rl_sync_listed(rl_sync_shm_t* h) { return reinterpret_cast<uint8_t*>(rl_sync_dirty(h) + h->cap); }

// Bytes of the sync header and lists for a table of up to `cap` slots (8-aligned).
size_t rl_sync_area_bytes(uint32_t cap) noexcept;
// Lays out a fresh header and empty lists; a new random host id.
void rl_sync_format(rl_sync_shm_t* h, uint32_t cap, ngx_log_t* log) noexcept;
// Whether a header found after a reload has this layout and room for `cap` slots.
bool rl_sync_compatible(const rl_sync_shm_t* h, uint32_t cap) noexcept;

// Puts a slot on the dirty list, once (zone locked).
inline void rl_sync_mark(rl_sync_shm_t* h, uint32_t ref) {
    uint8_t* listed = rl_sync_listed(h);
    if (ref == 0 || ref > h->cap || listed[ref - 1]) return;
    listed[ref - 1] = 1;
    rl_sync_dirty(h)[h->ndirty++] = ref;
}

// sync_decide.cpp: the request path, zone locked, `now` on the zone's clock.
rl::Decision rl_sync_decide(rl_result_t& res, rl::Slot* slot, int64_t now) noexcept;
void rl_sync_commit(rl_result_t& res, rl::Slot* slot) noexcept;
void rl_sync_refund(rl_result_t& res, rl::Slot* slot, int64_t now) noexcept;
// The request is rejected by another limit: what was granted for it goes back to the lease.
void rl_sync_release(rl_result_t& res, rl::Slot* slot) noexcept;
// The zone's clock: CLOCK_REALTIME + the offset measured at the last sync (zone locked).
inline int64_t rl_sync_now(const rl_zone_t* zone, int64_t local_now) { return local_now + zone->sync_shm->offset_us; }

// At merge: a policy the zone is applied with (the engine finds each key's by algorithm and burst).
bool rl_sync_add_policy(rl_zone_t* zone, const rl::Policy& p) noexcept;

// sync.cpp: the engine, per worker.
ngx_int_t rl_sync_init_process(ngx_cycle_t* cycle) noexcept;
void rl_sync_exit_process(ngx_cycle_t* cycle) noexcept;
// lease: the request waits for one round trip that asks Redis for units of its keys whose
// budget is empty (the results flagged RL_SYNC_WAIT). False if nothing could be sent.
bool rl_sync_lease_wait(rl_ctx_t* ctx) noexcept;
// lease, zone locked: the key's budget runs low; a worker asks for more at the end of the loop
// turn, in the background.
void rl_sync_ask_ahead(rl_zone_t* zone, rl::Slot* slot, const rl::Policy* policy, int64_t now) noexcept;
// The request is gone or finished: it no longer waits.
void rl_sync_lease_cancel(rl_ctx_t* ctx) noexcept;
// An exiting worker committed after its last round: the tick runs again to send it.
void rl_sync_exit_wake(rl_zone_t* zone) noexcept;
// Units granted for a request that goes away before it decides again go back to the lease.
void rl_sync_lease_drop(rl_ctx_t* ctx) noexcept;
