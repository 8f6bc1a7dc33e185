// The request's context: created once per main request, held by a pool cleanup so that it is
// found again after an internal redirect wipes the module contexts (as the realip module keeps
// its own), and so that every store's wait ends when the request goes away.
#include "ngx/request.h"

#include "core/log_text.h"
#include "core/rate.h"
#include "ngx/delay.h"
#include "ngx/store.h"

namespace {

void rl_ctx_cleanup(void* data) noexcept {
    auto* ctx = static_cast<rl_ctx_t*>(data);
    if (ctx->phase == RL_PHASE_DELAYED) rl_delay_abandoned(ctx);
    if (ctx->timer.timer_set) {
        ngx_del_timer(&ctx->timer);
    }
    if (ctx->wake.posted) {
        ngx_delete_posted_event(&ctx->wake);
    }
    rl_store_end(ctx);
}

}  // namespace

rl_ctx_t* rl_ctx_create(ngx_http_request_t* r, const rl_loc_conf_t* lcf) noexcept {
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
    ctx->phase = RL_PHASE_RETURNED;
    cln->handler = rl_ctx_cleanup;
    ngx_http_set_ctx(r, ctx, ngx_http_ratelimit_module);
    return ctx;
}

rl_ctx_t* rl_get_ctx(ngx_http_request_t* r) noexcept {
    ngx_http_request_t* m = r->main;
    auto* ctx = static_cast<rl_ctx_t*>(ngx_http_get_module_ctx(m, ngx_http_ratelimit_module));
    if (ctx != nullptr) return ctx;
    for (ngx_pool_cleanup_t* cln = m->pool->cleanup; cln; cln = cln->next) {
        if (cln->handler == rl_ctx_cleanup) {
            ctx = static_cast<rl_ctx_t*>(cln->data);
            ngx_http_set_ctx(m, ctx, ngx_http_ratelimit_module);
            return ctx;
        }
    }
    return nullptr;
}

int64_t rl_request_cost(ngx_http_request_t* r, const rl_limit_t& limit, rl_zone_t* zone) noexcept {
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

void rl_warn_value(ngx_http_request_t* r, const rl_zone_t* zone, time_t* stamp, const char* what,
                   const ngx_str_t& value, const char* outcome) noexcept {
    if (*stamp == ngx_time()) return;  // once a second per zone and worker
    *stamp = ngx_time();
    char text[64];
    size_t n = rl::log_text(value.data, value.len, text, sizeof(text));
    ngx_log_error(NGX_LOG_WARN, r->connection->log, 0, "ratelimit zone \"%V\": invalid %s \"%*s\", %s", &zone->name,
                  what, n, text, outcome);
}
