// settle=: a request's real cost, known when it ends (the log phase: its status, upstream
// headers and trailers, bytes sent are there). The difference from what it was charged when
// decided goes to each limit's store: charged when more (core/algo/settle.h: as far as the key's
// debt may go), given back when less.
#include "ngx/http/settle.h"

#include "ngx/stores/store.h"

#include "core/text/rate.h"
#include "core/algo/settle.h"

namespace {

// Whether a result's admission stands: the request was let through and the result took (or,
// with quantity 0, had room for) its cost.
bool admitted(const rl_ctx_t* ctx, const rl_result_t& res) {
    if (!ctx->admitted || !rl_decided(res) || !res.decision.allowed) return false;
    return res.consumed || res.cost == rl::kNeedOne;
}

// The settle value of a result's limit, or -1 (none, or invalid: logged).
int64_t settle_value(ngx_http_request_t* r, const rl_result_t& res) {
    const rl_limit_t* limit = res.applied->limit;
    ngx_str_t value;
    if (limit->settle_var != NGX_ERROR) {
        ngx_http_variable_value_t* vv = ngx_http_get_flushed_variable(r, static_cast<ngx_uint_t>(limit->settle_var));
        value.len = vv != nullptr && !vv->not_found ? vv->len : 0;
        value.data = vv != nullptr ? vv->data : nullptr;
    } else if (limit->settle_cv == nullptr) {
        return limit->settle;
    } else if (ngx_http_complex_value(r, limit->settle_cv, &value) != NGX_OK) {
        return -1;
    }
    int64_t v = value.len > 0 ? rl::parse_cost(rl_sv(value)) : -1;
    if (v >= 0 && v <= rl::kMaxRequests) return v;
    rl_zone_t* zone = res.applied->zone;
    rl_warn_value(r, zone, &zone->settle_warned, "settle", value, "settled nothing");
    return -1;
}

// The settle values into the results' `delta` and ctx->settle.
void evaluate(rl_ctx_t* ctx, ngx_http_request_t* r) {
    for (ngx_uint_t i = 0; i < ctx->nresults; i++) {
        rl_result_t& res = ctx->results[i];
        res.delta = 0;
        if (!res.applied->limit->settle_set || !admitted(ctx, res)) continue;
        int64_t v = settle_value(r, res);
        if (v < 0) continue;
        if (ctx->settle < 0) ctx->settle = v;
        res.delta = v - (res.cost > 0 ? res.cost : 0);
    }
}

}  // namespace

ngx_int_t rl_settle_handler(ngx_http_request_t* r) noexcept {
    try {
        if (r != r->main) return NGX_DECLINED;
        rl_ctx_t* ctx = rl_get_ctx(r);
        if (ctx == nullptr || ctx->settled) return NGX_DECLINED;
        ctx->settled = true;
        // Ended while delayed (its client left): the context's cleanup gives back all it took.
        if (ctx->phase == RL_PHASE_DELAYED) return NGX_DECLINED;
        evaluate(ctx, r);
        // Results kept in a zone's table settle here, under the zones' locks; the others are
        // sent to their stores.
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
    } catch (...) {
    }
    return NGX_DECLINED;
}
