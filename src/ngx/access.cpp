// The pre-access phase handler: evaluates every applied limit once per main request.
#include "ratelimit.h"

#include "core/rate.h"

namespace {

// Marks the pool cleanup that holds the context, so it is found again after an internal
// redirect wipes the module contexts (the same way the realip module keeps its own).
void rl_ctx_cleanup(void*) noexcept {}

std::string_view sv(const ngx_str_t& s) { return {reinterpret_cast<const char*>(s.data), s.len}; }

int64_t request_cost(ngx_http_request_t* r, const rl_limit_t& limit, const rl_zone_t* zone) {
    // Costs above what a limit can ever admit are rejected by the algorithm (kNever).
    if (limit.quantity_cv == nullptr) return limit.quantity;
    ngx_str_t value;
    if (ngx_http_complex_value(r, limit.quantity_cv, &value) != NGX_OK) return 1;
    int64_t cost;
    if (value.len == 0) return 1;
    if (!rl::parse_int(sv(value), 0, rl::kMaxRequests, cost)) {
        ngx_log_error(NGX_LOG_WARN, r->connection->log, 0,
                      "ratelimit zone \"%V\": invalid quantity \"%V\", counted as 1", &zone->name, &value);
        return 1;
    }
    return cost;
}

// Rejected requests: the zone that takes longest to admit again decides.
ngx_int_t pick_rejecting(const rl_result_t* res, ngx_uint_t n, int64_t* retry_us) {
    ngx_int_t best = -1;
    int64_t longest = 0;
    for (ngx_uint_t i = 0; i < n; i++) {
        if (res[i].decision.allowed) continue;
        int64_t wait = res[i].decision.retry_after_us;
        if (wait == rl::kNever) wait = INT64_MAX;
        if (best < 0 || wait > longest) {
            best = static_cast<ngx_int_t>(i);
            longest = wait;
        }
    }
    *retry_us = longest == INT64_MAX ? rl::kNever : longest;
    return best;
}

// Allowed requests: the most restrictive zone (fewest remaining) decides.
ngx_int_t pick_most_restrictive(const rl_result_t* res, ngx_uint_t n) {
    ngx_int_t best = 0;
    for (ngx_uint_t i = 1; i < n; i++) {
        if (res[i].decision.remaining < res[best].decision.remaining) best = static_cast<ngx_int_t>(i);
    }
    return best;
}

void log_rejection(ngx_http_request_t* r, const rl_loc_conf_t* lcf, const rl_result_t& res) {
    const rl_zone_t* zone = res.applied->zone;
    int64_t wait = res.decision.retry_after_us;
    if (wait == rl::kNever) {
        ngx_log_error(lcf->log_level, r->connection->log, 0,
                      "limiting request%s by zone \"%V\", quantity %L exceeds its capacity",
                      lcf->dry_run ? " (dry run)" : "", &zone->name, res.cost);
        return;
    }
    int64_t ms = (wait + 999) / 1000;
    ngx_log_error(lcf->log_level, r->connection->log, 0, "limiting request%s by zone \"%V\", retry in %L.%03Ls",
                  lcf->dry_run ? " (dry run)" : "", &zone->name, ms / 1000, ms % 1000);
}

}  // namespace

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

ngx_int_t rl_access_handler(ngx_http_request_t* r) noexcept {
    if (r->main != r) return NGX_DECLINED;  // subrequests ride on their main request's verdict

    auto* lcf = static_cast<rl_loc_conf_t*>(ngx_http_get_module_loc_conf(r, ngx_http_ratelimit_module));
    if (lcf->applied == nullptr) return NGX_DECLINED;
    if (rl_get_ctx(r) != nullptr) return NGX_DECLINED;  // counted once, not again after a redirect

    // One allocation holds the context, the results and the locking scratch space.
    ngx_uint_t n = lcf->applied->nelts;
    size_t bytes = sizeof(rl_ctx_t) + n * (sizeof(rl_result_t) + 2 * sizeof(void*));
    auto* mem = static_cast<u_char*>(ngx_palloc(r->pool, bytes));
    ngx_pool_cleanup_t* cln = ngx_pool_cleanup_add(r->pool, 0);
    if (mem == nullptr || cln == nullptr) return NGX_HTTP_INTERNAL_SERVER_ERROR;

    auto* ctx = reinterpret_cast<rl_ctx_t*>(mem);
    *ctx = rl_ctx_t{};
    ctx->results = reinterpret_cast<rl_result_t*>(ctx + 1);
    auto** scratch = reinterpret_cast<void**>(ctx->results + n);
    ctx->decider = -1;
    ctx->headers = lcf->headers;
    cln->handler = rl_ctx_cleanup;
    cln->data = ctx;
    ngx_http_set_ctx(r, ctx, ngx_http_ratelimit_module);

    auto* applied = static_cast<rl_applied_t*>(lcf->applied->elts);
    ngx_uint_t m = 0;
    for (ngx_uint_t i = 0; i < n; i++) {
        ngx_str_t key;
        if (ngx_http_complex_value(r, &applied[i].zone->key, &key) != NGX_OK) return NGX_HTTP_INTERNAL_SERVER_ERROR;
        if (key.len == 0) continue;  // an empty key is exempt from this zone

        rl_result_t& res = ctx->results[m++];
        res.applied = &applied[i];
        res.cost = request_cost(r, *applied[i].limit, applied[i].zone);
        res.hash = rl::hash_key(key.data, key.len, rl::kDefaultHashK0, rl::kDefaultHashK1);
        res.decision = rl::Decision{};
    }
    ctx->nresults = m;
    if (m == 0) {
        ctx->status = RL_STATUS_EXEMPT;
        return NGX_DECLINED;
    }

    if (rl_decide_all(ctx->results, m, scratch)) {
        ctx->status = RL_STATUS_PASSED;
        ctx->decider = pick_most_restrictive(ctx->results, m);
        return NGX_DECLINED;
    }

    ctx->decider = pick_rejecting(ctx->results, m, &ctx->retry_after_us);
    for (ngx_uint_t i = 0; i < m; i++) {
        if (!ctx->results[i].decision.allowed) log_rejection(r, lcf, ctx->results[i]);
    }
    if (lcf->dry_run) {
        ctx->status = RL_STATUS_REJECTED_DRY_RUN;
        return NGX_DECLINED;
    }
    ctx->status = RL_STATUS_REJECTED;
    return static_cast<ngx_int_t>(lcf->status);
}
