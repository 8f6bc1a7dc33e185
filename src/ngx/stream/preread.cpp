// The preread stage: ssl_preread's success skips the rest of its phase, so the check runs where
// the content starts: it decides, waits without blocking if a store needs to, then either hands
// the session to the server's own content handler (after its delay, if delay= holds it) or ends
// it; a connection rejected here gives back what the accept stage took.
#include "ngx/stream/preread.h"

#include "ngx/engine/decide.h"
#include "ngx/engine/stores.h"
#include "ngx/stream/session.h"

namespace {

// A delay is over: the content starts.
void on_delayed(ngx_event_t* ev) noexcept {
    auto* ss = static_cast<rl_stream_session_t*>(ev->data);
    ss->ctx[RL_AT_PREREAD]->phase = RL_PHASE_RETURNED;
    auto* scf = static_cast<rl_stream_srv_conf_t*>(ngx_stream_get_module_srv_conf(ss->s, ngx_stream_ratelimit_module));
    scf->content(ss->s);
}

}  // namespace

void rl_stream_preread_handler(ngx_stream_session_t* s) noexcept {
    auto* scf = static_cast<rl_stream_srv_conf_t*>(ngx_stream_get_module_srv_conf(s, ngx_stream_ratelimit_module));
    rl_stream_session_t* ss = rl_stream_session(s, true);
    if (ss == nullptr) {
        ngx_stream_finalize_session(s, NGX_STREAM_INTERNAL_SERVER_ERROR);
        return;
    }
    rl_ctx_t* ctx = ss->ctx[RL_AT_PREREAD];
    if (ctx == nullptr) {
        ctx = rl_stream_ctx_create(ss, RL_AT_PREREAD, &scf->scope[RL_AT_PREREAD], rl_stream_preread_handler);
        if (ctx == nullptr) {
            ngx_stream_finalize_session(s, NGX_STREAM_INTERNAL_SERVER_ERROR);
            return;
        }
        if (rl_engine_decide(ctx) == RL_STEP_WAITING) return;
    } else if (ctx->phase == RL_PHASE_AGAIN) {
        if (rl_engine_decide(ctx) == RL_STEP_WAITING) return;
    } else if (ctx->phase != RL_PHASE_DECIDED) {
        return;  // waiting still, or decided before (not called again)
    }
    ctx->phase = RL_PHASE_RETURNED;
    rl_stream_ctx_t* sc = rl_stream(ctx);
    ngx_int_t verdict = sc->verdict;
    if (verdict == NGX_DECLINED && sc->delaying) {
        rl_stream_delay(ss, ctx, on_delayed);
        return;
    }
    if (verdict == NGX_DECLINED) {
        scf->content(s);
        return;
    }
    // All or nothing: what the accept stage took goes back.
    if (rl_ctx_t* accepted = ss->ctx[RL_AT_ACCEPT]; accepted != nullptr && accepted->admitted) {
        accepted->admitted = false;
        rl_store_give_back(accepted);
    }
    if (scf->reject == RL_REJECT_RESET) rl_stream_reset(s);
    ngx_stream_finalize_session(s, static_cast<ngx_uint_t>(verdict));
}
