// The store interface: where a zone keeps its keys' state and how a request is decided there.
// One store per kind of zone (rl_store_id_e, chosen when the zone is read): shared memory
// (shm.cpp), in-flight slots (conc.cpp), Redis per request (redis_request.cpp), sync optimistic
// and sync lease (sync/). The engine decides every limit through these operations
// (engine/decide.cpp), with no branch of its own per store. A store fills in the operations it
// has, by name (rl_store_t{} leaves the others nullptr), as a constexpr function:
//     constexpr rl_store_t shm() { rl_store_t s{}; s.name = "shared memory"; s.decide = ...; return s; }
//
// A request's life in its stores: the shared-memory pass decides, all or nothing, every result
// whose store keeps its state in the zone's table (`decide` non-null); a store that cannot
// decide a result yet marks it RL_RES_WAITS and is asked to `refill` it (the request is then
// decided again); results decided elsewhere are sent by `remote` once the pass admitted the
// request. Each store that starts a wait calls ctx->resume once when it is over.
#pragma once

#include "ngx/limits/context.h"

#include "core/algo/settle.h"

struct rl_store_t {
    const char* name;
    rl_store_id_e id;   // its bit in rl_ctx_t::stores and its rl_ctx_t::store_data
    size_t key_bytes;   // what it keeps per key after the key's Slot in the zone's table

    // Its own area at the start of the zone's block, before the table (area_bytes nullptr:
    // none): the bytes for a table of `cap` slots; laid out fresh; found again after a reload.
    size_t (*area_bytes)(uint32_t cap);
    void (*area_format)(void* area, uint32_t cap);
    bool (*area_compatible)(const void* area, uint32_t cap);

    // The shared-memory pass, zone locked (pass.cpp). `clock` turns the local time into
    // the store's; `release`: another limit rejected the request; `refund`: the request gives
    // back what `commit` consumed. `decide` nullptr: the store decides away from shared memory.
    int64_t (*clock)(const rl_zone_t* zone, int64_t local_now);
    rl::Decision (*decide)(rl_result_t& res, rl::Slot* slot, int64_t now);
    void (*commit)(rl_result_t& res, rl::Slot* slot);
    void (*release)(rl_result_t& res, rl::Slot* slot);
    void (*refund)(rl_result_t& res, rl::Slot* slot, int64_t now);
    // In place of `refund` when the key's state `commit` took from is gone (reset, dropped from
    // a full table, laid out anew): nothing goes back to its new life; what the store counts
    // beside the state is settled.
    void (*gone)(rl_result_t& res);
    // A settle: the request's real cost is known (its response is over) and is more than it
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

// The results decided in one way (res.store == `where`) as a list in `out`; returns their number.
inline ngx_uint_t rl_store_select(rl_ctx_t* ctx, rl_store_e where, rl_result_t** out) {
    ngx_uint_t m = 0;
    for (ngx_uint_t i = 0; i < ctx->nresults; i++) {
        if (ctx->results[i].store == where) out[m++] = &ctx->results[i];
    }
    return m;
}
