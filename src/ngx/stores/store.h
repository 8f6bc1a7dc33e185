// The store interface: where a zone keeps its keys' state and how a request is decided there.
// One store per kind of zone, chosen when the configuration is read (zone.cpp): shared memory
// (store_shm.cpp), Redis per request (redis/request.cpp), sync optimistic and sync lease
// (sync/). The access handler decides every limit through these operations and the
// functions below, with no branch of its own per store.
//
// A request's life in its stores: the shared-memory pass decides, all or nothing, every result
// whose store keeps its state in the zone's table (`decide` non-null); a store that cannot
// decide a result yet marks it RL_RES_WAITS and is asked to `refill` it (the request is then
// decided again); results decided elsewhere are sent by `remote` once the pass admitted the
// request. Each store that starts a wait calls ctx->resume once when it is over.
#pragma once

#include "ngx/limits/ctx.h"

#include "core/algo/settle.h"

struct rl_store_t {
    const char* name;
    ngx_uint_t index;   // its bit in rl_ctx_t::stores and its rl_ctx_t::store_data
    size_t key_bytes;   // what it keeps per key after the key's Slot in the zone's table

    // Its own area at the start of the zone's block, before the table (area_bytes nullptr:
    // none): the bytes for a table of `cap` slots; laid out fresh; found again after a reload.
    size_t (*area_bytes)(uint32_t cap);
    void (*area_format)(void* area, uint32_t cap);
    bool (*area_compatible)(const void* area, uint32_t cap);

    // The shared-memory pass, zone locked (store_shm.cpp). `clock` turns the local time into
    // the store's; `release`: another limit rejected the request; `refund`: the request gives
    // back what `commit` consumed. `decide` nullptr: the store decides away from shared memory.
    int64_t (*clock)(const rl_zone_t* zone, int64_t local_now);
    rl::Decision (*decide)(rl_result_t& res, rl::Slot* slot, int64_t now);
    void (*commit)(rl_result_t& res, rl::Slot* slot);
    void (*release)(rl_result_t& res, rl::Slot* slot);
    void (*refund)(rl_result_t& res, rl::Slot* slot, int64_t now);
    // settle.cpp: the request's real cost is known (its response is over) and is more than it
    // was charged: charge res.delta more units, past the limit as far as its debt may go
    // (core/algo/settle.h). (Less: `refund` gives back the difference.)
    void (*settle)(rl_result_t& res, rl::Slot* slot, int64_t now);

    // The waits. Each returns the number of waits started (0: nothing to wait for).
    // refill: gets what the results it left RL_RES_WAITS lack; what it could not get is
    //         decided locally when the request is decided again.
    // remote: sends its results to be decided (their store RL_STORE_REDIS).
    ngx_uint_t (*refill)(rl_ctx_t* ctx);
    ngx_uint_t (*remote)(rl_ctx_t* ctx);
    // The request's time to wait is over: what has no answer yet is decided without it.
    void (*timed_out)(rl_ctx_t* ctx);
    // What its remote decisions consumed goes back (shared memory is refunded by the pass).
    void (*give_back)(rl_ctx_t* ctx);
    // The verdict is final: late answers no longer change it.
    void (*decided)(rl_ctx_t* ctx);
    // The request goes away (its pool's cleanup): no wait of it may outlive it.
    void (*end)(rl_ctx_t* ctx);
    // Sends the settles of its remote results (res.delta != 0): fire and forget.
    void (*settle_remote)(rl_ctx_t* ctx);
};

extern const rl_store_t rl_shm_store;
extern const rl_store_t rl_conc_store;  // in-flight slots in shared memory (store_conc.cpp)

// The store a result is decided in now: its zone's, or the zone's table when Redis failed and
// ratelimit_on_error local decides it there.
inline const rl_store_t* rl_store_of(const rl_result_t& res) {
    return res.store == RL_STORE_LOCAL ? res.applied->zone->local : res.applied->zone->store;
}

// The debt policy a settle's charge is decided on (core/algo/settle.h): found once per limit, or
// for a tier's policy (per request) now.
inline rl::Policy rl_debt_of(const rl_result_t& res) {
    if (res.policy != &res.applied->policy) return rl::debt_policy(*res.policy);
    rl::Policy debt = res.applied->debt;
    debt.win = res.policy->win;  // a calendar's current window (the same derived values)
    return debt;
}

