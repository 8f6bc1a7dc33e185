// The pre-access phase handler: evaluates every applied limit once per main request.
// Shared-memory limits are decided at once; Redis limits are sent, and the request waits
// (without blocking the worker) until Redis answers or its timeout passes.
#include "ratelimit.h"

#include "core/log_text.h"
#include "core/rate.h"
#include "sync.h"

namespace {

// The pool cleanup that holds the context: it is found again after an internal redirect
// wipes the module contexts (as the realip module keeps its own), and it stops any wait
// when the request goes away.
void rl_ctx_cleanup(void* data) noexcept {
    auto* ctx = static_cast<rl_ctx_t*>(data);
    if (ctx->phase == RL_PHASE_DELAYED) rl_delay_abandoned(ctx);
    if (ctx->timer.timer_set) {
        ngx_del_timer(&ctx->timer);
    }
    if (ctx->wake.posted) {
        ngx_delete_posted_event(&ctx->wake);
    }
    rl_sync_lease_cancel(ctx);
    rl_sync_lease_drop(ctx);
    rl_redis_abandon(ctx);
}

int64_t request_cost(ngx_http_request_t* r, const rl_limit_t& limit, rl_zone_t* zone) {
    if (limit.quantity_cv == nullptr) return limit.quantity;
    ngx_str_t value;
    if (ngx_http_complex_value(r, limit.quantity_cv, &value) != NGX_OK) return 1;
    if (value.len == 0) return 1;
    // A number too large for any limit is rejected by the algorithm (kNever), as is one
    // above this limit's capacity; only what is not a number at all counts 1.
    int64_t cost = rl::parse_cost(rl_sv(value));
    if (cost >= 0) return cost;
    rl_warn_value(r, zone, &zone->quantity_warned, "quantity", value, "counted as 1");
    return 1;
}

}  // namespace

void rl_warn_value(ngx_http_request_t* r, const rl_zone_t* zone, time_t* stamp, const char* what,
                   const ngx_str_t& value, const char* outcome) noexcept {
    if (*stamp == ngx_time()) return;  // once a second per zone and worker
    *stamp = ngx_time();
    char text[64];
    size_t n = rl::log_text(value.data, value.len, text, sizeof(text));
    ngx_log_error(NGX_LOG_WARN, r->connection->log, 0, "ratelimit zone \"%V\": invalid %s \"%*s\", %s", &zone->name,
                  what, n, text, outcome);
}

