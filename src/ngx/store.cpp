// A request's stores, each asked once for what concerns all of its results there.
#include "ngx/store.h"

#include "ngx/redis/request.h"
#include "ngx/sync/sync.h"

const rl_store_t* const rl_stores[kRlStores] = {&rl_shm_store, &rl_redis_store, &rl_sync_optimistic_store,
                                                &rl_sync_lease_store};

namespace {

// Calls `op` of each store the request uses that has it; adds up what they return.
template <typename Op>
ngx_uint_t each_store(rl_ctx_t* ctx, Op op) {
    ngx_uint_t sum = 0;
    for (ngx_uint_t i = 0; i < kRlStores; i++) {
        if (ctx->stores & (ngx_uint_t{1} << i)) sum += op(rl_stores[i]);
    }
    return sum;
}

}  // namespace

ngx_uint_t rl_store_select(rl_ctx_t* ctx, rl_store_e where, rl_result_t** out) noexcept {
    ngx_uint_t m = 0;
    for (ngx_uint_t i = 0; i < ctx->nresults; i++) {
        if (ctx->results[i].store == where) out[m++] = &ctx->results[i];
    }
    return m;
}

ngx_uint_t rl_store_refill(rl_ctx_t* ctx) noexcept {
    return each_store(ctx, [ctx](const rl_store_t* s) -> ngx_uint_t { return s->refill && s->refill(ctx) > 0; });
}

ngx_uint_t rl_store_remote(rl_ctx_t* ctx) noexcept {
    return each_store(ctx, [ctx](const rl_store_t* s) -> ngx_uint_t { return s->remote && s->remote(ctx) > 0; });
}

void rl_store_timed_out(rl_ctx_t* ctx) noexcept {
    each_store(ctx, [ctx](const rl_store_t* s) -> ngx_uint_t {
        if (s->timed_out) s->timed_out(ctx);
        return 0;
    });
}

void rl_store_give_back(rl_ctx_t* ctx) noexcept {
    rl_result_t** list = rl_ctx_list(ctx);
    ngx_uint_t m = rl_store_select(ctx, RL_STORE_SHM, list);
    m += rl_store_select(ctx, RL_STORE_LOCAL, list + m);
    rl_store_refund_local(list, m, rl_ctx_scratch(ctx));
    each_store(ctx, [ctx](const rl_store_t* s) -> ngx_uint_t {
        if (s->give_back) s->give_back(ctx);
        return 0;
    });
}

void rl_store_decided(rl_ctx_t* ctx) noexcept {
    each_store(ctx, [ctx](const rl_store_t* s) -> ngx_uint_t {
        if (s->decided) s->decided(ctx);
        return 0;
    });
}

void rl_store_end(rl_ctx_t* ctx) noexcept {
    each_store(ctx, [ctx](const rl_store_t* s) -> ngx_uint_t {
        if (s->end) s->end(ctx);
        return 0;
    });
}
