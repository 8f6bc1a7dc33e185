// Shaping: a request its limits admitted with a delay (delay=, see core/algo/delay.h) waits on a
// timer before its next phase, as limit_req's delayed requests do: the worker goes on serving
// others. The timer is on the connection's write event, not cancelable, so a graceful stop
// lets the request finish. A client that closes the connection meanwhile ends the request
// (499), and what its limits consumed goes back (limit_req keeps it).
#include "ngx/http/delay.h"

#include "ngx/stores/store.h"

#include "core/algo/delay.h"

namespace {

// limit_req's rule: delays are logged one level below ratelimit_log_level (info stays info).
ngx_uint_t delay_log_level(const rl_loc_conf_t* lcf) {
    return lcf->log_level == NGX_LOG_INFO ? NGX_LOG_INFO : lcf->log_level + 1;
}

void rl_delay_handler(ngx_http_request_t* r) noexcept {
    ngx_event_t* wev = r->connection->write;
    if (wev->delayed) {
        // A write event before the timer: keep waiting.
        if (ngx_handle_write_event(wev, 0) != NGX_OK) ngx_http_finalize_request(r, NGX_HTTP_INTERNAL_SERVER_ERROR);
        return;
    }
    if (ngx_handle_read_event(r->connection->read, 0) != NGX_OK) {
        ngx_http_finalize_request(r, NGX_HTTP_INTERNAL_SERVER_ERROR);
        return;
    }
    if (rl_ctx_t* ctx = rl_get_ctx(r)) ctx->phase = RL_PHASE_RETURNED;
    r->read_event_handler = ngx_http_block_reading;
    r->write_event_handler = ngx_http_core_run_phases;
    ngx_http_core_run_phases(r);
}

}  // namespace

void rl_delay_decide(rl_ctx_t* ctx, const rl_loc_conf_t* lcf) noexcept {
    const rl_result_t* longest = nullptr;
    for (ngx_uint_t i = 0; i < ctx->nresults; i++) {
        rl_result_t& res = ctx->results[i];
        if (!rl_decided(res) || !res.decision.allowed || res.decision.delay_us <= 0) continue;
        // Never longer than the policy allows, whatever a Redis reply said.
        int64_t bound = rl::delay_bound(*res.policy);
        if (res.decision.delay_us > bound) res.decision.delay_us = bound;
        if (res.decision.delay_us <= 0) continue;
        if (longest == nullptr || res.decision.delay_us > longest->decision.delay_us) longest = &res;
    }
    if (longest == nullptr) return;
    // The timer counts milliseconds: never shorter than the limit asked.
    ctx->delay_ms = (longest->decision.delay_us + 999) / 1000;
    ctx->status = lcf->dry_run ? RL_STATUS_DELAYED_DRY_RUN : RL_STATUS_DELAYED;
    ctx->delaying = !lcf->dry_run && ctx->verdict == NGX_DECLINED;
    // limit_req's "excess": the requests beyond the first in the bucket, from the delay
    // (delay = (excess - N) / rate); the delay is rounded up by less than a microsecond.
    const rl::Policy& p = *longest->policy;
    double excess = static_cast<double>(p.delay) +
                    static_cast<double>(longest->decision.delay_us) * static_cast<double>(p.requests) /
                        static_cast<double>(p.period_us);
    auto milli = static_cast<int64_t>(excess * 1000 + 1e-6);
    ngx_log_error(delay_log_level(lcf), ctx->r->connection->log, 0,
                  "delaying request%s, excess: %L.%03L, by zone \"%V\", delay %L.%03Ls", lcf->dry_run ? " (dry run)" : "",
                  milli / 1000, milli % 1000, &longest->applied->zone->name, ctx->delay_ms / 1000, ctx->delay_ms % 1000);
}

ngx_int_t rl_delay_start(rl_ctx_t* ctx) noexcept {
    ngx_http_request_t* r = ctx->r;
    ngx_connection_t* c = r->connection;
    ctx->delaying = false;
    // Notice a client that goes away while it waits.
    if (c->read->ready) {
        ngx_post_event(c->read, &ngx_posted_events);
    } else if (ngx_handle_read_event(c->read, 0) != NGX_OK) {
        rl_store_give_back(ctx);  // the request is not served: what it consumed goes back
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }
    ctx->phase = RL_PHASE_DELAYED;
    r->read_event_handler = ngx_http_test_reading;
    r->write_event_handler = rl_delay_handler;
    c->write->delayed = 1;
    ngx_add_timer(c->write, static_cast<ngx_msec_t>(ctx->delay_ms));
    return NGX_AGAIN;
}
