// Header filter: RateLimit-Policy / RateLimit, X-RateLimit-*, Retry-After, on every response
// of a main request that a limit applied to, allowed or rejected.
#include "ngx/http/headers.h"

#include "ngx/http/request.h"
#include "ngx/http/send.h"

#include "core/text/headers.h"

namespace {

ngx_http_output_header_filter_pt rl_next_header_filter;

bool add_number(ngx_http_request_t* r, const char* name, int64_t v) {
    auto* buf = static_cast<u_char*>(ngx_pnalloc(r->pool, NGX_INT64_LEN));
    if (buf == nullptr) return false;
    return rl_http_add_header(r, name, buf, ngx_sprintf(buf, "%L", v) - buf);
}

rl::HeaderItem item_of(const rl_result_t& res) {
    rl::HeaderItem it = rl_policy_item(*res.applied->zone, *res.policy);
    it.remaining = res.decision.remaining;
    it.reset_s = rl::ceil_seconds(res.decision.reset_us);
    return it;
}

// Formats one structured-field list header into the request's pool.
bool add_list(ngx_http_request_t* r, const char* name, const rl::HeaderItem* items, size_t n,
              size_t (*format)(char*, const rl::HeaderItem*, size_t)) {
    auto* buf = static_cast<char*>(ngx_pnalloc(r->pool, rl::header_max_len(items, n)));
    if (buf == nullptr) return false;
    return rl_http_add_header(r, name, reinterpret_cast<u_char*>(buf), format(buf, items, n));
}

bool add_headers(ngx_http_request_t* r, const rl_ctx_t* ctx) {
    const rl_result_t& decider = ctx->results[ctx->decider];
    if (ctx->status == RL_STATUS_REJECTED || ctx->status == RL_STATUS_BLOCKED) {
        int64_t wait = ctx->retry_after_us == rl::kNever ? decider.policy->period_us : ctx->retry_after_us;
        if (!add_number(r, "Retry-After", rl::retry_after_seconds(wait))) return false;
    }
    if (rl_http(ctx)->headers & RL_HEADERS_ON) {
        constexpr ngx_uint_t kInline = 8;
        rl::HeaderItem inline_items[kInline];
        rl::HeaderItem* items = inline_items;
        if (ctx->nresults > kInline) {
            items = static_cast<rl::HeaderItem*>(ngx_palloc(r->pool, ctx->nresults * sizeof(rl::HeaderItem)));
            if (items == nullptr) return false;
        }
        size_t n = 0;
        for (ngx_uint_t i = 0; i < ctx->nresults; i++) {
            if (rl_decided(ctx->results[i])) items[n++] = item_of(ctx->results[i]);
        }
        if (n == ctx->napplied && rl_http(ctx)->policy != nullptr) {
            // Every applied limit decided, none from a tier: the location's policy, formatted at merge.
            const ngx_str_t* policy = rl_http(ctx)->policy;
            if (!rl_http_add_header(r, "RateLimit-Policy", policy->data, policy->len)) return false;
        } else if (!add_list(r, "RateLimit-Policy", items, n, rl::format_policy)) {
            return false;
        }
        if (!add_list(r, "RateLimit", items, n, rl::format_state)) return false;
    }
    if (rl_http(ctx)->headers & RL_HEADERS_LEGACY) {
        rl::HeaderItem it = item_of(decider);
        if (!add_number(r, "X-RateLimit-Limit", it.quota) || !add_number(r, "X-RateLimit-Remaining", it.remaining) ||
            !add_number(r, "X-RateLimit-Reset", it.reset_s)) {
            return false;
        }
    }
    return true;
}

ngx_int_t rl_header_filter(ngx_http_request_t* r) noexcept {
    if (r != r->main) return rl_next_header_filter(r);
    rl_ctx_t* ctx = rl_get_ctx(r);
    if (ctx == nullptr || rl_http(ctx)->headers_done || ctx->decider < 0) return rl_next_header_filter(r);
    rl_http(ctx)->headers_done = true;
    if (!add_headers(r, ctx)) return NGX_ERROR;
    return rl_next_header_filter(r);
}

}  // namespace

rl::HeaderItem rl_policy_item(const rl_zone_t& zone, const rl::Policy& policy) noexcept {
    rl::HeaderItem it;
    it.name = rl_sv(zone.name);
    it.quota = policy.requests;
    // A concurrency limit has no window: its quota is requests at once (w= left out).
    it.window_s = policy.algo == rl::Algo::concurrency ? 0 : rl::ceil_seconds(policy.period_us);
    return it;
}

ngx_int_t rl_header_filter_init(ngx_conf_t*) noexcept {
    rl_next_header_filter = ngx_http_top_header_filter;
    ngx_http_top_header_filter = rl_header_filter;
    return NGX_OK;
}
