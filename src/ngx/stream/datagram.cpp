// The datagram stage: each buffer a client's datagram (the proxy reads one per recv on a UDP
// session), decided on the session's context, renewed for each; those its limits reject are
// consumed here and not passed on (dry run: passed, counted as would-be drops).
#include "ngx/stream/datagram.h"

#include "ngx/engine/decide.h"
#include "ngx/stream/session.h"

namespace {

ngx_stream_filter_pt next_filter;

// Whether one datagram passes (decided on the session's context for datagrams).
bool passes(rl_ctx_t* ctx) {
    rl_ctx_renew(ctx);
    if (rl_engine_decide(ctx) != RL_STEP_DECIDED) return true;  // (refused by the configuration)
    return !ctx->rejected || ctx->scope->dry_run;
}

ngx_int_t datagram_filter(ngx_stream_session_t* s, ngx_chain_t* in, ngx_uint_t from_upstream) noexcept {
    ngx_connection_t* c = s->connection;
    if (from_upstream || c->type != SOCK_DGRAM || in == nullptr) return next_filter(s, in, from_upstream);
    auto* scf = static_cast<rl_stream_srv_conf_t*>(ngx_stream_get_module_srv_conf(s, ngx_stream_ratelimit_module));
    const rl_scope_t* scope = &scf->scope[RL_AT_DATAGRAM];
    if (scope->applied == nullptr) return next_filter(s, in, from_upstream);
    rl_stream_session_t* ss = rl_stream_session(s, true);
    if (ss == nullptr) return NGX_ERROR;
    rl_ctx_t* ctx = ss->ctx[RL_AT_DATAGRAM];
    if (ctx == nullptr) {
        ctx = rl_stream_ctx_create(ss, RL_AT_DATAGRAM, scope, nullptr);
        if (ctx == nullptr) return NGX_ERROR;
    }
    // The datagrams that pass, in a chain of their own once one is dropped (the links are
    // given back to the pool after the next filter: a long session does not grow it).
    ngx_chain_t* out = nullptr;
    ngx_chain_t** last = &out;
    bool dropped = false;
    for (ngx_chain_t* cl = in; cl != nullptr; cl = cl->next) {
        bool keep = ngx_buf_size(cl->buf) == 0 || passes(ctx);
        if (keep && !dropped) continue;
        if (!dropped) {  // the first drop: the datagrams before it pass
            dropped = true;
            for (ngx_chain_t* k = in; k != cl; k = k->next) {
                ngx_chain_t* link = ngx_alloc_chain_link(c->pool);
                if (link == nullptr) return NGX_ERROR;
                link->buf = k->buf;
                *last = link;
                last = &link->next;
            }
        }
        if (!keep) {
            cl->buf->pos = cl->buf->last;  // consumed: the proxy reuses its buffer
            continue;
        }
        ngx_chain_t* link = ngx_alloc_chain_link(c->pool);
        if (link == nullptr) return NGX_ERROR;
        link->buf = cl->buf;
        *last = link;
        last = &link->next;
    }
    if (!dropped) return next_filter(s, in, from_upstream);
    *last = nullptr;
    ngx_int_t rc = out != nullptr ? next_filter(s, out, from_upstream) : NGX_OK;
    while (out != nullptr) {
        ngx_chain_t* next = out->next;
        ngx_free_chain(c->pool, out);
        out = next;
    }
    return rc;
}

}  // namespace

void rl_stream_datagram_init() noexcept {
    next_filter = ngx_stream_top_filter;
    ngx_stream_top_filter = datagram_filter;
}
