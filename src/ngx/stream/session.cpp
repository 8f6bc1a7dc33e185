// The stream front end of the engine: a session's contexts (the engine's, the stage's part
// after it), its values (complex values), the log lines of its verdicts, its resumptions.
#include "ngx/stream/session.h"

#include "ngx/engine/delay.h"

#include "core/algo/block.h"
#include "core/algo/decide.h"

namespace {

bool stream_evaluate(rl_ctx_t* ctx, const rl_value_t* value, ngx_str_t* out) noexcept {
    auto* s = static_cast<ngx_stream_session_t*>(ctx->subject);
    return ngx_stream_complex_value(s, rl_stream_cv(value), out) == NGX_OK;
}

// limit_req's "excess", in thousandths: the units beyond the first the key would need to
// drain before one more fits (its burst, and the rate times the wait).
int64_t excess_milli(const rl_result_t& res) {
    const rl::Policy& p = *res.policy;
    int64_t wait = res.decision.retry_after_us == rl::kNever ? 0 : res.decision.retry_after_us;
    double excess = static_cast<double>(p.burst) +
                    static_cast<double>(wait) * static_cast<double>(p.requests) / static_cast<double>(p.period_us);
    return static_cast<int64_t>(excess * 1000 + 1e-6);
}

// A connection's rejection: limit_req's shape (what fail2ban filters read), limit_conn's words
// for in-flight limits; nginx adds the client and the server.
void log_rejection(ngx_connection_t* c, const rl_scope_t* scope, const rl_result_t& res) {
    const rl_zone_t* zone = res.applied->zone;
    const char* dry = scope->dry_run ? ", dry run," : "";
    if (zone->concurrency) {
        ngx_log_error(scope->log_level, c->log, 0, "limiting connections%s by zone \"%V\"", dry, &zone->name);
        return;
    }
    if (res.decision.block == rl::kBlockLive) {
        int64_t ms = (res.decision.retry_after_us + 999) / 1000;
        ngx_log_error(scope->log_level, c->log, 0, "limiting connections%s by zone \"%V\", blocked for %L.%03Ls",
                      scope->dry_run ? ", dry run" : "", &zone->name, ms / 1000, ms % 1000);
        return;
    }
    int64_t e = excess_milli(res);
    ngx_log_error(scope->log_level, c->log, 0, "limiting connections%s, excess: %L.%03L by zone \"%V\"",
                  scope->dry_run ? ", dry run" : "", e / 1000, e % 1000, &zone->name);
}

// A datagram's rejection: counted, and logged once a second per zone and worker at most, with
// the drops since the last line.
void log_drop(ngx_connection_t* c, const rl_scope_t* scope, const rl_result_t& res) {
    rl_zone_t* zone = res.applied->zone;
    zone->drops_unlogged++;
    if (zone->drop_logged == ngx_time()) return;
    ngx_log_error(scope->log_level, c->log, 0, "limiting datagrams%s by zone \"%V\", %ui dropped since the last line",
                  scope->dry_run ? ", dry run," : "", &zone->name, zone->drops_unlogged);
    zone->drop_logged = ngx_time();
    zone->drops_unlogged = 0;
}

// The verdict: what the stage answers, and the log lines.
void stream_decided(rl_ctx_t* ctx) noexcept {
    rl_stream_ctx_t* sc = rl_stream(ctx);
    ngx_stream_session_t* s = sc->session->s;
    const rl_scope_t* scope = ctx->scope;
    sc->verdict = NGX_DECLINED;
    if (sc->at != RL_AT_DATAGRAM) sc->session->status = ctx->status;
    if (ctx->rejected) {
        for (ngx_uint_t i = 0; i < ctx->nresults; i++) {
            const rl_result_t& res = ctx->results[i];
            if (!rl_decided(res) || res.decision.allowed) continue;
            if (sc->at == RL_AT_DATAGRAM) {
                log_drop(s->connection, scope, res);
            } else {
                log_rejection(s->connection, scope, res);
            }
        }
        if (sc->at == RL_AT_DATAGRAM) {
            if (!scope->dry_run) sc->session->dropped++;
            return;
        }
        auto* scf = static_cast<rl_stream_srv_conf_t*>(ngx_stream_get_module_srv_conf(s, ngx_stream_ratelimit_module));
        if (!scope->dry_run) sc->verdict = static_cast<ngx_int_t>(scf->status);
        return;
    }
    if (ctx->denied && !scope->dry_run) sc->verdict = NGX_STREAM_SERVICE_UNAVAILABLE;
    if (ctx->delayer < 0) return;
    sc->delaying = !scope->dry_run && sc->verdict == NGX_DECLINED;
    int64_t milli = rl_delay_excess_milli(ctx);
    ngx_uint_t level = scope->log_level == NGX_LOG_INFO ? NGX_LOG_INFO : scope->log_level + 1;
    ngx_log_error(level, s->connection->log, 0, "delaying connection%s, excess: %L.%03L, by zone \"%V\", delay %L.%03Ls",
                  scope->dry_run ? " (dry run)" : "", milli / 1000, milli % 1000,
                  &ctx->results[ctx->delayer].applied->zone->name, ctx->delay_ms / 1000, ctx->delay_ms % 1000);
}

void stream_resume(rl_ctx_t* ctx) noexcept {
    rl_stream_ctx_t* sc = rl_stream(ctx);
    sc->resume(sc->session->s);
}

void session_cleanup(void* data) noexcept {
    auto* ss = static_cast<rl_stream_session_t*>(data);
    if (ss->delay.timer_set) ngx_del_timer(&ss->delay);
}

}  // namespace