namespace {

// Rejected requests: the limit that takes longest to admit again decides.
ngx_int_t pick_rejecting(const rl_result_t* res, ngx_uint_t n, int64_t* retry_us) {
    ngx_int_t best = -1;
    int64_t longest = 0;
    for (ngx_uint_t i = 0; i < n; i++) {
        if (!rl_decided(res[i]) || res[i].decision.allowed) continue;
        int64_t wait = res[i].decision.retry_after_us;
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
    ngx_log_error(lcf->log_level, r->connection->log, 0, "limiting request%s by zone \"%V\", retry in %L.%03Ls",
                  lcf->dry_run ? " (dry run)" : "", &zone->name, ms / 1000, ms % 1000);
}

// The results of one store, as the pointer list rl_decide_all and rl_refund_all take.
ngx_uint_t select_results(rl_ctx_t* ctx, rl_store_e store, rl_result_t** out) {
    ngx_uint_t m = 0;
    for (ngx_uint_t i = 0; i < ctx->nresults; i++) {
        if (ctx->results[i].store == store) out[m++] = &ctx->results[i];
    }
    return m;
}

void** scratch_of(rl_ctx_t* ctx) { return reinterpret_cast<void**>(ctx->results + ctx->nresults); }
rl_result_t** list_of(rl_ctx_t* ctx) { return reinterpret_cast<rl_result_t**>(scratch_of(ctx) + 2 * ctx->nresults); }
// A tiered location's per-request policies: after the room the results, the scratch and the
// list take for all `n` of its limits (they use less when some key is empty).
rl::Policy* tier_policies(rl_ctx_t* ctx, ngx_uint_t n) {
    return reinterpret_cast<rl::Policy*>(reinterpret_cast<void**>(ctx->results + n) + 3 * n);
}

// Resumes a request that waited for Redis: its phases run again from this handler.
void rl_wake(ngx_event_t* ev) noexcept {
    auto* ctx = static_cast<rl_ctx_t*>(ev->data);
    ngx_http_request_t* r = ctx->r;
    ngx_connection_t* c = r->connection;
    r->read_event_handler = ngx_http_block_reading;
    r->write_event_handler = ngx_http_core_run_phases;
    ngx_http_core_run_phases(r);
    ngx_http_run_posted_requests(c);
}

void rl_timeout(ngx_event_t* ev) noexcept {
    auto* ctx = static_cast<rl_ctx_t*>(ev->data);
    // (Woken by its poll in this same timer pass, a request still waits for its lease: phase
    // RL_PHASE_LEASED, its results flagged RL_SYNC_WAIT.)
    bool leasing = ctx->lease_waits > 0 || ctx->lease.next != nullptr || ctx->poll.timer_set ||
                   ctx->phase == RL_PHASE_LEASED;
    for (ngx_uint_t i = 0; i < ctx->nresults && !leasing; i++) leasing = ctx->results[i].sync & RL_SYNC_WAIT;
    if (leasing) {
        rl_sync_lease_cancel(ctx);  // no grant in time: its lease limits fall back
        rl_lease_finished(ctx);
        return;
    }
    rl_redis_timed_out(ctx);  // pending calls fail: on_error applies to their limits
    rl_redis_finished(ctx);
}

// Waits (without blocking) for Redis or for lease grants: the request resumes from rl_wake.
// A lease wait that looks again keeps its deadline; Redis calls get their own timeout.
ngx_int_t rl_wait(ngx_http_request_t* r, rl_ctx_t* ctx, ngx_msec_t timeout, bool lease) {
    ctx->phase = RL_PHASE_WAITING;
    ctx->timer.handler = rl_timeout;
    ctx->timer.data = ctx;
    ctx->timer.log = r->connection->log;
    ctx->wake.handler = rl_wake;
    ctx->wake.data = ctx;
    ctx->wake.log = r->connection->log;
    if (!lease || !ctx->timer.timer_set) {
        ngx_add_timer(&ctx->timer, timeout);
    }
    r->read_event_handler = ngx_http_test_reading;  // notices a client that goes away
    r->write_event_handler = ngx_http_request_empty_handler;
    return NGX_AGAIN;
}

// Lease zones whose budget is empty (RL_SYNC_WAIT) wait for a grant, unless another limit
// rejects the request anyway: those then report their state, as limits that allow do.
bool lease_waits(rl_ctx_t* ctx) {
    bool wait = false, rejected = false;
    for (ngx_uint_t i = 0; i < ctx->nresults; i++) {
        const rl_result_t& res = ctx->results[i];
        if (res.sync & RL_SYNC_WAIT) {
            wait = true;
        } else if (res.store == RL_STORE_SHM && !res.decision.allowed) {
            rejected = true;
        }
    }
    if (!wait || !rejected) return wait;
    for (ngx_uint_t i = 0; i < ctx->nresults; i++) {
        rl_result_t& res = ctx->results[i];
        if (!(res.sync & RL_SYNC_WAIT)) continue;
        res.sync &= ~RL_SYNC_WAIT;
        res.decision.allowed = true;
    }
    return false;
}

// Decides the shared-memory and sync limits, then sends the Redis ones (or waits for lease
// grants first). Returns the verdict, or NGX_AGAIN while waiting.
ngx_int_t rl_decide(ngx_http_request_t* r, rl_ctx_t* ctx, rl_loc_conf_t* lcf) {
    // Shared memory first: a request it rejects costs no Redis round trip.
    ngx_uint_t m = ctx->nresults;
    rl_result_t** list = list_of(ctx);
    ngx_uint_t nshm = select_results(ctx, RL_STORE_SHM, list);
    bool shm_ok = nshm == 0 || rl_decide_all(list, nshm, scratch_of(ctx));
    if (!shm_ok && lease_waits(ctx)) {
        ngx_msec_t timeout = 0;
        for (ngx_uint_t i = 0; i < m; i++) {
            const rl_result_t& res = ctx->results[i];
            if ((res.sync & RL_SYNC_WAIT) && res.applied->zone->redis->timeout > timeout) {
                timeout = res.applied->zone->redis->timeout;
            }
        }
        if (rl_sync_lease_wait(ctx)) return rl_wait(r, ctx, timeout, true);
        for (ngx_uint_t i = 0; i < m; i++) {  // nothing could be asked: the fallback decides
            if (ctx->results[i].sync & RL_SYNC_WAIT) ctx->results[i].sync |= RL_SYNC_WAITED | RL_SYNC_FAILED;
        }
        shm_ok = rl_decide_all(list, nshm, scratch_of(ctx));
    }

    bool has_redis = false;
    for (ngx_uint_t i = 0; i < m; i++) has_redis = has_redis || ctx->results[i].store == RL_STORE_REDIS;
    if (shm_ok && has_redis && rl_redis_start(ctx) > 0) {
        ngx_msec_t timeout = 0;
        for (ngx_uint_t i = 0; i < ctx->ncalls; i++) {
            if (ctx->calls[i].redis->timeout > timeout) timeout = ctx->calls[i].redis->timeout;
        }
        return rl_wait(r, ctx, timeout, false);
    }
    if (!shm_ok) {
        // Redis limits are not asked: the request is rejected anyway and must consume nothing.
        for (ngx_uint_t i = 0; i < m; i++) {
            if (ctx->results[i].store == RL_STORE_REDIS) ctx->results[i].store = RL_STORE_SKIPPED;
        }
    }
    rl_finish(ctx, lcf);
    return ctx->delaying ? rl_delay_start(ctx) : ctx->verdict;
}

}  // namespace

rl_ctx_t* rl_get_ctx(ngx_http_request_t* r) noexcept {
    ngx_http_request_t* m = r->main;
    auto* ctx = static_cast<rl_ctx_t*>(ngx_http_get_module_ctx(m, ngx_http_ratelimit_module));
    if (ctx != nullptr) return ctx;
    for (ngx_pool_cleanup_t* cln = m->pool->cleanup; cln; cln = cln->next) {
        if (cln->handler == rl_ctx_cleanup) {
            ctx = static_cast<rl_ctx_t*>(cln->data);
            ngx_http_set_ctx(m, ctx, ngx_http_ratelimit_module);
            return ctx;
        }
    }
    return nullptr;
}

void rl_finish(rl_ctx_t* ctx, const rl_loc_conf_t* lcf) noexcept {
    ngx_http_request_t* r = ctx->r;
    ngx_uint_t n = ctx->nresults;
    rl_result_t* res = ctx->results;
    bool failed = false, rejected = false, sync_error = false;
    for (ngx_uint_t i = 0; i < n; i++) {
        failed = failed || res[i].store == RL_STORE_FAILED;
        sync_error = sync_error || (res[i].sync & RL_SYNC_ERROR);
        rejected = rejected || (rl_decided(res[i]) && !res[i].decision.allowed);
    }

    if (failed && lcf->on_error == RL_ON_ERROR_LOCAL && !rejected) {
        // Redis did not answer: its limits are decided in their zones' shared memory, so
        // limits degrade to per-host instead of vanishing.
        for (ngx_uint_t i = 0; i < n; i++) {
            if (res[i].store == RL_STORE_FAILED) res[i].store = RL_STORE_LOCAL;
        }
        rl_result_t** list = list_of(ctx);
        ngx_uint_t m = select_results(ctx, RL_STORE_LOCAL, list);
        rejected = !rl_decide_all(list, m, scratch_of(ctx));
    }
    bool denied = failed && lcf->on_error == RL_ON_ERROR_DENY;

    if (rejected || denied) {
        // All or nothing (dry run included): what the stores consumed for this request is
        // given back, and so is what a Redis call that timed out may still consume.
        rl_give_back(ctx);
    }
    rl_redis_forget(ctx);

    ctx->verdict = NGX_DECLINED;
    if (rejected) {
        ctx->decider = pick_rejecting(res, n, &ctx->retry_after_us);
        for (ngx_uint_t i = 0; i < n; i++) {
            if (rl_decided(res[i]) && !res[i].decision.allowed) log_rejection(r, lcf, res[i]);
        }
        ctx->status = lcf->dry_run ? RL_STATUS_REJECTED_DRY_RUN : RL_STATUS_REJECTED;
        if (!lcf->dry_run) ctx->verdict = static_cast<ngx_int_t>(lcf->status);
    } else {
        ctx->decider = pick_most_restrictive(res, n);
        ctx->status = RL_STATUS_PASSED;
        if (denied && !lcf->dry_run) ctx->verdict = NGX_HTTP_SERVICE_UNAVAILABLE;
        rl_delay_decide(ctx, lcf);
    }
    if (failed || sync_error) ctx->status = RL_STATUS_ERROR;
    rl_metrics_count_results(ctx, lcf);
}

void rl_give_back(rl_ctx_t* ctx) noexcept {
    rl_result_t** list = list_of(ctx);
    ngx_uint_t m = select_results(ctx, RL_STORE_SHM, list);
    m += select_results(ctx, RL_STORE_LOCAL, list + m);
    rl_refund_all(list, m, scratch_of(ctx));
    rl_redis_refund(ctx);
}

ngx_int_t rl_access_handler(ngx_http_request_t* r) noexcept {
    if (r->main != r) return NGX_DECLINED;  // subrequests ride on their main request's verdict

    auto* lcf = static_cast<rl_loc_conf_t*>(ngx_http_get_module_loc_conf(r, ngx_http_ratelimit_module));
    if (lcf->applied == nullptr) return NGX_DECLINED;
    if (rl_ctx_t* ctx = rl_get_ctx(r)) {
        if (ctx->phase == RL_PHASE_WAITING || ctx->phase == RL_PHASE_DELAYED) return NGX_AGAIN;
        if (ctx->phase == RL_PHASE_DECIDED) {
            ctx->phase = RL_PHASE_RETURNED;
            return ctx->delaying ? rl_delay_start(ctx) : ctx->verdict;
        }
        if (ctx->phase == RL_PHASE_LEASED) {
            ctx->phase = RL_PHASE_RETURNED;
            ngx_int_t rc = rl_decide(r, ctx, lcf);
            if (ctx->phase != RL_PHASE_WAITING && ctx->timer.timer_set) {  // (a delay has its own timer)
                ngx_del_timer(&ctx->timer);
            }
            return rc;
        }
        return NGX_DECLINED;  // counted once, not again after a redirect
    }

    // One allocation, the pool cleanup's own data, holds the context, the results, the
    // locking scratch and a result list.
    ngx_uint_t n = lcf->applied->nelts;
    size_t bytes = sizeof(rl_ctx_t) + n * (sizeof(rl_result_t) + 3 * sizeof(void*));
    if (lcf->tiered) bytes += n * sizeof(rl::Policy);  // each request's own policies, after the list
    ngx_pool_cleanup_t* cln = ngx_pool_cleanup_add(r->pool, bytes);
    if (cln == nullptr) return NGX_HTTP_INTERNAL_SERVER_ERROR;

    auto* ctx = static_cast<rl_ctx_t*>(cln->data);
    *ctx = rl_ctx_t{};
    ctx->r = r;
    ctx->results = reinterpret_cast<rl_result_t*>(ctx + 1);
    ctx->decider = -1;
    ctx->headers = lcf->headers;
    ctx->policy = lcf->tiered ? nullptr : &lcf->policy;
    ctx->napplied = n;
    ctx->phase = RL_PHASE_RETURNED;
    cln->handler = rl_ctx_cleanup;
    ngx_http_set_ctx(r, ctx, ngx_http_ratelimit_module);

    auto* applied = static_cast<rl_applied_t*>(lcf->applied->elts);
    ngx_uint_t m = 0;
    for (ngx_uint_t i = 0; i < n; i++) {
        ngx_str_t key;
        if (ngx_http_complex_value(r, &applied[i].zone->key, &key) != NGX_OK) return NGX_HTTP_INTERNAL_SERVER_ERROR;
        if (key.len == 0) {  // an empty key is exempt from this zone
            rl_metrics_count(applied[i].zone->metrics, RL_RESULT_EXEMPT);
            continue;
        }

        rl_result_t& res = ctx->results[m++];
        res = rl_result_t{};
        res.applied = &applied[i];
        res.policy = &applied[i].policy;
        if (applied[i].tiered) res.policy = rl_tier_policy(r, applied[i], tier_policies(ctx, n) + (m - 1));
        res.cost = request_cost(r, *applied[i].limit, applied[i].zone);
        res.hash = rl::hash_key(key.data, key.len, rl::kDefaultHashK0, rl::kDefaultHashK1);
        // sync zones decide in shared memory: their Redis work is the engine's (sync.cpp)
        res.store = applied[i].zone->redis && applied[i].zone->sync_mode == RL_SYNC_OFF ? RL_STORE_REDIS : RL_STORE_SHM;
    }
    ctx->nresults = m;
    if (m == 0) {
        ctx->status = RL_STATUS_EXEMPT;
        return NGX_DECLINED;
    }

    return rl_decide(r, ctx, lcf);
}

// Called by redis_request.cpp when the last call of a waiting request has an outcome.
void rl_redis_finished(rl_ctx_t* ctx) noexcept {
    if (ctx->timer.timer_set) {
        ngx_del_timer(&ctx->timer);
    }
    auto* lcf = static_cast<rl_loc_conf_t*>(ngx_http_get_module_loc_conf(ctx->r, ngx_http_ratelimit_module));
    rl_finish(ctx, lcf);
    ctx->phase = RL_PHASE_DECIDED;
    ngx_post_event(&ctx->wake, &ngx_posted_events);
}

// Called by sync.cpp when the lease asks a request waited for have an outcome (or by its timeout).
void rl_lease_finished(rl_ctx_t* ctx) noexcept {
    if (ctx->timer.timer_set) {
        ngx_del_timer(&ctx->timer);
    }
    if (ctx->poll.timer_set) {
        ngx_del_timer(&ctx->poll);
    }
    // Limits still waiting could not ask (their own ask did not go out): the fallback decides
    // them, unless they only looked for another worker's ask (they look again).
    for (ngx_uint_t i = 0; i < ctx->nresults && !ctx->lease_poll; i++) {
        rl_result_t& res = ctx->results[i];
        if (res.sync & RL_SYNC_WAIT) res.sync = static_cast<uint8_t>((res.sync & ~RL_SYNC_WAIT) | RL_SYNC_WAITED | RL_SYNC_FAILED);
    }
    ctx->lease_poll = 0;
    rl_lease_again(ctx);
}

void rl_lease_again(rl_ctx_t* ctx) noexcept {
    ctx->phase = RL_PHASE_LEASED;
    if (!ctx->wake.posted) {
        ngx_post_event(&ctx->wake, &ngx_posted_events);
    }
}
