// The request path of sync zones (zone locked): optimistic zones decide on their view exactly as
// shared-memory zones do and record what they admit as the key's unsent delta; lease zones spend
// the units Redis granted the host, and wait for a grant when they run out.
#include "sync.h"

#include "core/refund.h"

namespace {

// A window's start: windows are aligned to multiples of the period on the zone's clock.
int64_t window_of(int64_t at, int64_t period) {
    int64_t r = at % period;
    if (r < 0) r += period;
    return at - r;
}

// Takes back an admission of `cost` at `at` from the unsent delta, as far as it is still there
// (a delta already sent stays counted in Redis: it errs on the side of limiting).
void delta_take_back(rl::Delta& d, const rl::Policy& p, int64_t at, int64_t cost) {
    int64_t* units = &d.units;
    if (!rl::is_bucket(p.algo)) {
        int64_t w = window_of(at, p.period_us);
        if (w == d.at - p.period_us) {
            units = &d.prev;
        } else if (w != d.at) {
            return;
        }
    }
    *units = *units > cost ? *units - cost : 0;
}

// While Redis is away, a lease host enforces its share of the limit: limit / hosts seen.
rl::Policy fallback_policy(const rl::Policy& p, int64_t hosts) {
    if (hosts <= 1) return p;
    rl::Policy f = p;
    f.requests = p.requests / hosts > 0 ? p.requests / hosts : 1;
    f.burst = p.burst / hosts;
    if (rl::finish_policy(f) != nullptr) return p;
    return f;
}

rl::Decision lease_decide(rl_result_t& res, rl::Slot* slot, int64_t now, const rl_sync_shm_t* h) {
    const rl::Policy& p = res.applied->policy;
    rl_sync_key_t* k = rl_sync_key(slot);
    if (k->budget >= res.cost) {
        rl::Decision d = rl::decide(slot->state, p, now, 0);
        d.allowed = true;
        d.remaining = k->budget - res.cost;
        d.retry_after_us = 0;
        return d;
    }
    if (res.cost > p.capacity()) return rl::decide(rl::State{}, p, now, res.cost);  // never: no wait
    if (h->down || (res.sync & RL_SYNC_FAILED)) {
        res.sync |= RL_SYNC_LOCAL | RL_SYNC_ERROR;
        rl::Decision d = rl::decide(k->fallback, fallback_policy(p, h->hosts), now, res.cost);
        d.limit = p.requests;
        return d;
    }
    rl::Decision d = rl::decide(slot->state, p, now, 0);
    d.allowed = false;
    d.remaining = k->budget;
    if (!(res.sync & RL_SYNC_WAITED)) {
        res.sync |= RL_SYNC_WAIT;  // the access handler sends an ask and decides again
        d.retry_after_us = 0;
        return d;
    }
    // It waited once: Redis granted less than it needs; Redis said when it would fit.
    d.retry_after_us = k->retry_at > now ? k->retry_at - now : p.period_us / p.requests + 1;
    return d;
}

}  // namespace

rl::Decision rl_sync_decide(rl_result_t& res, rl::Slot* slot, int64_t now) noexcept {
    const rl_zone_t* zone = res.applied->zone;
    const rl_sync_shm_t* h = zone->sync_shm;
    res.sync &= ~(RL_SYNC_ERROR | RL_SYNC_WAIT | RL_SYNC_LOCAL);
    if (h->down) res.sync |= RL_SYNC_ERROR;
    if (zone->sync_mode == RL_SYNC_LEASE) return lease_decide(res, slot, now, h);
    return rl::decide(slot->state, res.applied->policy, now, res.cost);
}

void rl_sync_commit(rl_result_t& res, rl::Slot* slot) noexcept {
    rl_zone_t* zone = res.applied->zone;
    const rl::Policy& p = res.applied->policy;
    rl_sync_key_t* k = rl_sync_key(slot);
    if (res.cost <= 0) return;
    k->burst = p.burst;
    if (zone->sync_mode == RL_SYNC_LEASE && !(res.sync & RL_SYNC_LOCAL)) {
        k->budget -= res.cost;
        k->spent += res.cost;
        k->used_at = res.at;
    } else {
        // optimistic, or lease while Redis is away: Redis adds it at the next sync
        if (res.sync & RL_SYNC_LOCAL) {
            k->fallback = res.decision.next;
        } else {
            slot->state = res.decision.next;
        }
        rl::delta_add(k->unsent, p, res.at, res.cost);
    }
    rl_sync_mark(zone->sync_shm, rl::table_ref(zone->table, slot));
}

void rl_sync_refund(rl_result_t& res, rl::Slot* slot, int64_t now) noexcept {
    const rl::Policy& p = res.applied->policy;
    rl_sync_key_t* k = rl_sync_key(slot);
    if (res.applied->zone->sync_mode == RL_SYNC_LEASE && !(res.sync & RL_SYNC_LOCAL)) {
        k->budget += res.cost;
        k->spent = k->spent > res.cost ? k->spent - res.cost : 0;
        res.decision = rl::decide(slot->state, p, now, 0);
        res.decision.remaining = k->budget;
        return;
    }
    rl::State& s = (res.sync & RL_SYNC_LOCAL) ? k->fallback : slot->state;
    rl::refund(s, nullptr, p, now, res.at, res.cost);
    delta_take_back(k->unsent, p, res.at, res.cost);
    res.decision = rl::decide(s, p, now, 0);
}

bool rl_sync_add_policy(rl_zone_t* zone, const rl::Policy& p) noexcept {
    auto* have = static_cast<rl::Policy*>(zone->sync_policies->elts);
    for (ngx_uint_t i = 0; i < zone->sync_policies->nelts; i++) {
        if (have[i].algo == p.algo && have[i].burst == p.burst) return true;
    }
    auto* slot = static_cast<rl::Policy*>(ngx_array_push(zone->sync_policies));
    if (slot == nullptr) return false;
    *slot = p;
    return true;
}
