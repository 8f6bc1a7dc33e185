// The stores by id (stores.cpp), and a request's operations on every store it uses, each store
// asked once.
#pragma once

#include "ngx/stores/store.h"

// The stores, in id order (rl_store_id_e; rl_engine_finish checks it).
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

// Refills and remote decisions return how many stores the request now waits for.
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
// The request is over: the in-flight slots it holds in shared memory go back (only looked for
// where a concurrency zone applies); the stores' `end` give back theirs.
void rl_store_end(rl_ctx_t* ctx) noexcept;
// Gives back what every store consumed for the request (shared memory at once, Redis by a
// refund call).
void rl_store_give_back(rl_ctx_t* ctx) noexcept;
