// The request's context: created once per main request, held by a pool cleanup so that it is
// found again after an internal redirect wipes the module contexts (as the realip module keeps
// its own), and so that every store's wait ends when the request goes away.
#include "ngx/limits/ctx.h"

#include "core/text/log_text.h"
#include "core/text/rate.h"
#include "core/algo/settle.h"
#include "ngx/metrics/metrics.h"
#include "ngx/stores/store.h"
#include "ngx/limits/tier.h"
#include "ngx/limits/zone.h"

void rl_ctx_cleanup(void* data) noexcept {
    auto* ctx = static_cast<rl_ctx_t*>(data);
    if (ctx->phase == RL_PHASE_DELAYED) {
        // The request ends while delayed (the client closed the connection): what its limits
        // consumed goes back (limit_req keeps it).
        ctx->phase = RL_PHASE_RETURNED;
        rl_store_give_back(ctx);
    }
    if (ctx->timer.timer_set) {
        ngx_del_timer(&ctx->timer);
    }
    if (ctx->wake.posted) {
        ngx_delete_posted_event(&ctx->wake);
    }
    rl_store_end(ctx);
}

namespace {

// The cost of a `ratelimit` line for this request (quantity=N or quantity=$variable).
int64_t request_cost(ngx_http_request_t* r, const rl_limit_t& limit, rl_zone_t* zone) {
    if (limit.quantity_cv == nullptr) return limit.quantity;
    ngx_str_t value;
    if (ngx_http_complex_value(r, limit.quantity_cv, &value) != NGX_OK) return 1;
    if (value.len == 0) return 1;
    // A number too large for any limit is rejected by the algorithm (kNever), as is one
    // above this limit's capacity; only what is not a number at all counts 1.
    int64_t cost = rl::parse_cost(rl_sv(value));
    if (cost >= 0) return cost;
    rl_warn_value(r, zone, &zone->quantity_warned, "quantity", value, "counted as 1");
    return 1;
}

rl_ctx_t* new_ctx(ngx_http_request_t* r, const rl_loc_conf_t* lcf) {
    // One allocation, the pool cleanup's own data, holds the context, the results, the
    // locking scratch, a result list and, in a tiered location, each request's own policies.
    ngx_uint_t n = lcf->applied->nelts;
    size_t bytes = sizeof(rl_ctx_t) + n * (sizeof(rl_result_t) + 3 * sizeof(void*));
    if (lcf->tiered) bytes += n * sizeof(rl::Policy);
    ngx_pool_cleanup_t* cln = ngx_pool_cleanup_add(r->pool, bytes);
    if (cln == nullptr) return nullptr;

    auto* ctx = static_cast<rl_ctx_t*>(cln->data);
    *ctx = rl_ctx_t{};
    ctx->r = r;
    ctx->results = reinterpret_cast<rl_result_t*>(ctx + 1);
    ctx->decider = -1;
    ctx->headers = lcf->headers;
    ctx->policy = lcf->tiered ? nullptr : &lcf->policy;
    ctx->napplied = n;
    ctx->stores = lcf->stores;
    ctx->slots = lcf->slots;
    ctx->phase = RL_PHASE_RETURNED;
    ctx->settle = -1;
    cln->handler = rl_ctx_cleanup;
    ngx_http_set_ctx(r, ctx, ngx_http_ratelimit_module);
    return ctx;
}

}  // namespace

rl_ctx_t* rl_ctx_create(ngx_http_request_t* r, const rl_loc_conf_t* lcf) noexcept {
    rl_ctx_t* ctx = new_ctx(r, lcf);
    if (ctx == nullptr) return nullptr;
    // One result per applied limit whose key is not empty (an empty key is exempt from its zone).
    auto* applied = static_cast<rl_applied_t*>(lcf->applied->elts);
    ngx_uint_t m = 0;
    for (ngx_uint_t i = 0; i < lcf->applied->nelts; i++) {
        ngx_str_t key;
        if (ngx_http_complex_value(r, &applied[i].zone->key, &key) != NGX_OK) return nullptr;
        if (key.len == 0) {
            rl_metrics_count(applied[i].zone->metrics, RL_RESULT_EXEMPT);
            continue;
        }
        rl_result_t& res = ctx->results[m++];
        res = rl_result_t{};
        res.applied = &applied[i];
        res.policy = &applied[i].policy;
        if (applied[i].tiered) res.policy = rl_tier_policy(r, applied[i], rl_ctx_policies(ctx) + (m - 1));
        if (res.policy->calendar != rl::Calendar::none) {
            // The window of the request's time (nginx's cached clock; a store's clock a little
            // past a boundary moves to the next window: rl::calendar_shift).
            ngx_time_t* tp = ngx_timeofday();
            rl_calendar_window(res, static_cast<int64_t>(tp->sec) * 1000000 + static_cast<int64_t>(tp->msec) * 1000);
        }
        res.cost = request_cost(r, *applied[i].limit, applied[i].zone);
        if (res.cost == 0 && applied[i].limit->settle_set) {
            // settle= charges what the request used: it needs room for one unit meanwhile. A
            // lease takes the unit (its asks count what requests take) and settles it back.
            res.cost = applied[i].zone->sync_mode == RL_SYNC_LEASE ? 1 : rl::kNeedOne;
        }
        res.hash = rl::hash_key(key.data, key.len, rl::kDefaultHashK0, rl::kDefaultHashK1);
        res.store = applied[i].zone->store->decide ? RL_STORE_SHM : RL_STORE_REDIS;
    }
    ctx->nresults = m;
    return ctx;
}

void rl_warn_value(ngx_http_request_t* r, const rl_zone_t* zone, time_t* stamp, const char* what,
                   const ngx_str_t& value, const char* outcome) noexcept {
    if (*stamp == ngx_time()) return;  // once a second per zone and worker
    *stamp = ngx_time();
    char text[64];
    size_t n = rl::log_text(value.data, value.len, text, sizeof(text));
    ngx_log_error(NGX_LOG_WARN, r->connection->log, 0, "ratelimit zone \"%V\": invalid %s \"%*s\", %s", &zone->name,
                  what, n, text, outcome);
}
