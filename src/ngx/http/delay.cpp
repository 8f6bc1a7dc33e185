// Shaping: a request its limits admitted with a delay (delay=, see core/algo/delay.h) waits on a
// timer before its next phase, as limit_req's delayed requests do: the worker goes on serving
// others. The timer is on the connection's write event, not cancelable, so a graceful stop
// lets the request finish. A client that closes the connection meanwhile ends the request
// (499), and what its limits consumed goes back (limit_req keeps it).
#include "ngx/http/delay.h"

#include "ngx/engine/stores.h"

namespace {

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

ngx_int_t rl_delay_start(rl_ctx_t* ctx) noexcept {
    ngx_http_request_t* r = rl_http(ctx)->r;
    ngx_connection_t* c = r->connection;
    rl_http(ctx)->delaying = false;
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
