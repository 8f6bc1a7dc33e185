// The accept stage: the engine decides a new connection or session once; a wait (Redis, a
// lease) leaves the phase with NGX_AGAIN and the phases run again when it is over; a rejection
// ends the session with ratelimit_status (reset when asked); a delay holds it on a timer before
// anything is read.
#include "ngx/stream/accept.h"

#include "ngx/engine/decide.h"
#include "ngx/stream/session.h"

namespace {

void on_delayed(ngx_event_t* ev) noexcept {
    auto* ss = static_cast<rl_stream_session_t*>(ev->data);
    if (rl_ctx_t* ctx = ss->ctx[RL_AT_ACCEPT]) ctx->phase = RL_PHASE_RETURNED;
    ngx_stream_core_run_phases(ss->s);
}

ngx_int_t verdict(ngx_stream_session_t* s, rl_ctx_t* ctx) {
    rl_stream_ctx_t* sc = rl_stream(ctx);
    if (sc->verdict != NGX_DECLINED) {
        auto* scf = static_cast<rl_stream_srv_conf_t*>(ngx_stream_get_module_srv_conf(s, ngx_stream_ratelimit_module));
        if (scf->reject == RL_REJECT_RESET) rl_stream_reset(s);
        return sc->verdict;
    }
    if (!sc->delaying) return NGX_DECLINED;
    rl_stream_delay(sc->session, ctx, on_delayed);
    return NGX_AGAIN;
}

ngx_int_t decide(ngx_stream_session_t* s, rl_ctx_t* ctx) {
    if (rl_engine_decide(ctx) == RL_STEP_WAITING) return NGX_AGAIN;
    return verdict(s, ctx);
}

}  // namespace

ngx_int_t rl_stream_accept_handler(ngx_stream_session_t* s) noexcept {
    auto* scf = static_cast<rl_stream_srv_conf_t*>(ngx_stream_get_module_srv_conf(s, ngx_stream_ratelimit_module));
    const rl_scope_t* scope = &scf->scope[RL_AT_ACCEPT];
    if (scope->applied == nullptr) return NGX_DECLINED;
    rl_stream_session_t* ss = rl_stream_session(s, true);
    if (ss == nullptr) return NGX_ERROR;
    if (rl_ctx_t* ctx = ss->ctx[RL_AT_ACCEPT]) {
        switch (ctx->phase) {
        case RL_PHASE_WAITING:
        case RL_PHASE_REFILLING:
        case RL_PHASE_DELAYED:
            return NGX_AGAIN;  // (data or a timer woke the session meanwhile)
        case RL_PHASE_DECIDED:
            ctx->phase = RL_PHASE_RETURNED;
            return verdict(s, ctx);
        case RL_PHASE_AGAIN:
            return decide(s, ctx);
        default:
            return NGX_DECLINED;
        }
    }
    rl_ctx_t* ctx = rl_stream_ctx_create(ss, RL_AT_ACCEPT, scope, ngx_stream_core_run_phases);
    if (ctx == nullptr) return NGX_ERROR;
    return decide(s, ctx);
}
