// Settles to the stores: the tables' under their zones' locks, Redis's sent (fire and forget).
#include "ngx/engine/settle.h"

#include "ngx/engine/stores.h"
#include "ngx/stores/pass.h"

#include "core/algo/settle.h"
#include "core/text/rate.h"

bool rl_settle_admitted(const rl_ctx_t* ctx, const rl_result_t& res) noexcept {
    if (!ctx->admitted || !rl_decided(res) || !res.decision.allowed) return false;
    return res.consumed || res.cost == rl::kNeedOne;
}

int64_t rl_settle_parse(rl_ctx_t* ctx, const rl_result_t& res, const ngx_str_t& value) noexcept {
    int64_t v = value.len > 0 ? rl::parse_cost(rl_sv(value)) : -1;
    if (v >= 0 && v <= rl::kMaxRequests) return v;
    rl_zone_t* zone = res.applied->zone;
    rl_warn_value(ctx->log, zone, &zone->settle_warned, "settle", value, "settled nothing");
    return -1;
}

void rl_engine_settle(rl_ctx_t* ctx) noexcept {
    rl_result_t** list = rl_ctx_list(ctx);
    ngx_uint_t m = 0;
    bool remote = false;
    for (ngx_uint_t i = 0; i < ctx->nresults; i++) {
        rl_result_t& res = ctx->results[i];
        if (res.delta == 0) continue;
        if (res.store == RL_STORE_REDIS) {
            remote = true;
        } else {
            list[m++] = &res;
        }
    }
    if (m > 0) rl_store_settle_local(list, m, rl_ctx_scratch(ctx));
    if (remote) rl_store_settle_remote(ctx);
}
