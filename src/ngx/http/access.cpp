// The pre-access phase handler: decides every applied limit once per main request, through its
// zone's store (store.h): the shared-memory pass first, all or nothing; then, without blocking
// the worker, the waits some stores need (a lease's refill, then Redis's decisions); then the
// verdict: on_error, status, the delay, the log line and the metrics.
#include "ngx/http/access.h"

#include "core/algo/block.h"
#include "core/text/rate.h"

#include "ngx/http/delay.h"
#include "ngx/metrics/metrics.h"
#include "ngx/stores/store.h"

namespace {

// Rejected requests: the limit that takes longest to admit again decides.
ngx_int_t pick_rejecting(const rl_result_t* res, ngx_uint_t n, int64_t* retry_us) {
    ngx_int_t best = -1;
    int64_t longest = 0;
    for (ngx_uint_t i = 0; i < n; i++) {
        if (!rl_decided(res[i]) || res[i].decision.allowed) continue;
        int64_t wait = rl::block_retry_after(*res[i].policy, res[i].decision);  // at least a block it started
        if (wait == rl::kNever) wait = INT64_MAX;
        if (best < 0 || wait > longest) {
            best = static_cast<ngx_int_t>(i);
            longest = wait;
        }
    }
    *retry_us = longest == INT64_MAX ? rl::kNever : longest;
    return best;
}

// Allowed requests: the most restrictive limit (fewest remaining) decides.
ngx_int_t pick_most_restrictive(const rl_result_t* res, ngx_uint_t n) {
    ngx_int_t best = -1;
    for (ngx_uint_t i = 0; i < n; i++) {
        if (!rl_decided(res[i])) continue;
        if (best < 0 || res[i].decision.remaining < res[best].decision.remaining) best = static_cast<ngx_int_t>(i);
    }
    return best;
}

void log_rejection(ngx_http_request_t* r, const rl_loc_conf_t* lcf, const rl_result_t& res) {
    const rl_zone_t* zone = res.applied->zone;
    if (zone->concurrency) {
        // limit_conn's words, so that what reads its lines (fail2ban, alerts) keeps working.
        ngx_log_error(lcf->log_level, r->connection->log, 0, "limiting connections%s by zone \"%V\"",
                      lcf->dry_run ? ", dry run," : "", &zone->name);
        return;
    }
    int64_t wait = res.decision.retry_after_us;
    if (wait == rl::kNever) {
        if (res.cost == rl::kCostTooLarge) {
            ngx_log_error(lcf->log_level, r->connection->log, 0,
                          "limiting request%s by zone \"%V\", quantity over %L exceeds its capacity",
                          lcf->dry_run ? " (dry run)" : "", &zone->name, rl::kMaxRequests);
            return;
        }
        ngx_log_error(lcf->log_level, r->connection->log, 0,
                      "limiting request%s by zone \"%V\", quantity %L exceeds its capacity",
                      lcf->dry_run ? " (dry run)" : "", &zone->name, res.cost);
        return;
    }
    int64_t ms = (wait + 999) / 1000;
    if (res.decision.block == rl::kBlockLive) {
        ngx_log_error(lcf->log_level, r->connection->log, 0, "limiting request%s by zone \"%V\", blocked for %L.%03Ls",
                      lcf->dry_run ? " (dry run)" : "", &zone->name, ms / 1000, ms % 1000);
        return;
    }
    if (res.decision.block == rl::kBlockStarted) {
        int64_t block_ms = (res.policy->block_us + 999) / 1000;
        if (lcf->dry_run) {
            ngx_log_error(lcf->log_level, r->connection->log, 0,
                          "limiting request (dry run) by zone \"%V\", would block for %L.%03Ls", &zone->name,
                          block_ms / 1000, block_ms % 1000);
            return;
        }
        ngx_log_error(lcf->log_level, r->connection->log, 0,
                      "limiting request by zone \"%V\", retry in %L.%03Ls, blocked for %L.%03Ls", &zone->name,
                      ms / 1000, ms % 1000, block_ms / 1000, block_ms % 1000);
        return;
    }
    ngx_log_error(lcf->log_level, r->connection->log, 0, "limiting request%s by zone \"%V\", retry in %L.%03Ls",
                  lcf->dry_run ? " (dry run)" : "", &zone->name, ms / 1000, ms % 1000);
}

// Whether a live block rejected the request.
bool blocked(const rl_result_t* res, ngx_uint_t n) {
    for (ngx_uint_t i = 0; i < n; i++) {
        if (rl_decided(res[i]) && !res[i].decision.allowed && res[i].decision.block == rl::kBlockLive) return true;
    }
    return false;
}

// Decided after waiting: what on_error does with the results that failed, all or nothing
// across the stores, and the verdict.
void finish(rl_ctx_t* ctx, const rl_loc_conf_t* lcf) {
    ngx_http_request_t* r = ctx->r;
    ngx_uint_t n = ctx->nresults;
    rl_result_t* res = ctx->results;
    bool failed = false, rejected = false, store_error = false;
    for (ngx_uint_t i = 0; i < n; i++) {
        failed = failed || res[i].store == RL_STORE_FAILED;
        store_error = store_error || (res[i].flags & RL_RES_ERROR);
        rejected = rejected || (rl_decided(res[i]) && !res[i].decision.allowed);
    }

    if (failed && lcf->on_error == RL_ON_ERROR_LOCAL && !rejected) {
        // Redis did not answer: its limits are decided in their zones' shared memory, so
        // limits degrade to per-host instead of vanishing.
        for (ngx_uint_t i = 0; i < n; i++) {
            if (res[i].store == RL_STORE_FAILED) res[i].store = RL_STORE_LOCAL;
        }
        rl_result_t** list = rl_ctx_list(ctx);
        ngx_uint_t m = rl_store_select(ctx, RL_STORE_LOCAL, list);
        rejected = !rl_store_decide_local(list, m, rl_ctx_scratch(ctx));
    }
    bool denied = failed && lcf->on_error == RL_ON_ERROR_DENY;

    if (rejected || denied) {
        // All or nothing (dry run included): what the stores consumed for this request is
        // given back, and so is what a Redis call that timed out may still consume.
        rl_store_give_back(ctx);
    }
    rl_store_decided(ctx);

    ctx->verdict = NGX_DECLINED;
    if (rejected) {
        ctx->decider = pick_rejecting(res, n, &ctx->retry_after_us);
        for (ngx_uint_t i = 0; i < n; i++) {
            if (rl_decided(res[i]) && !res[i].decision.allowed) log_rejection(r, lcf, res[i]);
        }
        ctx->status = lcf->dry_run      ? RL_STATUS_REJECTED_DRY_RUN
                      : blocked(res, n) ? RL_STATUS_BLOCKED
                                        : RL_STATUS_REJECTED;
        if (!lcf->dry_run) ctx->verdict = static_cast<ngx_int_t>(lcf->status);
    } else {
        ctx->decider = pick_most_restrictive(res, n);
        ctx->status = RL_STATUS_PASSED;
        if (denied && !lcf->dry_run) ctx->verdict = NGX_HTTP_SERVICE_UNAVAILABLE;
        ctx->admitted = !denied;  // what its limits took stands (settle.cpp)
        rl_delay_decide(ctx, lcf);
    }
    if (failed || store_error) ctx->status = RL_STATUS_ERROR;
    rl_metrics_count_results(ctx, lcf);
}

const rl_loc_conf_t* loc_conf(rl_ctx_t* ctx) {
    return static_cast<rl_loc_conf_t*>(ngx_http_get_module_loc_conf(ctx->r, ngx_http_ratelimit_module));
}

// Resumes a request that waited: its phases run again from this handler.
void on_wake(ngx_event_t* ev) noexcept {
    auto* ctx = static_cast<rl_ctx_t*>(ev->data);
    ngx_http_request_t* r = ctx->r;
    ngx_connection_t* c = r->connection;
    r->read_event_handler = ngx_http_block_reading;
    r->write_event_handler = ngx_http_core_run_phases;
    ngx_http_core_run_phases(r);
    ngx_http_run_posted_requests(c);
}

void wake(rl_ctx_t* ctx, rl_phase_e phase) {
    ctx->phase = phase;
    if (!ctx->wake.posted) {
        ngx_post_event(&ctx->wake, &ngx_posted_events);
    }
}

// A store's wait is over (ended) or it asks for a new decision within the same deadline.
void on_resume(rl_ctx_t* ctx, bool ended) noexcept {
    if (ctx->waiting > 1) {
        ctx->waiting--;
        return;
    }
    ctx->waiting = 0;
    if (ended && ctx->timer.timer_set) {
        ngx_del_timer(&ctx->timer);
    }
    if (ctx->phase == RL_PHASE_WAITING) {
        finish(ctx, loc_conf(ctx));
        wake(ctx, RL_PHASE_DECIDED);
    } else {
        wake(ctx, RL_PHASE_AGAIN);
    }
}

void on_timeout(ngx_event_t* ev) noexcept {
    auto* ctx = static_cast<rl_ctx_t*>(ev->data);
    rl_store_timed_out(ctx);  // what has no answer is decided without it (on_error, a lease's fallback)
    ctx->waiting = 1;
    on_resume(ctx, true);
}

// The longest any waiting result's store may take.
ngx_msec_t wait_timeout(const rl_ctx_t* ctx, rl_phase_e phase) {
    ngx_msec_t timeout = 0;
    for (ngx_uint_t i = 0; i < ctx->nresults; i++) {
        const rl_result_t& res = ctx->results[i];
        bool waits = phase == RL_PHASE_REFILLING ? (res.flags & RL_RES_WAITS) : res.store == RL_STORE_REDIS;
        if (waits && res.applied->zone->timeout > timeout) timeout = res.applied->zone->timeout;
    }
    return timeout;
}

// Waits (without blocking) for `nstores` stores: the request resumes from on_wake. A refill
// that asks for a new decision keeps its deadline; Redis's decisions get their own timeout.
ngx_int_t wait(ngx_http_request_t* r, rl_ctx_t* ctx, rl_phase_e phase, ngx_uint_t nstores, ngx_msec_t timeout) {
    ctx->phase = phase;
    ctx->waiting = nstores;
    ctx->timer.handler = on_timeout;
    ctx->timer.data = ctx;
    ctx->timer.log = r->connection->log;
    ctx->wake.handler = on_wake;
    ctx->wake.data = ctx;
    ctx->wake.log = r->connection->log;
    if (phase == RL_PHASE_WAITING || !ctx->timer.timer_set) {
        ngx_add_timer(&ctx->timer, timeout);
    }
    r->read_event_handler = ngx_http_test_reading;  // notices a client that goes away
    r->write_event_handler = ngx_http_request_empty_handler;
    return NGX_AGAIN;
}

// Results whose store cannot decide them yet wait for its refill, unless another limit
// rejects the request anyway: those then report their state, as limits that allow do.
bool refill_waits(rl_ctx_t* ctx) {
    bool waits = false, rejected = false;
    for (ngx_uint_t i = 0; i < ctx->nresults; i++) {
        const rl_result_t& res = ctx->results[i];
        if (res.flags & RL_RES_WAITS) {
            waits = true;
        } else if (res.store == RL_STORE_SHM && !res.decision.allowed) {
            rejected = true;
        }
    }
    if (!waits || !rejected) return waits;
    for (ngx_uint_t i = 0; i < ctx->nresults; i++) {
        rl_result_t& res = ctx->results[i];
        if (!(res.flags & RL_RES_WAITS)) continue;
        res.flags &= ~RL_RES_WAITS;
        res.decision.allowed = true;
    }
    return false;
}

// Decides the limits kept in shared memory, then waits for a refill or for Redis if a store
// needs to. Returns the verdict, or NGX_AGAIN while waiting.
ngx_int_t decide(ngx_http_request_t* r, rl_ctx_t* ctx, const rl_loc_conf_t* lcf) {
    // Shared memory first: a request it rejects costs no Redis round trip.
    rl_result_t** list = rl_ctx_list(ctx);
    ngx_uint_t nshm = rl_store_select(ctx, RL_STORE_SHM, list);
    bool ok = nshm == 0 || rl_store_decide_local(list, nshm, rl_ctx_scratch(ctx));
    if (!ok && refill_waits(ctx)) {
        if (ngx_uint_t n = rl_store_refill(ctx)) {
            return wait(r, ctx, RL_PHASE_REFILLING, n, wait_timeout(ctx, RL_PHASE_REFILLING));
        }
        // Nothing could be asked: the stores decide without it.
        ok = rl_store_decide_local(list, nshm, rl_ctx_scratch(ctx));
    }
    if (ok) {
        ngx_msec_t timeout = wait_timeout(ctx, RL_PHASE_WAITING);  // before calls that cannot go fail
        if (ngx_uint_t n = rl_store_remote(ctx)) return wait(r, ctx, RL_PHASE_WAITING, n, timeout);
    } else {
        // Redis limits are not asked: the request is rejected anyway and must consume nothing.
        for (ngx_uint_t i = 0; i < ctx->nresults; i++) {
            if (ctx->results[i].store == RL_STORE_REDIS) ctx->results[i].store = RL_STORE_SKIPPED;
        }
    }
    finish(ctx, lcf);
    return ctx->delaying ? rl_delay_start(ctx) : ctx->verdict;
}

}  // namespace

