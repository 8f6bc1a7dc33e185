// The stores, by id, and giving back what a request consumed in all of them.
#include "ngx/engine/stores.h"

#include "ngx/stores/conc.h"
#include "ngx/stores/pass.h"
#include "ngx/stores/redis_request.h"
#include "ngx/stores/shm.h"
#include "ngx/sync/sync.h"

const rl_store_t* const rl_stores[kRlStores] = {&rl_shm_store, &rl_redis_store, &rl_sync_optimistic_store,
                                               &rl_sync_lease_store, &rl_conc_store};

void rl_store_end(rl_ctx_t* ctx) noexcept {
    if (ctx->slots) rl_conc_release(ctx);
    rl_store_each(ctx, [ctx](const rl_store_t* s) -> ngx_uint_t { return s->end ? s->end(ctx), 0 : 0; });
}

void rl_store_give_back(rl_ctx_t* ctx) noexcept {
    rl_result_t** list = rl_ctx_list(ctx);
    ngx_uint_t m = rl_store_select(ctx, RL_STORE_SHM, list);
    m += rl_store_select(ctx, RL_STORE_LOCAL, list + m);
    rl_store_refund_local(list, m, rl_ctx_scratch(ctx));
    rl_store_each(ctx, [ctx](const rl_store_t* s) -> ngx_uint_t { return s->give_back ? s->give_back(ctx), 0 : 0; });
}
