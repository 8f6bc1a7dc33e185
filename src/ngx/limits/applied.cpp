// At merge: a level's settings inherited, and its `ratelimit` lines turned into applied limits,
// each zone's policy under the level's algorithm and the line's burst, checked and finished once.
#include "ngx/limits/limit.h"

#include "ngx/limits/tier.h"

#include "core/algo/delay.h"
#include "core/algo/settle.h"

namespace {

bool same_policy(const rl::Policy& q, const rl::Policy& p) {
    return q.algo == p.algo && q.requests == p.requests && q.period_us == p.period_us && q.burst == p.burst &&
           q.delay == p.delay && q.max_delay_us == p.max_delay_us && q.block_us == p.block_us;
}

// Pushes `p` onto `list` (of rl::Policy) unless `same` finds it there.
template <typename Same>
bool push_once(ngx_array_t* list, const rl::Policy& p, Same same) {
    auto* have = static_cast<rl::Policy*>(list->elts);
    for (ngx_uint_t i = 0; i < list->nelts; i++) {
        if (same(have[i], p)) return true;
    }
    auto* slot = static_cast<rl::Policy*>(ngx_array_push(list));
    if (slot == nullptr) return false;
    *slot = p;
    return true;
}

// A policy the zone is applied with, noted once: for a sync zone each algorithm and burst (its
// engine finds a key's policy by them), and each distinct one (the API shows them).
bool note_policy(ngx_conf_t* cf, rl_zone_t* zone, const rl::Policy& p) {
    if (zone->sync_policies != nullptr &&
        !push_once(zone->sync_policies, p,
                   [](const rl::Policy& q, const rl::Policy& n) { return q.algo == n.algo && q.burst == n.burst; })) {
        return false;
    }
    if (zone->policies == nullptr) {
        zone->policies = ngx_array_create(cf->pool, 2, sizeof(rl::Policy));
        if (zone->policies == nullptr) return false;
    }
    return push_once(zone->policies, p, same_policy);
}

// The policy of line `l` at a level whose algorithm is `algo`: checked (errors at the line).
bool line_policy(ngx_conf_t* cf, const rl_limit_t& l, rl_zone_t* zone, ngx_uint_t algo, rl::Policy* out) {
    if (zone->concurrency && (l.burst_set || l.quantity_set || l.delay != rl::kNoDelay || l.nodelay || l.settle_set)) {
        // A request takes one slot while it runs, and nothing refills a slot but its end.
        rl_conf_error_at(cf, "ratelimit", l.file, l.line, "\"%s\" has no meaning for the concurrency zone \"%V\"",
                         l.burst_set ? "burst" : l.quantity_set ? "quantity" : l.nodelay ? "nodelay"
                         : l.settle_set ? "settle" : "delay",
                         &zone->name);
        return false;
    }
    if (l.block_us > 0 && !rl_zone_check_block(cf, zone, &l)) return false;
    rl::Policy p = zone->policy;
    if (l.block_us > 0) p.block_us = l.block_us;
    if (!zone->algo_set) p.algo = static_cast<rl::Algo>(algo);
    if (l.burst_set) p.burst = l.burst;
    if (!rl::is_bucket(p.algo) && (l.burst_set || zone->burst_set)) {
        rl_conf_error_at(cf, "ratelimit", l.file, l.line, "\"burst\" is not supported by the \"%s\" algorithm (zone \"%V\")",
                         rl::algo_name(p.algo).data(), &zone->name);
        return false;
    }
    p.delay = l.delay;
    p.max_delay_us = l.max_delay_us;
    if (!rl::is_bucket(p.algo) && l.delay != rl::kNoDelay) {
        rl_conf_error_at(cf, "ratelimit", l.file, l.line, "\"delay\" is not supported by the \"%s\" algorithm (zone \"%V\")",
                         rl::algo_name(p.algo).data(), &zone->name);
        return false;
    }
    if (const char* why = rl::finish_policy(p)) {
        rl_conf_error_at(cf, "ratelimit", l.file, l.line, "%s in ratelimit zone \"%V\"", why, &zone->name);
        return false;
    }
    *out = p;
    return true;
}

bool build_applied(ngx_conf_t* cf, rl_scope_t* conf) {
    conf->applied = nullptr;
    conf->tiered = false;
    conf->stores = 0;
    conf->slots = false;
    if (conf->limits == nullptr) return true;
    ngx_uint_t n = 0;
    auto* lines = static_cast<rl_limit_t*>(conf->limits->elts);
    for (ngx_uint_t i = 0; i < conf->limits->nelts; i++) n += lines[i].at == conf->at;
    if (n == 0) return true;
    conf->applied = ngx_array_create(cf->pool, n, sizeof(rl_applied_t));
    if (conf->applied == nullptr) return false;
    auto* limits = static_cast<rl_limit_t*>(conf->limits->elts);
    for (ngx_uint_t i = 0; i < conf->limits->nelts; i++) {
        rl_limit_t& l = limits[i];
        if (l.at != conf->at) continue;  // another stage's
        auto* zone = static_cast<rl_zone_t*>(l.shm_zone->data);
        if (zone == nullptr) {
            rl_conf_error_at(cf, "ratelimit", l.file, l.line, "unknown ratelimit zone \"%V\"", &l.shm_zone->shm.name);
            return false;
        }
        rl::Policy p;
        if (!line_policy(cf, l, zone, conf->algo, &p)) return false;
        auto* a = static_cast<rl_applied_t*>(ngx_array_push(conf->applied));
        if (a == nullptr) return false;
        a->zone = zone;
        a->limit = &l;
        a->policy = p;
        if (l.settle_set) a->debt = rl::debt_policy(p);
        rl_tier_check_applied(a);
        conf->tiered = conf->tiered || a->tiered;
        conf->stores |= ngx_uint_t{1} << zone->store_id;
        conf->slots = conf->slots || zone->local_id == RL_STORE_ID_CONC;  // a Redis one's too: on_error local
        if (p.algo == rl::Algo::log && !rl_zone_check_log(cf, zone, p, &l)) return false;
        if (!note_policy(cf, zone, p)) return false;
    }
    return true;
}

}  // namespace

bool rl_scope_merge(ngx_conf_t* cf, rl_scope_t* conf, const rl_scope_t* prev) noexcept {
    ngx_conf_merge_ptr_value(conf->limits, prev->limits, nullptr);
    ngx_conf_merge_uint_value(conf->algo, prev->algo, static_cast<ngx_uint_t>(rl::Algo::gcra));
    ngx_conf_merge_value(conf->dry_run, prev->dry_run, 0);
    ngx_conf_merge_uint_value(conf->log_level, prev->log_level, NGX_LOG_ERR);
    ngx_conf_merge_uint_value(conf->on_error, prev->on_error, static_cast<ngx_uint_t>(RL_ON_ERROR_ALLOW));
    return build_applied(cf, conf);
}
