// The request path of sync zones (zone locked): optimistic zones decide on their view exactly as
// shared-memory zones do and record what they admit as the key's unsent delta; lease zones spend
// the units Redis granted the host, and wait for a grant when they run out.
#include "ngx/sync/engine.h"

#include "core/algo/decide.h"
#include "core/algo/refund.h"
#include "core/algo/settle.h"
#include "core/reconcile/sync_reply.h"

namespace {

// While Redis is away, a lease host enforces its share of the limit: limit / hosts seen.
rl::Policy fallback_policy(const rl::Policy& p, int64_t hosts) {
    if (hosts <= 1) return p;
    rl::Policy f = p;
    f.requests = p.requests / hosts > 0 ? p.requests / hosts : 1;
    f.burst = p.burst / hosts;
    if (rl::finish_policy(f) != nullptr) return p;
    return f;
}

// Where a window algorithm counts an admission: its window, or the view's if that is newer
// (another host's clock ahead of this one's), as decide did.
int64_t delta_time(const rl::Policy& p, int64_t at, const rl::State& view) {
    return rl::is_bucket(p.algo) || view.a <= at ? at : view.a;
}

// Redis failed the last reconciliation, or has not answered one for two intervals (and a
// timeout): decisions are local ones.
bool unavailable(const rl_zone_t* zone) {
    const rl_sync_shm_t* h = zone->sync_shm;
    auto stale = static_cast<ngx_msec_t>(2 * zone->sync_us / 1000) + zone->redis->timeout + 100;
    return h->down || static_cast<ngx_msec_int_t>(ngx_current_msec - h->last_ok) > static_cast<ngx_msec_int_t>(stale);
}

// Lease on a bucket: the host's own bucket of its share (core/reconcile/share.h). A key without a share
// for the current epoch waits for one (one round trip); one whose bucket is empty waits for
// units from the pool, unless the pool was dry this epoch: then it is rejected here, with no
// Redis call. Decided on share_available under this lock; sync_commit takes.
rl::Decision share_decide(rl_result_t& res, rl::Slot* slot, int64_t now, bool down) {
    const rl::Policy& p = res.applied->policy;
    const rl_zone_t* zone = res.applied->zone;
    rl_sync_key_t* k = rl_sync_key(slot);
    const int64_t epoch = rl_sync_epoch_us(zone), guard = rl_sync_guard_us(zone);
    if (k->share.epoch_us != epoch) {
        k->share = rl::HostShare{};
        k->share.epoch_us = epoch;
        k->asks = rl::ShareAsks{};
        k->spent = k->rate = 0;  // arrivals over another interval: its demand is measured afresh
        k->asks.since = now;
    }
    if (!(res.flags & RL_SYNC_WAITED)) {
        k->spent += res.cost;  // its demand: every arrival, once
        rl::warmth_arrival(k->warmth, now, zone->sync_us);
        if (k->used_at == 0 || now - k->used_at >= 2 * epoch) k->asks.since = now;  // a run begins
        k->used_at = now;
        rl_sync_mark(zone->sync_shm, rl::table_ref(zone->table, slot));  // its next share is asked at the round
    }
    rl::share_advance(k->share, p, now, guard);
    int64_t have = rl::share_available(k->share, p);
    rl::Decision d = rl::decide(rl::State{}, p, now, 0);  // the headers' limit and reset
    d.remaining = have;
    if ((res.flags & RL_SYNC_GRANTED) || have >= res.cost) {  // drawn from the pool for it, or in its bucket
        d.allowed = true;
        d.remaining = (res.flags & RL_SYNC_GRANTED) ? have : have - res.cost;
        d.retry_after_us = 0;
        return d;
    }
    if (res.cost > p.capacity()) return rl::decide(rl::State{}, p, now, res.cost);  // never: no wait
    const bool held = rl::share_holds(k->share, rl::window_start(now, epoch));
    if (!held && (down || (res.flags & RL_SYNC_FAILED))) {
        res.flags |= RL_SYNC_LOCAL | RL_SYNC_ERROR;  // no share and no Redis: the local fallback
        rl::Decision f = rl::decide(k->fallback, fallback_policy(p, zone->sync_shm->hosts), now, res.cost);
        f.limit = p.requests;
        return f;
    }
    d.allowed = false;
    if (!(res.flags & (RL_SYNC_WAITED | RL_SYNC_FAILED)) && !down && (!held || rl::share_may_draw(k->asks, epoch, now))) {
        res.flags |= RL_SYNC_WAIT;  // the access handler asks (a share, or units of the pool) and decides again
        d.retry_after_us = 0;
        return d;
    }
    // Over its share: when its bucket next holds the cost (or its epochs end).
    rl::Share e = rl::share_effective(k->share, now, guard);
    int64_t missing = res.cost * p.token - k->share.tokens;
    int64_t per_us = p.refill * e.rate;  // parts of kShareParts of a scaled unit per us
    d.retry_after_us = rl::window_start(now, epoch) + epoch - now;
    if (per_us > 0 && missing <= e.burst * p.token) {
        __int128 wait = static_cast<__int128>(missing) * rl::kShareParts / per_us + 1;
        if (wait < d.retry_after_us) d.retry_after_us = static_cast<int64_t>(wait);
    }
    if (d.retry_after_us <= 0) d.retry_after_us = 1;
    return d;
}

rl::Decision lease_decide(rl_result_t& res, rl::Slot* slot, int64_t now, bool down) {
    const rl::Policy& p = res.applied->policy;
    if (rl_sync_shares(res.applied->zone, p)) return share_decide(res, slot, now, down);
    rl_sync_key_t* k = rl_sync_key(slot);
    if (!(res.flags & RL_SYNC_WAITED)) rl::warmth_arrival(k->warmth, now, res.applied->zone->sync_us);
    int64_t usable = rl::lease_usable(k->lease, p, now);
    if ((res.flags & RL_SYNC_GRANTED) || usable >= res.cost) {  // granted for it, or in the lease
        if (res.flags & RL_SYNC_GRANTED) usable += res.cost;
        rl::Decision d = rl::decide(slot->state, p, now, 0);
        d.allowed = true;
        d.remaining = usable - res.cost;
        d.retry_after_us = 0;
        return d;
    }
    if (res.cost > p.capacity()) return rl::decide(rl::State{}, p, now, res.cost);  // never: no wait
    if (down || (res.flags & RL_SYNC_FAILED)) {
        res.flags |= RL_SYNC_LOCAL | RL_SYNC_ERROR;
        rl::Decision d = rl::decide(k->fallback, fallback_policy(p, res.applied->zone->sync_shm->hosts), now, res.cost);
        d.limit = p.requests;
        return d;
    }
    rl::Decision d = rl::decide(slot->state, p, now, 0);
    d.allowed = false;
    d.remaining = usable;
    // Before retry_at, still asked every few intervals (refresh_due): units may have come back
    // since Redis said it (another host's give-back, the key reset by ratelimit_api's DELETE).
    const rl_zone_t* zone = res.applied->zone;
    if (!(res.flags & RL_SYNC_WAITED2) &&
        (k->retry_at <= now || rl::refresh_due(k->refresh_at, now, zone->sync_us))) {
        res.flags |= RL_SYNC_WAIT;  // the access handler sends an ask and decides again
        d.retry_after_us = 0;
        return d;
    }
    // Redis said lately that no unit fits before retry_at (or it waited twice): rejected,
    // without asking again (a hot key over its limit costs no round trip per request, one per
    // few intervals).
    d.retry_after_us = k->retry_at > now ? k->retry_at - now : p.period_us / p.requests + 1;
    return d;
}

rl::Decision sync_decide(rl_result_t& res, rl::Slot* slot, int64_t now) noexcept {
    const rl_zone_t* zone = res.applied->zone;
    res.flags &= ~(RL_SYNC_ERROR | RL_SYNC_WAIT | RL_SYNC_LOCAL);
    bool down = unavailable(zone);
    if (down) res.flags |= RL_SYNC_ERROR;
    if (zone->sync_mode == RL_SYNC_LEASE) return lease_decide(res, slot, now, down);
    const rl::Policy& p = res.applied->policy;
    rl::Decision d = rl::decide(slot->state, p, now, res.cost);
    // A rejecting view may be one that cannot be true (a reply refused, a debt long paid): the
    // key has no delta to send, so it asks Redis for its state, every few intervals at most.
    rl_sync_key_t* k = rl_sync_key(slot);
    if (!d.allowed && res.cost <= p.capacity() && rl::refresh_due(k->refresh_at, now, zone->sync_us)) {
        k->refresh = 1;
        rl_sync_mark(zone->sync_shm, rl::table_ref(zone->table, slot));
    }
    return d;
}

void sync_commit(rl_result_t& res, rl::Slot* slot) noexcept {
    rl_zone_t* zone = res.applied->zone;
    const rl::Policy& p = res.applied->policy;
    rl_sync_key_t* k = rl_sync_key(slot);
    if (res.cost <= 0) return;
    k->burst = p.burst;
    if (zone->sync_mode == RL_SYNC_LEASE && !(res.flags & RL_SYNC_LOCAL) && rl_sync_shares(zone, p)) {
        // Decided on share_available under this lock; units drawn for this very request were
        // admitted by Redis when it granted them.
        if (!(res.flags & RL_SYNC_GRANTED)) rl::share_take(k->share, p, res.at, rl_sync_guard_us(zone), res.cost);
        res.flags &= ~RL_SYNC_GRANTED;
        k->used_at = res.at;
    } else if (zone->sync_mode == RL_SYNC_LEASE && !(res.flags & RL_SYNC_LOCAL)) {
        // Decided on lease_usable under this lock; units granted for this very request were
        // consumed when Redis granted them.
        if (!(res.flags & RL_SYNC_GRANTED)) rl::lease_take(k->lease, p, res.at, res.cost);
        res.flags &= ~RL_SYNC_GRANTED;
        k->spent += res.cost;
        k->used_at = res.at;
        // Less left than half an interval's use: more is asked for before it runs out (a cold
        // key's requests are asked for one by one).
        int64_t use = k->rate > k->spent ? k->rate : k->spent;
        if (res.decision.remaining * 2 < use && rl_sync_asks_ahead(zone, k, res.at)) {
            rl_sync_ask_ahead(zone, slot, &p, res.at);
        }
    } else {
        // optimistic, or lease while Redis is away: Redis adds it at the next sync
        rl::State& s = (res.flags & RL_SYNC_LOCAL) ? k->fallback : slot->state;
        s = res.decision.next;
        rl::delta_add(k->unsent, p, delta_time(p, res.at, s), res.cost);
    }
    rl_sync_mark(zone->sync_shm, rl::table_ref(zone->table, slot));
    rl_sync_exit_wake(zone);
}

void sync_refund(rl_result_t& res, rl::Slot* slot, int64_t now) noexcept {
    const rl::Policy& p = res.applied->policy;
    rl_sync_key_t* k = rl_sync_key(slot);
    if (res.applied->zone->sync_mode == RL_SYNC_LEASE && !(res.flags & RL_SYNC_LOCAL) &&
        rl_sync_shares(res.applied->zone, p)) {
        // Not put back in its bucket (a unit appearing there later than it was taken could go
        // beyond what one limiter allows): it errs on the side of limiting.
        res.decision = rl::decide(rl::State{}, p, now, 0);
        res.decision.remaining = rl::share_available(k->share, p);
        return;
    }
    if (res.applied->zone->sync_mode == RL_SYNC_LEASE && !(res.flags & RL_SYNC_LOCAL)) {
        k->lease.units += res.cost;  // back on top of the lease: usable as far as it still holds
        k->spent = k->spent > res.cost ? k->spent - res.cost : 0;
        res.decision = rl::decide(slot->state, p, now, 0);
        res.decision.remaining = rl::lease_usable(k->lease, p, now);
        return;
    }
    // Taken back from the unsent delta too (a delta already sent stays counted in Redis: it
    // errs on the side of limiting).
    rl::State& s = (res.flags & RL_SYNC_LOCAL) ? k->fallback : slot->state;
    rl::delta_add(k->unsent, p, delta_time(p, res.at, s), -res.cost);
    rl::refund(s, nullptr, p, now, res.at, res.cost);
    res.decision = rl::decide(s, p, now, 0);
}

// A settle's charge: the view (or the fallback) goes into debt as in shared memory and Redis
// gets it with the key's delta; a lease pays from its units first and owes Redis the rest.
void sync_settle(rl_result_t& res, rl::Slot* slot, int64_t now) noexcept {
    rl_zone_t* zone = res.applied->zone;
    const rl::Policy& p = res.applied->policy;
    rl_sync_key_t* k = rl_sync_key(slot);
    // A lease owes Redis what its units do not pay: never more than the debt allows (one
    // capacity past the limit), as a charge in shared memory.
    int64_t owed_max = res.applied->debt.capacity() - p.capacity();
    int64_t units = res.delta;
    if (zone->sync_mode == RL_SYNC_LEASE && !(res.flags & RL_SYNC_LOCAL) && rl_sync_shares(zone, p)) {
        int64_t guard = rl_sync_guard_us(zone);
        rl::share_advance(k->share, p, now, guard);
        int64_t have = rl::share_available(k->share, p);
        int64_t take = have < units ? have : units;
        if (take > 0 && rl::share_take(k->share, p, now, guard, take)) {
            units -= take;
            k->spent += take;
        }
        if (units > owed_max) units = owed_max;
        if (units > 0) rl::delta_add(k->unsent, p, now, units);
    } else if (zone->sync_mode == RL_SYNC_LEASE && !(res.flags & RL_SYNC_LOCAL)) {
        int64_t usable = rl::lease_usable(k->lease, p, now);
        int64_t take = usable < units ? usable : units;
        if (take > 0 && rl::lease_take(k->lease, p, now, take)) {
            units -= take;
            k->spent += take;
        }
        if (units > owed_max) units = owed_max;
        if (units > 0) rl::delta_add(k->unsent, p, now, units);
    } else {
        rl::State& s = (res.flags & RL_SYNC_LOCAL) ? k->fallback : slot->state;
        units = rl::charge(s, nullptr, p, res.applied->debt, now, units);
        rl::delta_add(k->unsent, p, delta_time(p, now, s), units);
    }
    rl_sync_mark(zone->sync_shm, rl::table_ref(zone->table, slot));
    rl_sync_exit_wake(zone);
}

int64_t sync_clock(const rl_zone_t* zone, int64_t local_now) { return rl_sync_now(zone, local_now); }

}  // namespace

