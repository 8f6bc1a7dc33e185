// Inside the sync room: what its files share (the worker's engine state, the batches of keys
// sent to Redis, the flags a request's results carry). Not for use outside src/ngx/sync/.
#pragma once

#include "ngx/base/array.h"
#include "ngx/redis/node.h"
#include "ngx/sync/layout.h"
#include "ngx/sync/sync.h"

#include "core/reconcile/sync_command.h"

constexpr size_t kRlSyncItemsPerCall = 128;  // keys per script run: bounds its reply and its time in Redis
constexpr int64_t kRlStaleAsk = 1000000;     // an ask in flight for longer is given up on (us)

// A sync result's flags (rl_result_t::flags), beside the generic RL_RES_*.
enum {
    RL_SYNC_ERROR = RL_RES_ERROR,   // decided while the zone's last reconciliation failed
    RL_SYNC_WAIT = RL_RES_WAITS,    // lease: its budget is empty, the request waits for a grant
    RL_SYNC_WAITED = 4,    // lease: it waited once already: decided on what came
    RL_SYNC_FAILED = 8,    // lease: the grant did not come: decided on the local fallback
    RL_SYNC_LOCAL = 16,    // lease: decided on the local fallback (limit / hosts)
    RL_SYNC_WAITED2 = 32,  // lease: it waited twice (others spent the first grant): no more
    RL_SYNC_NEEDED = 64,   // lease: its cost is in its ask's `need`
    RL_SYNC_GRANTED = 128, // lease: Redis granted that need: admitted as of the grant
};

struct rl_sync_item_t {
    rl::SyncItem si;
    rl::SlotLife life;  // its slot's life when taken: the reply goes to that life only (not after a
                        // DELETE reset the key, nor once the slot went to another key)
    uint8_t algo;
    uint16_t slot;   // cluster slot of its Redis key
    bool need_granted;  // lease: Redis granted `need`: the requests counted in it are admitted
    int64_t got;        // ... units of it still to hand to those requests (shares: maybe fewer than `need`)
};

struct rl_sync_batch_t;
struct rl_lease_wait_t;

struct rl_sync_call_t {
    rl_sync_batch_t* batch;
    size_t first;
    size_t n;
    rl_redis_node_t* node;
    uint16_t slot;
    uint8_t tries;    // retries so far (rl_node_retry_left)
    int64_t sent_us;  // local clock at the send: the clock offset takes half the round trip
    // A call whose reply was lost or refused is sent again with its id (the script replays the
    // reply of a call that ran: applied once), for kRlSyncResendFor at most.
    uint32_t resends;
    int64_t first_sent_us;
    ngx_event_t resend;
    u_char id[40];
    uint8_t id_len;
    bool counted;     // in the count form: no id, not sent again (rl::sync_count_form)
};

constexpr int64_t kRlSyncResendFor = 5000000;  // us; well within the script's memory of a call (10 s)
constexpr int64_t kRlSyncResendExiting = 1000000;  // us: an exiting worker gives up sooner (its last rounds send the keys)

// A round, or the lease asks of one loop turn for one zone.
struct rl_sync_batch_t {
    rl_sync_zone_t* zs;
    bool lease_ask;
    bool failed;
    ngx_uint_t pending;  // calls without an outcome yet
    rl_array_t<rl_sync_item_t> items;
    uint32_t* index;     // items by key (rl_sync_item_find): item number + 1, 0 empty; null: scanned
    size_t index_cap;    // a power of two, at least twice the items
    rl_sync_call_t* calls;
    size_t ncalls;
    rl_array_t<rl_lease_wait_t*> waiters;  // lease asks: the requests waiting (nullptr once gone)
    ngx_queue_t link;    // lease asks: in the worker's asks in flight
};

// A zone's engine in this worker.
struct rl_sync_zone_t {
    rl_zone_t* zone;
    rl_redis_t* redis;
    ngx_event_t tick;
    ngx_msec_t tick_ms;
    ngx_msec_t sync_ms;
    rl_sync_batch_t* round;   // this worker's round in flight
    ngx_msec_t exit_at;       // when this worker saw it is exiting
    ngx_uint_t exit_rounds;
    bool heartbeat_pending;
};

extern ngx_log_t* rl_sync_log;

inline int64_t rl_sync_local_us() {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return static_cast<int64_t>(ts.tv_sec) * 1000000 + ts.tv_nsec / 1000;
}

// batch.cpp
rl_sync_batch_t* rl_sync_batch_new(rl_sync_zone_t* zs, bool lease_ask) noexcept;
// A key's item in the batch (zone locked); nullptr without memory.
rl_sync_item_t* rl_sync_item_push(rl_sync_batch_t* b, rl::Slot* slot, const rl::Policy* p) noexcept;
rl_sync_item_t* rl_sync_item_find(rl_sync_batch_t* b, const rl::KeyHash& hash, uint8_t algo) noexcept;
// The slot an item came from, if it still holds the item's key (zone locked).
rl::Slot* rl_sync_item_slot(rl_zone_t* zone, const rl_sync_item_t& it) noexcept;
// Sends every call of a batch; when all have an outcome, the batch is done (rounds and asks
// alike: the zone's state, then the round's end or the waiters' wake), and freed.
void rl_sync_batch_send(rl_sync_batch_t* b) noexcept;
// Logs a sync failure of a zone (rate limited, Redis's bytes made safe).
void rl_sync_log_failure(rl_sync_zone_t* zs, rl_redis_node_t* node, const char* what, const redisReply* reply) noexcept;
// The policy a key runs under: the zone's, applied with the key's algorithm and burst.
const rl::Policy* rl_sync_policy_for(const rl_zone_t* zone, uint8_t algo, int64_t burst) noexcept;

// round.cpp
// The zone's round in flight is over (batch.cpp).
void rl_sync_round_done(rl_sync_batch_t* b) noexcept;
// An exiting worker committed after its last round: the tick runs again to send it.
void rl_sync_exit_wake(rl_zone_t* zone) noexcept;

// lease.cpp
// A lease ask is over: its waiters decide again (batch.cpp).
void rl_sync_asks_done(rl_sync_batch_t* b) noexcept;
// Zone locked: the key's budget runs low; a worker asks for more at the end of the loop turn,
// in the background.
void rl_sync_ask_ahead(rl_zone_t* zone, rl::Slot* slot, const rl::Policy* policy, int64_t now) noexcept;
void rl_sync_lease_init(ngx_log_t* log) noexcept;
ngx_uint_t rl_sync_lease_refill(rl_ctx_t* ctx) noexcept;
void rl_sync_lease_timed_out(rl_ctx_t* ctx) noexcept;
void rl_sync_lease_end(rl_ctx_t* ctx) noexcept;
// decide.cpp: the request is rejected by another limit, or gone: what was granted for it
// goes back to the lease (zone locked).
void rl_sync_release(rl_result_t& res, rl::Slot* slot) noexcept;

// round.cpp: the worker's sync zones.
extern rl_sync_zone_t** rl_sync_zones;
extern ngx_uint_t rl_sync_nzones;
