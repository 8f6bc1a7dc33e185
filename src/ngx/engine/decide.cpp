// The decision of a context: the shared-memory pass, the waits, the verdict (decide.h).
#include "ngx/engine/decide.h"

#include "ngx/engine/deadline.h"
#include "ngx/engine/delay.h"
#include "ngx/engine/stores.h"
#include "ngx/engine/top.h"
#include "ngx/metrics/metrics.h"
#include "ngx/stores/pass.h"

#include "core/algo/block.h"

namespace {

// Rejected: the limit that takes longest to admit again decides.
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

// Admitted: the most restrictive limit (fewest remaining) decides.
ngx_int_t pick_most_restrictive(const rl_result_t* res, ngx_uint_t n) {
    ngx_int_t best = -1;
    for (ngx_uint_t i = 0; i < n; i++) {
        if (!rl_decided(res[i])) continue;
        if (best < 0 || res[i].decision.remaining < res[best].decision.remaining) best = static_cast<ngx_int_t>(i);
    }
    return best;
}

// Whether a live block rejected it.
bool blocked(const rl_result_t* res, ngx_uint_t n) {
    for (ngx_uint_t i = 0; i < n; i++) {
        if (rl_decided(res[i]) && !res[i].decision.allowed && res[i].decision.block == rl::kBlockLive) return true;
    }
    return false;
}

// What each zone came to (nginx_ratelimit_requests_total).
void count_results(const rl_ctx_t* ctx) {
    const rl_scope_t* scope = ctx->scope;
    for (ngx_uint_t i = 0; i < ctx->nresults; i++) {
        const rl_result_t& res = ctx->results[i];
        rl_metrics_zone_t* m = res.applied->zone->metrics;
        if (m == nullptr) continue;
        rl_result_kind_e kind;
        switch (res.store) {
        case RL_STORE_SHM:
        case RL_STORE_REDIS:
            if (res.decision.allowed && res.decision.delay_us > 0) {
                kind = scope->dry_run ? RL_RESULT_DELAYED_DRY_RUN : RL_RESULT_DELAYED;
            } else if (res.decision.allowed) {
                kind = RL_RESULT_PASSED;
            } else if (res.decision.block == rl::kBlockLive) {
                kind = scope->dry_run ? RL_RESULT_BLOCKED_DRY_RUN : RL_RESULT_BLOCKED;
            } else {
                kind = scope->dry_run ? RL_RESULT_REJECTED_DRY_RUN : RL_RESULT_REJECTED;
            }
            break;
        case RL_STORE_LOCAL:
            kind = RL_RESULT_ERROR_LOCAL;
            break;
        case RL_STORE_FAILED:
            kind = scope->on_error == RL_ON_ERROR_DENY    ? RL_RESULT_ERROR_DENIED
                   : scope->on_error == RL_ON_ERROR_LOCAL ? RL_RESULT_ERROR_LOCAL
                                                          : RL_RESULT_ERROR_ALLOWED;
            break;
        default:
            continue;  // not asked: a shared-memory limit had already rejected the request
        }
        rl_metrics_add(scope->counts == RL_COUNT_DATAGRAMS ? &m->datagrams[kind] : &m->requests[kind], 1);
    }
}

// Decided after waiting: what on_error does with the results that failed, all or nothing
// across the stores, and the verdict.
void finish(rl_ctx_t* ctx) {
    const rl_scope_t* scope = ctx->scope;
    ngx_uint_t n = ctx->nresults;
    rl_result_t* res = ctx->results;
    bool failed = false, rejected = false, store_error = false;
    for (ngx_uint_t i = 0; i < n; i++) {
        failed = failed || res[i].store == RL_STORE_FAILED;
        store_error = store_error || (res[i].flags & RL_RES_ERROR);
        rejected = rejected || (rl_decided(res[i]) && !res[i].decision.allowed);
    }

    if (failed && scope->on_error == RL_ON_ERROR_LOCAL && !rejected) {
        // Redis did not answer: its limits are decided in their zones' shared memory, so
        // limits degrade to per-host instead of vanishing.
        for (ngx_uint_t i = 0; i < n; i++) {
            if (res[i].store == RL_STORE_FAILED) res[i].store = RL_STORE_LOCAL;
        }
        rl_result_t** list = rl_ctx_list(ctx);
        ngx_uint_t m = rl_store_select(ctx, RL_STORE_LOCAL, list);
        rejected = !rl_store_decide_local(list, m, rl_ctx_scratch(ctx));
    }
    bool denied = failed && scope->on_error == RL_ON_ERROR_DENY;

    if (rejected || denied) {
        // All or nothing (dry run included): what the stores consumed for this request is
        // given back, and so is what a Redis call that timed out may still consume.
        rl_store_give_back(ctx);
    }
    rl_store_decided(ctx);

    ctx->rejected = rejected;
    ctx->denied = denied;
    if (rejected) {
        ctx->decider = pick_rejecting(res, n, &ctx->retry_after_us);
        ctx->status = scope->dry_run    ? RL_STATUS_REJECTED_DRY_RUN
                      : blocked(res, n) ? RL_STATUS_BLOCKED
                                        : RL_STATUS_REJECTED;
        rl_top_record(ctx);  // the rejection path only: an admitted request pays nothing
    } else {
        ctx->decider = pick_most_restrictive(res, n);
        ctx->status = RL_STATUS_PASSED;
        ctx->admitted = !denied;  // what its limits took stands (a settle's)
        rl_delay_decide(ctx);
    }
    if (failed || store_error) ctx->status = RL_STATUS_ERROR;
    count_results(ctx);
    ctx->fe->decided(ctx);
}

// Resumes what waited: the front end goes on.
void on_wake(ngx_event_t* ev) noexcept {
    auto* ctx = static_cast<rl_ctx_t*>(ev->data);
    ctx->fe->resume(ctx);
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
    if (ended) rl_deadline_drop(ctx);
    if (ctx->phase == RL_PHASE_WAITING) {
        finish(ctx);
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

// Waits (without blocking) for `nstores` stores. A refill that asks for a new decision keeps
// its deadline; Redis's decisions get their own timeout.
rl_step_e wait(rl_ctx_t* ctx, rl_phase_e phase, ngx_uint_t nstores, ngx_msec_t timeout) {
    ctx->phase = phase;
    ctx->waiting = nstores;
    if (phase == RL_PHASE_WAITING || !rl_deadline_pending(ctx)) rl_deadline_set(ctx, timeout);
    return RL_STEP_WAITING;
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
// needs to.
rl_step_e decide(rl_ctx_t* ctx) {
    // Shared memory first: a request it rejects costs no Redis round trip.
    rl_result_t** list = rl_ctx_list(ctx);
    ngx_uint_t nshm = rl_store_select(ctx, RL_STORE_SHM, list);
    bool ok = nshm == 0 || rl_store_decide_local(list, nshm, rl_ctx_scratch(ctx));
    if (!ok && refill_waits(ctx)) {
        if (ngx_uint_t n = rl_store_refill(ctx)) {
            return wait(ctx, RL_PHASE_REFILLING, n, wait_timeout(ctx, RL_PHASE_REFILLING));
        }
        // Nothing could be asked: the stores decide without it.
        ok = rl_store_decide_local(list, nshm, rl_ctx_scratch(ctx));
    }
    if (ok) {
        ngx_msec_t timeout = wait_timeout(ctx, RL_PHASE_WAITING);  // before calls that cannot go fail
        if (ngx_uint_t n = rl_store_remote(ctx)) return wait(ctx, RL_PHASE_WAITING, n, timeout);
    } else {
        // Redis limits are not asked: the request is rejected anyway and must consume nothing.
        for (ngx_uint_t i = 0; i < ctx->nresults; i++) {
            if (ctx->results[i].store == RL_STORE_REDIS) ctx->results[i].store = RL_STORE_SKIPPED;
        }
    }
    finish(ctx);
    return RL_STEP_DECIDED;
}

}  // namespace

void rl_engine_prepare(rl_ctx_t* ctx) noexcept {
    ctx->resume = on_resume;
    ctx->timer.handler = on_timeout;
    ctx->timer.data = ctx;
    ctx->timer.log = ctx->log;
    ctx->wake.handler = on_wake;
    ctx->wake.data = ctx;
    ctx->wake.log = ctx->log;
}

rl_step_e rl_engine_decide(rl_ctx_t* ctx) noexcept {
    if (ctx->nresults == 0) {
        ctx->status = RL_STATUS_EXEMPT;
        return RL_STEP_DECIDED;
    }
    bool again = ctx->phase == RL_PHASE_AGAIN;
    ctx->phase = RL_PHASE_RETURNED;
    rl_step_e step = decide(ctx);
    if (again && step == RL_STEP_DECIDED) rl_deadline_drop(ctx);  // (a delay has its own timer)
    return step;
}