namespace {

// What both sync stores do in the shared-memory pass.
constexpr rl_store_t sync_store(const char* name, rl_store_id_e id) {
    rl_store_t s{};
    s.name = name;
    s.id = id;
    s.key_bytes = sizeof(rl_sync_key_t);
    s.area_bytes = rl_sync_area_bytes;
    s.area_format = rl_sync_area_format;
    s.area_compatible = rl_sync_area_compatible;
    s.clock = sync_clock;
    s.decide = sync_decide;
    s.commit = sync_commit;
    s.release = rl_sync_release;
    s.refund = sync_refund;
    s.settle = sync_settle;
    return s;
}

// A lease's requests also wait for grants.
constexpr rl_store_t lease_store() {
    rl_store_t s = sync_store("sync lease", RL_STORE_ID_SYNC_LEASE);
    s.refill = rl_sync_lease_refill;
    s.timed_out = rl_sync_lease_timed_out;
    s.end = rl_sync_lease_end;
    return s;
}

}  // namespace

const rl_store_t rl_sync_optimistic_store = sync_store("sync optimistic", RL_STORE_ID_SYNC_OPTIMISTIC);
const rl_store_t rl_sync_lease_store = lease_store();

void rl_sync_release(rl_result_t& res, rl::Slot* slot) noexcept {
    if (!(res.flags & RL_SYNC_GRANTED)) return;
    // Shares: units drawn for a request that goes away are dropped (Redis admitted them).
    if (!rl_sync_shares(res.applied->zone, res.applied->policy)) {
        rl_sync_key(slot)->lease.units += res.cost;  // usable as far as the lease still holds
    }
    res.flags &= ~RL_SYNC_GRANTED;
}
