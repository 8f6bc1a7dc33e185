// The pre-access phase handler: has the engine decide a main request once (engine/decide.h),
// waits without blocking while a store needs it (the request's phases run again when the wait
// is over), then returns the verdict, or delays the request first.
#include "ngx/http/access.h"

#include "ngx/engine/decide.h"
#include "ngx/http/delay.h"

namespace {

ngx_int_t verdict(rl_ctx_t* ctx) {
    rl_http_ctx_t* h = rl_http(ctx);
    return h->delaying ? rl_delay_start(ctx) : h->verdict;
}

ngx_int_t decide(ngx_http_request_t* r, rl_ctx_t* ctx) {
    if (rl_engine_decide(ctx) == RL_STEP_DECIDED) return verdict(ctx);
    r->read_event_handler = ngx_http_test_reading;  // notices a client that goes away
    r->write_event_handler = ngx_http_request_empty_handler;
    return NGX_AGAIN;
}

}  // namespace

ngx_int_t rl_access_handler(ngx_http_request_t* r) noexcept {
    if (r->main != r) return NGX_DECLINED;  // subrequests ride on their main request's verdict

    auto* lcf = static_cast<rl_loc_conf_t*>(ngx_http_get_module_loc_conf(r, ngx_http_ratelimit_module));
    if (lcf->scope.applied == nullptr) return NGX_DECLINED;
    if (rl_ctx_t* ctx = rl_get_ctx(r)) {
        switch (ctx->phase) {
        case RL_PHASE_WAITING:
        case RL_PHASE_REFILLING:
        case RL_PHASE_DELAYED:
            return NGX_AGAIN;
        case RL_PHASE_DECIDED:
            ctx->phase = RL_PHASE_RETURNED;
            return verdict(ctx);
        case RL_PHASE_AGAIN:
            return decide(r, ctx);
        default:
            return NGX_DECLINED;  // counted once, not again after a redirect
        }
    }
    rl_ctx_t* ctx = rl_http_ctx_create(r, lcf);
    if (ctx == nullptr) return NGX_HTTP_INTERNAL_SERVER_ERROR;
    return decide(r, ctx);
}