const rl_frontend_t rl_stream_frontend = {"stream", &ngx_stream_ratelimit_module, rl_stream_compile,
                                          stream_evaluate, stream_decided, stream_resume};

rl_value_t* rl_stream_compile(ngx_conf_t* cf, ngx_str_t* text) noexcept {
    auto* cv = static_cast<ngx_stream_complex_value_t*>(ngx_palloc(cf->pool, sizeof(ngx_stream_complex_value_t)));
    if (cv == nullptr) return nullptr;
    ngx_stream_compile_complex_value_t ccv{};
    ccv.cf = cf;
    ccv.value = text;
    ccv.complex_value = cv;
    return ngx_stream_compile_complex_value(&ccv) == NGX_OK ? reinterpret_cast<rl_value_t*>(cv) : nullptr;
}

rl_stream_session_t* rl_stream_session(ngx_stream_session_t* s, bool create) noexcept {
    auto* ss = static_cast<rl_stream_session_t*>(ngx_stream_get_module_ctx(s, ngx_stream_ratelimit_module));
    if (ss != nullptr || !create) return ss;
    ngx_pool_cleanup_t* cln = ngx_pool_cleanup_add(s->connection->pool, sizeof(rl_stream_session_t));
    if (cln == nullptr) return nullptr;
    ss = static_cast<rl_stream_session_t*>(cln->data);
    *ss = rl_stream_session_t{};
    ss->s = s;
    cln->handler = session_cleanup;
    ngx_stream_set_ctx(s, ss, ngx_stream_ratelimit_module);
    return ss;
}

rl_ctx_t* rl_stream_ctx_create(rl_stream_session_t* ss, rl_stage_e at, const rl_scope_t* scope,
                               void (*resume)(ngx_stream_session_t*)) noexcept {
    ngx_connection_t* c = ss->s->connection;
    rl_ctx_t* ctx = rl_ctx_create(c->pool, c->log, scope, &rl_stream_frontend, ss->s, sizeof(rl_stream_ctx_t));
    if (ctx == nullptr) return nullptr;
    rl_stream_ctx_t* sc = rl_stream(ctx);
    *sc = rl_stream_ctx_t{};
    sc->session = ss;
    sc->at = at;
    sc->verdict = NGX_DECLINED;
    sc->resume = resume;
    ss->ctx[at] = ctx;
    return ctx;
}

void rl_stream_delay(rl_stream_session_t* ss, rl_ctx_t* ctx, ngx_event_handler_pt done) noexcept {
    rl_stream(ctx)->delaying = false;
    ss->delay.handler = done;
    ss->delay.data = ss;
    ss->delay.log = ss->s->connection->log;
    ctx->phase = RL_PHASE_DELAYED;  // a close meanwhile gives the units back (rl_ctx_cleanup)
    ngx_add_timer(&ss->delay, static_cast<ngx_msec_t>(ctx->delay_ms));
}

void rl_stream_reset(ngx_stream_session_t* s) noexcept {
    ngx_connection_t* c = s->connection;
    if (c->type != SOCK_STREAM) return;
    struct linger linger{1, 0};
    if (setsockopt(c->fd, SOL_SOCKET, SO_LINGER, &linger, sizeof(linger)) == -1) {
        ngx_connection_error(c, ngx_socket_errno, const_cast<char*>("setsockopt(SO_LINGER) failed"));
    }
}
