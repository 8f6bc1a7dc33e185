// A context: made once per thing being limited, held by a pool cleanup so that every store's
// wait ends when it goes away; a result per applied limit whose key is not empty.
#include "ngx/engine/ctx.h"

#include "ngx/engine/deadline.h"
#include "ngx/engine/decide.h"
#include "ngx/engine/stores.h"
#include "ngx/limits/tier.h"
#include "ngx/metrics/metrics.h"

#include "core/algo/calendar.h"
#include "core/algo/settle.h"
#include "core/text/rate.h"

void rl_ctx_cleanup(void* data) noexcept {
    auto* ctx = static_cast<rl_ctx_t*>(data);
    if (ctx->phase == RL_PHASE_DELAYED) {
        // It ends while delayed (the client closed the connection): what its limits consumed
        // goes back (limit_req keeps it).
        ctx->phase = RL_PHASE_RETURNED;
        rl_store_give_back(ctx);
    }
    rl_deadline_drop(ctx);
    if (ctx->wake.posted) {
        ngx_delete_posted_event(&ctx->wake);
    }
    rl_store_end(ctx);
}

namespace {

// The cost of a `ratelimit` line here (quantity=N or quantity=$variable).
int64_t cost_of(rl_ctx_t* ctx, const rl_limit_t& limit, rl_zone_t* zone) {
    if (limit.quantity_cv == nullptr) return limit.quantity;
    ngx_str_t value;
    if (!ctx->fe->evaluate(ctx, limit.quantity_cv, &value) || value.len == 0) return 1;
    // A number too large for any limit is rejected by the algorithm (kNever), as is one
    // above this limit's capacity; only what is not a number at all counts 1.
    int64_t cost = rl::parse_cost(rl_sv(value));
    if (cost >= 0) return cost;
    rl_warn_value(ctx->log, zone, &zone->quantity_warned, "quantity", value, "counted as 1");
    return 1;
}

// A calendar zone's result (period=day...): its policy's window made the one holding now
// (nginx's cached clock; a store's clock a little past a boundary moves to the next window:
// rl::calendar_shift), computed again only when now has left it.
void calendar_window(const rl_result_t& res) {
    const rl::Policy* p = res.policy;
    if (p->calendar == rl::Calendar::none) return;
    ngx_time_t* tp = ngx_timeofday();
    int64_t now = static_cast<int64_t>(tp->sec) * 1000000 + static_cast<int64_t>(tp->msec) * 1000;
    if (now >= p->win.start && now < p->win.end) return;
    // The applied policy (a calendar one is never a tier's): this worker's, in its
    // configuration's memory; computed again only when now leaves its window.
    rl::calendar_window(p->calendar, res.applied->zone->tz, now, const_cast<rl::Policy*>(p)->win);
}

// Where a result is decided first: in its zone's table, or away from it (Redis).
rl_store_e first_store(const rl_result_t& res) {
    return res.applied->zone->store->decide ? RL_STORE_SHM : RL_STORE_REDIS;
}

rl_ctx_t* new_ctx(ngx_pool_t* pool, const rl_scope_t* scope, size_t front_bytes) {
    // One allocation, the pool cleanup's own data, holds the context, the front end's part, the
    // results, the locking scratch, a result list and, where tiers apply, each one's own policies.
    ngx_uint_t n = scope->applied->nelts;
    front_bytes = (front_bytes + alignof(rl_result_t) - 1) & ~(alignof(rl_result_t) - 1);
    size_t bytes = sizeof(rl_ctx_t) + front_bytes + n * (sizeof(rl_result_t) + 3 * sizeof(void*));
    if (scope->tiered) bytes += n * sizeof(rl::Policy);
    ngx_pool_cleanup_t* cln = ngx_pool_cleanup_add(pool, bytes);
    if (cln == nullptr) return nullptr;
    auto* ctx = static_cast<rl_ctx_t*>(cln->data);
    *ctx = rl_ctx_t{};
    ctx->results = reinterpret_cast<rl_result_t*>(reinterpret_cast<u_char*>(ctx + 1) + front_bytes);
    cln->handler = rl_ctx_cleanup;
    return ctx;
}

}  // namespace

rl_ctx_t* rl_ctx_create(ngx_pool_t* pool, ngx_log_t* log, const rl_scope_t* scope, const rl_frontend_t* fe,
                        void* subject, size_t front_bytes) noexcept {
    rl_ctx_t* ctx = new_ctx(pool, scope, front_bytes);
    if (ctx == nullptr) return nullptr;
    ctx->napplied = scope->applied->nelts;
    ctx->stores = scope->stores;
    ctx->slots = scope->slots;
    ctx->scope = scope;
    ctx->decider = -1;
    ctx->delayer = -1;
    ctx->phase = RL_PHASE_RETURNED;
    ctx->fe = fe;
    ctx->subject = subject;
    ctx->pool = pool;
    ctx->log = log;
    rl_engine_prepare(ctx);
    // One result per applied limit whose key is not empty (an empty key is exempt from its zone).
    auto* applied = static_cast<rl_applied_t*>(scope->applied->elts);
    ngx_uint_t m = 0;
    for (ngx_uint_t i = 0; i < scope->applied->nelts; i++) {
        ngx_str_t key;
        if (!fe->evaluate(ctx, applied[i].zone->key, &key)) return nullptr;
        if (key.len == 0) {
            rl_metrics_count(applied[i].zone->metrics, RL_RESULT_EXEMPT);
            continue;
        }
        rl_result_t& res = ctx->results[m++];
        res = rl_result_t{};
        res.applied = &applied[i];
        res.policy = &applied[i].policy;
        if (applied[i].tiered) res.policy = rl_tier_policy(ctx, applied[i], rl_ctx_policies(ctx) + (m - 1));
        calendar_window(res);
        res.cost = cost_of(ctx, *applied[i].limit, applied[i].zone);
        if (res.cost == 0 && applied[i].limit->settle_set) {
            // settle= charges what the request used: it needs room for one unit meanwhile. A
            // lease takes the unit (its asks count what requests take) and settles it back.
            res.cost = applied[i].zone->sync_mode == RL_SYNC_LEASE ? 1 : rl::kNeedOne;
        }
        res.hash = rl::hash_key(key.data, key.len, rl::kDefaultHashK0, rl::kDefaultHashK1);
        res.key = key;
        res.store = first_store(res);
    }
    ctx->nresults = m;
    return ctx;
}

void rl_ctx_renew(rl_ctx_t* ctx) noexcept {
    for (ngx_uint_t i = 0; i < ctx->nresults; i++) {
        rl_result_t& res = ctx->results[i];
        res.decision = rl::Decision{};
        res.at = 0;
        res.consumed = false;
        res.delta = 0;
        res.flags = 0;
        calendar_window(res);
        res.store = first_store(res);
    }
    ctx->status = RL_STATUS_NONE;
    ctx->decider = -1;
    ctx->retry_after_us = 0;
    ctx->rejected = ctx->denied = ctx->admitted = false;
    ctx->delay_ms = 0;
    ctx->delayer = -1;
    ctx->phase = RL_PHASE_RETURNED;
}