ngx_int_t rl_access_handler(ngx_http_request_t* r) noexcept {
    if (r->main != r) return NGX_DECLINED;  // subrequests ride on their main request's verdict

    auto* lcf = static_cast<rl_loc_conf_t*>(ngx_http_get_module_loc_conf(r, ngx_http_ratelimit_module));
    if (lcf->applied == nullptr) return NGX_DECLINED;
    if (rl_ctx_t* ctx = rl_get_ctx(r)) {
        switch (ctx->phase) {
        case RL_PHASE_WAITING:
        case RL_PHASE_REFILLING:
        case RL_PHASE_DELAYED:
            return NGX_AGAIN;
        case RL_PHASE_DECIDED:
            ctx->phase = RL_PHASE_RETURNED;
            return ctx->delaying ? rl_delay_start(ctx) : ctx->verdict;
        case RL_PHASE_AGAIN: {
            ctx->phase = RL_PHASE_RETURNED;
            ngx_int_t rc = decide(r, ctx, lcf);
            bool waits = ctx->phase == RL_PHASE_WAITING || ctx->phase == RL_PHASE_REFILLING;
            if (!waits && ctx->timer.timer_set) {  // (a delay has its own timer)
                ngx_del_timer(&ctx->timer);
            }
            return rc;
        }
        default:
            return NGX_DECLINED;  // counted once, not again after a redirect
        }
    }

    rl_ctx_t* ctx = rl_ctx_create(r, lcf);
    if (ctx == nullptr) return NGX_HTTP_INTERNAL_SERVER_ERROR;
    ctx->resume = on_resume;
    if (ctx->nresults == 0) {
        ctx->status = RL_STATUS_EXEMPT;
        return NGX_DECLINED;
    }
    return decide(r, ctx, lcf);
}