// What the zone's table keeps per key after its Slot.
inline size_t rl_zone_key_bytes(const rl_zone_t* zone) {
    return zone->store->key_bytes > 0 ? zone->store->key_bytes : zone->local->key_bytes;
}

// store_shm.cpp: the shared-memory pass over `results` (their stores' `decide`): under their
// zones' locks, on the clock read inside the locks, consuming from all of them only if all of
// them allow the request. Returns whether they did. `scratch` has room for 2 * n pointers.
bool rl_store_decide_local(rl_result_t** results, ngx_uint_t n, void** scratch) noexcept;
// Gives back what committed results of the pass consumed.
void rl_store_refund_local(rl_result_t** results, ngx_uint_t n, void** scratch) noexcept;
// Applies the settles (res.delta) of results kept in their zones' tables, under their locks.
void rl_store_settle_local(rl_result_t** results, ngx_uint_t n, void** scratch) noexcept;
// The slot of a result's key in its zone's table (zone locked), or nullptr when it cannot be
// used, or when it is not there and `create` is false.
rl::Slot* rl_store_slot(const rl_result_t& res, bool create = true) noexcept;

// The store kinds, by index (store.cpp).
extern const rl_store_t* const rl_stores[kRlStores];

// Calls `op` on each store the request uses; adds up what it returns.
template <typename Op>
inline ngx_uint_t rl_store_each(const rl_ctx_t* ctx, Op op) {
    ngx_uint_t sum = 0;
    for (ngx_uint_t i = 0; i < kRlStores; i++) {
        if (ctx->stores & (ngx_uint_t{1} << i)) sum += op(rl_stores[i]);
    }
    return sum;
}

// The results decided in one way (res.store == `where`) as a list in `out`; returns their number.
inline ngx_uint_t rl_store_select(rl_ctx_t* ctx, rl_store_e where, rl_result_t** out) {
    ngx_uint_t m = 0;
    for (ngx_uint_t i = 0; i < ctx->nresults; i++) {
        if (ctx->results[i].store == where) out[m++] = &ctx->results[i];
    }
    return m;
}

// The request's stores, each asked once. Refills and remote decisions return how many stores
// the request now waits for.
inline ngx_uint_t rl_store_refill(rl_ctx_t* ctx) {
    return rl_store_each(ctx, [ctx](const rl_store_t* s) -> ngx_uint_t { return s->refill && s->refill(ctx) > 0; });
}
inline ngx_uint_t rl_store_remote(rl_ctx_t* ctx) {
    return rl_store_each(ctx, [ctx](const rl_store_t* s) -> ngx_uint_t { return s->remote && s->remote(ctx) > 0; });
}
inline void rl_store_timed_out(rl_ctx_t* ctx) {
    rl_store_each(ctx, [ctx](const rl_store_t* s) -> ngx_uint_t { return s->timed_out ? s->timed_out(ctx), 0 : 0; });
}
inline void rl_store_settle_remote(rl_ctx_t* ctx) {
    rl_store_each(ctx, [ctx](const rl_store_t* s) -> ngx_uint_t { return s->settle_remote ? s->settle_remote(ctx), 0 : 0; });
}
inline void rl_store_decided(rl_ctx_t* ctx) {
    rl_store_each(ctx, [ctx](const rl_store_t* s) -> ngx_uint_t { return s->decided ? s->decided(ctx), 0 : 0; });
}
// The request is over: the in-flight slots it holds in shared memory go back (store_conc.cpp;
// only looked for where a concurrency zone applies); the stores' `end` give back theirs.
void rl_store_release_slots(rl_ctx_t* ctx) noexcept;
inline void rl_store_end(rl_ctx_t* ctx) {
    if (ctx->slots) rl_store_release_slots(ctx);
    rl_store_each(ctx, [ctx](const rl_store_t* s) -> ngx_uint_t { return s->end ? s->end(ctx), 0 : 0; });
}
// Gives back what every store consumed for the request (shared memory at once, Redis by a
// refund call) (store.cpp).
void rl_store_give_back(rl_ctx_t* ctx) noexcept;
