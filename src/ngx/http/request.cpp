// The HTTP front end of the engine: a main request's context (the engine's, HTTP's part after
// it), its values (complex values), the log lines of its verdict, and its phases run again
// after a wait.
#include "ngx/http/request.h"

#include "ngx/engine/delay.h"

#include "core/algo/block.h"
#include "core/text/rate.h"

namespace {

bool http_evaluate(rl_ctx_t* ctx, const rl_value_t* value, ngx_str_t* out) noexcept {
    auto* r = static_cast<ngx_http_request_t*>(ctx->subject);
    return ngx_http_complex_value(r, rl_http_cv(value), out) == NGX_OK;
}

void log_rejection(ngx_http_request_t* r, const rl_scope_t* scope, const rl_result_t& res) {
    const rl_zone_t* zone = res.applied->zone;
    ngx_uint_t level = scope->log_level;
    const char* dry = scope->dry_run ? " (dry run)" : "";
    if (zone->concurrency) {
        // limit_conn's words, so that what reads its lines (fail2ban, alerts) keeps working.
        ngx_log_error(level, r->connection->log, 0, "limiting connections%s by zone \"%V\"",
                      scope->dry_run ? ", dry run," : "", &zone->name);
        return;
    }
    int64_t wait = res.decision.retry_after_us;
    if (wait == rl::kNever) {
        if (res.cost == rl::kCostTooLarge) {
            ngx_log_error(level, r->connection->log, 0, "limiting request%s by zone \"%V\", quantity over %L exceeds "
                          "its capacity", dry, &zone->name, rl::kMaxRequests);
            return;
        }
        ngx_log_error(level, r->connection->log, 0, "limiting request%s by zone \"%V\", quantity %L exceeds its "
                      "capacity", dry, &zone->name, res.cost);
        return;
    }
    int64_t ms = (wait + 999) / 1000;
    if (res.decision.block == rl::kBlockLive) {
        ngx_log_error(level, r->connection->log, 0, "limiting request%s by zone \"%V\", blocked for %L.%03Ls", dry,
                      &zone->name, ms / 1000, ms % 1000);
        return;
    }
    if (res.decision.block == rl::kBlockStarted) {
        int64_t block_ms = (res.policy->block_us + 999) / 1000;
        if (scope->dry_run) {
            ngx_log_error(level, r->connection->log, 0, "limiting request (dry run) by zone \"%V\", would block for "
                          "%L.%03Ls", &zone->name, block_ms / 1000, block_ms % 1000);
            return;
        }
        ngx_log_error(level, r->connection->log, 0, "limiting request by zone \"%V\", retry in %L.%03Ls, blocked for "
                      "%L.%03Ls", &zone->name, ms / 1000, ms % 1000, block_ms / 1000, block_ms % 1000);
        return;
    }
    ngx_log_error(level, r->connection->log, 0, "limiting request%s by zone \"%V\", retry in %L.%03Ls", dry,
                  &zone->name, ms / 1000, ms % 1000);
}

// limit_req's rule: delays are logged one level below ratelimit_log_level (info stays info).
void log_delay(ngx_http_request_t* r, const rl_ctx_t* ctx) {
    const rl_scope_t* scope = ctx->scope;
    ngx_uint_t level = scope->log_level == NGX_LOG_INFO ? NGX_LOG_INFO : scope->log_level + 1;
    int64_t milli = rl_delay_excess_milli(ctx);
    ngx_log_error(level, r->connection->log, 0, "delaying request%s, excess: %L.%03L, by zone \"%V\", delay %L.%03Ls",
                  scope->dry_run ? " (dry run)" : "", milli / 1000, milli % 1000,
                  &ctx->results[ctx->delayer].applied->zone->name, ctx->delay_ms / 1000, ctx->delay_ms % 1000);
}

// The verdict: what the access handler returns, and the log lines.
void http_decided(rl_ctx_t* ctx) noexcept {
    rl_http_ctx_t* h = rl_http(ctx);
    ngx_http_request_t* r = h->r;
    const rl_scope_t* scope = ctx->scope;
    h->verdict = NGX_DECLINED;
    if (ctx->rejected) {
        for (ngx_uint_t i = 0; i < ctx->nresults; i++) {
            const rl_result_t& res = ctx->results[i];
            if (rl_decided(res) && !res.decision.allowed) log_rejection(r, scope, res);
        }
        auto* lcf = static_cast<rl_loc_conf_t*>(ngx_http_get_module_loc_conf(r, ngx_http_ratelimit_module));
        if (!scope->dry_run) h->verdict = static_cast<ngx_int_t>(lcf->status);
        return;
    }
    if (ctx->denied && !scope->dry_run) h->verdict = NGX_HTTP_SERVICE_UNAVAILABLE;
    if (ctx->delayer < 0) return;
    h->delaying = !scope->dry_run && h->verdict == NGX_DECLINED;
    log_delay(r, ctx);
}

// A wait is over: the request's phases run again from the access handler.
void http_resume(rl_ctx_t* ctx) noexcept {
    ngx_http_request_t* r = rl_http(ctx)->r;
    ngx_connection_t* c = r->connection;
    r->read_event_handler = ngx_http_block_reading;
    r->write_event_handler = ngx_http_core_run_phases;
    ngx_http_core_run_phases(r);
    ngx_http_run_posted_requests(c);
}

}  // namespace

const rl_frontend_t rl_http_frontend = {"http", &ngx_http_ratelimit_module, rl_http_compile, http_evaluate, http_decided, http_resume};

rl_value_t* rl_http_compile(ngx_conf_t* cf, ngx_str_t* text) noexcept {
    auto* cv = static_cast<ngx_http_complex_value_t*>(ngx_palloc(cf->pool, sizeof(ngx_http_complex_value_t)));
    if (cv == nullptr) return nullptr;
    ngx_http_compile_complex_value_t ccv{};
    ccv.cf = cf;
    ccv.value = text;
    ccv.complex_value = cv;
    return ngx_http_compile_complex_value(&ccv) == NGX_OK ? reinterpret_cast<rl_value_t*>(cv) : nullptr;
}

rl_ctx_t* rl_http_ctx_create(ngx_http_request_t* r, const rl_loc_conf_t* lcf) noexcept {
    rl_ctx_t* ctx = rl_ctx_create(r->pool, r->connection->log, &lcf->scope, &rl_http_frontend, r,
                                  sizeof(rl_http_ctx_t));
    if (ctx == nullptr) return nullptr;
    rl_http_ctx_t* h = rl_http(ctx);
    *h = rl_http_ctx_t{};
    h->r = r;
    h->headers = lcf->headers;
    h->policy = lcf->scope.tiered ? nullptr : &lcf->policy;
    h->verdict = NGX_DECLINED;
    h->settle = -1;
    ngx_http_set_ctx(r, ctx, ngx_http_ratelimit_module);
    return ctx;
}
