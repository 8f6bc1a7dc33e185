// What the HTTP front end keeps for a main request (request.cpp): the engine's context, with
// HTTP's part after it; found again after an internal redirect wipes the module's contexts (as
// the realip module keeps its own).
#pragma once

#include "ngx/engine/ctx.h"
#include "ngx/http/conf.h"

// HTTP's part of the context (rl_ctx_front).
struct rl_http_ctx_t {
    ngx_http_request_t* r;
    ngx_uint_t headers;       // RL_HEADERS_* of the location that decided
    const ngx_str_t* policy;  // its precomputed RateLimit-Policy (rl_loc_conf_t::policy), or
                              // nullptr when tiers make it differ per request
    ngx_int_t verdict;        // what the access handler returns
    bool delaying;            // the request waits ctx->delay_ms before its next phase
    bool headers_done;
    bool settled;             // settle.cpp: the request's settles are done (once)
    int64_t settle;           // $ratelimit_settled: the first settle= value taken, -1 if none
};

inline rl_http_ctx_t* rl_http(rl_ctx_t* ctx) { return static_cast<rl_http_ctx_t*>(rl_ctx_front(ctx)); }
inline const rl_http_ctx_t* rl_http(const rl_ctx_t* ctx) { return static_cast<const rl_http_ctx_t*>(rl_ctx_front(ctx)); }

// The HTTP front end (request.cpp): its values, log lines and resumptions.
extern const rl_frontend_t rl_http_frontend;

// A new main request's context, where `lcf`'s limits apply; nullptr on error.
rl_ctx_t* rl_http_ctx_create(ngx_http_request_t* r, const rl_loc_conf_t* lcf) noexcept;
// The main request's context, found again after an internal redirect wiped the module's.
inline rl_ctx_t* rl_get_ctx(ngx_http_request_t* r) {
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
