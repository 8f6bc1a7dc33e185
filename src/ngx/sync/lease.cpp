// A lease zone's asks: the requests whose budget is empty wait (without blocking) for one ask,
// sent at the end of the loop turn for all of them and for the keys running low; the reply
// (batch.cpp) grows the keys' leases, and the requests decide again.
#include "ngx/sync/engine.h"

namespace {

constexpr size_t kAheadMax = 256;           // background asks queued in one loop turn at most
constexpr ngx_msec_t kPollMs = 2;           // a request beside another worker's ask looks again after

}  // namespace

// What the store keeps for a request that waits for asks (ctx->store_data[RL_STORE_ID_SYNC_LEASE]).
struct rl_lease_wait_t {
    ngx_queue_t link;   // in the requests to ask for at the end of this loop turn
    rl_ctx_t* ctx;
    ngx_uint_t waits;   // asks it waits for
    ngx_event_t poll;   // beside another worker's ask, it looks again
    bool polling;
};

namespace {

ngx_queue_t g_waiting;   // requests to ask grants for at the end of this loop turn
ngx_queue_t g_asks;      // lease asks in flight
ngx_event_t g_ask;       // posted: sends them

// Lease keys whose budget runs low, to ask for in the background at the end of the loop turn.
struct rl_ahead_t {
    rl_sync_zone_t* zs;
    rl::KeyHash hash;
    uint8_t algo;
    const rl::Policy* policy;
};
rl_ahead_t g_ahead[kAheadMax];
size_t g_nahead;

rl_lease_wait_t* wait_of(rl_ctx_t* ctx) { return static_cast<rl_lease_wait_t*>(ctx->store_data[RL_STORE_ID_SYNC_LEASE]); }

// The results still waiting could not ask (their own ask did not go out): the fallback
// decides them when the request decides again.
void fall_back(rl_ctx_t* ctx) {
    for (ngx_uint_t i = 0; i < ctx->nresults; i++) {
        rl_result_t& res = ctx->results[i];
        if (res.flags & RL_SYNC_WAIT) {
            res.flags = static_cast<uint8_t>((res.flags & ~RL_SYNC_WAIT) | RL_SYNC_WAITED | RL_SYNC_FAILED);
        }
    }
}

// The asks the request waited for have an outcome: it decides again, on what came, unless it
// only looked for another worker's ask (it looks again, within its deadline).
void finished(rl_lease_wait_t* w) {
    if (w->poll.timer_set) {
        ngx_del_timer(&w->poll);
    }
    if (!w->polling) fall_back(w->ctx);
    w->polling = false;
    w->ctx->resume(w->ctx, true);
}

void wake_waiters(rl_sync_batch_t* b) {
    for (size_t k = 0; k < b->waiters.n; k++) {
        rl_lease_wait_t* w = b->waiters.elts[k];
        if (w == nullptr) continue;
        rl_ctx_t* ctx = w->ctx;
        for (ngx_uint_t i = 0; i < ctx->nresults; i++) {
            rl_result_t& res = ctx->results[i];
            if (res.applied->zone->sync != b->zs || !(res.flags & RL_SYNC_WAIT)) continue;
            int waited = (res.flags & RL_SYNC_WAITED) ? RL_SYNC_WAITED2 : RL_SYNC_WAITED;
            rl_sync_item_t* it = rl_sync_item_find(b, res.hash, static_cast<uint8_t>(res.applied->policy.algo));
            int granted = 0;
            if (it != nullptr && it->need_granted && (res.flags & RL_SYNC_NEEDED) && it->got >= res.cost) {
                granted = RL_SYNC_GRANTED;  // in the order they asked, while Redis's units last
                it->got -= res.cost;
            }
            res.flags = static_cast<uint8_t>((res.flags & ~(RL_SYNC_WAIT | RL_SYNC_NEEDED)) | waited | granted |
                                             (b->failed ? RL_SYNC_FAILED : 0));
        }
        if (w->waits > 0 && --w->waits == 0) finished(w);
    }
}

// A waiter that stopped waiting: the grant is not for it. Its cost leaves the ask's need (the
// command is sent: only what the reply takes for the waiters changes), or, answered already,
// goes back to the lease.
void unneed(rl_sync_batch_t* b, rl_ctx_t* ctx) {
    rl_zone_t* zone = b->zs->zone;
    ngx_shmtx_lock(&zone->shpool->mutex);
    for (ngx_uint_t i = 0; i < ctx->nresults; i++) {
        rl_result_t& res = ctx->results[i];
        if (res.applied->zone->sync != b->zs || !(res.flags & RL_SYNC_NEEDED)) continue;
        res.flags &= ~RL_SYNC_NEEDED;
        rl_sync_item_t* it = rl_sync_item_find(b, res.hash, static_cast<uint8_t>(res.applied->policy.algo));
        if (it == nullptr || it->si.need < res.cost) continue;
        if (!it->need_granted) {
            // Sent already: a share's reply is checked against the need it was sent with (Redis
            // may admit all of it and move a burst's units: more than a smaller need allows).
            // The units of a request gone are dropped there (it limits more, never less).
            if (!rl_sync_shares(zone, *it->si.policy)) it->si.need -= res.cost;
        } else if (rl::Slot* slot = rl_sync_item_slot(zone, *it)) {
            if (!rl_sync_shares(zone, *it->si.policy)) rl_sync_key(slot)->lease.units += res.cost;  // as rl_sync_release
        }
    }
    ngx_shmtx_unlock(&zone->shpool->mutex);
}

// A lease ask for one key (zone locked): two intervals at its recent rate (the last round's or
// this one's so far; `need` is added by the caller), and what it admitted while Redis was away.
// A cold key's requests (`waiting`, core/reconcile/sync.h warmth_hot) holding no share are asked
// for exactly what they cost (`need`, a count ask: no share even where buckets share), as a
// per-request check: nothing is left to give back.
rl_sync_item_t* ask_item(rl_sync_batch_t* b, rl::Slot* slot, const rl::Policy* policy, int64_t now, bool waiting) {
    rl_sync_key_t* k = rl_sync_key(slot);
    rl_sync_item_t* it = rl_sync_item_push(b, slot, policy);
    if (it == nullptr) return nullptr;
    k->burst = policy->burst;
    k->asked_at = now;
    rl_zone_t* zone = b->zs->zone;
    const bool cold = waiting && !rl::warmth_hot(k->warmth, now, zone->sync_us);
    const bool shares = rl_sync_shares(zone, *policy);
    if (cold && (!shares || !rl::share_holds(k->share, rl::window_start(now, rl_sync_epoch_us(zone))))) {
        it->si.want = 0;  // the caller adds the need
        it->si.delta = k->unsent;
        k->unsent = rl::Delta{};
        return it;
    }
    if (shares) {
        // A share for the current epoch if it holds none, else units of the pool (`need`, added
        // by the caller); what it admitted while Redis was away goes with it.
        const int64_t epoch = rl_sync_epoch_us(zone);
        bool held = rl::share_holds(k->share, rl::window_start(now, epoch));
        it->si.share = held ? rl::share_draw_ask(epoch) : rl::share_cold_ask(*policy, epoch, it->si.hosts, now);
        if (!held) k->asks.asked_more = rl::window_start(now, epoch);
        it->si.want = rl::share_units_wanted(it->si.share);  // a new share's bucket starts with units of the pool
        it->si.delta = k->unsent;
        k->unsent = rl::Delta{};
        return it;
    }
    int64_t want = 2 * (k->rate > k->spent ? k->rate : k->spent) - rl::lease_usable(k->lease, *policy, now);
    it->si.want = want > 1 ? want : 1;
    it->si.delta = k->unsent;
    k->unsent = rl::Delta{};
    return it;
}

// The asks of one zone for the requests waiting now (one item per key, their costs added) and
// for the keys running low.
rl_sync_batch_t* lease_batch(rl_sync_zone_t* zs) {
    rl_sync_batch_t* b = nullptr;
    rl_zone_t* zone = zs->zone;
    ngx_shmtx_lock(&zone->shpool->mutex);
    int64_t now = rl_sync_now(zone, rl_sync_local_us());
    // The keys running low first: a request waiting on one of them rides its ask.
    for (size_t i = 0; i < g_nahead; i++) {
        const rl_ahead_t& a = g_ahead[i];
        if (a.zs != zs || rl_sync_item_find(b, a.hash, a.algo) != nullptr) continue;
        if (b == nullptr && (b = rl_sync_batch_new(zs, true)) == nullptr) break;
        ask_item(b, rl::table_acquire(zone->table, a.hash, a.algo, nullptr), a.policy, now, false);
    }
    for (ngx_queue_t* q = ngx_queue_head(&g_waiting); q != ngx_queue_sentinel(&g_waiting); q = ngx_queue_next(q)) {
        rl_lease_wait_t* w = ngx_queue_data(q, rl_lease_wait_t, link);
        rl_ctx_t* ctx = w->ctx;
        for (ngx_uint_t i = 0; i < ctx->nresults; i++) {
            rl_result_t& res = ctx->results[i];
            if (res.applied->zone != zone || !(res.flags & RL_SYNC_WAIT)) continue;
            auto algo = static_cast<uint8_t>(res.applied->policy.algo);
            rl_sync_item_t* it = rl_sync_item_find(b, res.hash, algo);
            if (it == nullptr) {
                // One ask at a time per key and host: grants answered out of order would stack
                // lower than they are (and be hard to give back). Beside another worker's ask,
                // the request looks again shortly.
                rl::Slot* slot = rl::table_acquire(zone->table, res.hash, algo, nullptr);
                rl_sync_key_t* k = rl_sync_key(slot);
                if (k->asked_at != 0 && now - k->asked_at < kRlStaleAsk) {
                    w->polling = true;
                    continue;
                }
                if (b == nullptr && (b = rl_sync_batch_new(zs, true)) == nullptr) break;
                if ((it = ask_item(b, slot, &res.applied->policy, now, true)) == nullptr) continue;
            }
            rl_lease_wait_t** slot = b->waiters.push(rl_sync_log);
            if (slot == nullptr) continue;  // out of memory: that request falls back
            *slot = w;
            w->waits++;
            // A need beyond the capacity never fits: the requests beyond it spend what the lease
            // gets (or wait again).
            if (it->si.need + res.cost <= res.applied->policy.capacity()) {
                it->si.need += res.cost;
                res.flags |= RL_SYNC_NEEDED;
            }
            if (it->si.want < it->si.need) it->si.want = it->si.need;
        }
    }
    ngx_shmtx_unlock(&zone->shpool->mutex);
    return b;
}

// A request that found another worker's ask in flight looks again (its deadline still runs).
void on_poll(ngx_event_t* ev) noexcept {
    auto* w = static_cast<rl_lease_wait_t*>(ev->data);
    w->polling = false;
    w->ctx->resume(w->ctx, false);
}

// The end of a loop turn: one ask per lease zone for all the requests that wait on it.
void on_ask(ngx_event_t*) noexcept {
    ngx_queue_t ready;
    ngx_queue_init(&ready);
    for (ngx_uint_t z = 0; z < rl_sync_nzones; z++) {
        if (rl_sync_zones[z]->zone->sync_mode != RL_SYNC_LEASE) continue;
        rl_sync_batch_t* b = lease_batch(rl_sync_zones[z]);
        if (b != nullptr) {
            ngx_queue_insert_tail(&ready, &b->link);
        }
    }
    g_nahead = 0;
    // Every request now knows how many asks it waits for (none: decided at once, on the fallback).
    while (!ngx_queue_empty(&g_waiting)) {
        ngx_queue_t* q = ngx_queue_head(&g_waiting);
        ngx_queue_remove(q);
        rl_lease_wait_t* w = ngx_queue_data(q, rl_lease_wait_t, link);
        w->link.next = nullptr;
        if (w->waits == 0 && w->polling) {
            ngx_add_timer(&w->poll, kPollMs);
        } else if (w->waits == 0) {
            finished(w);
        }
    }
    while (!ngx_queue_empty(&ready)) {
        ngx_queue_t* q = ngx_queue_head(&ready);
        ngx_queue_remove(q);
        ngx_queue_insert_tail(&g_asks, q);
        rl_sync_batch_send(ngx_queue_data(q, rl_sync_batch_t, link));
    }
}

// The request no longer waits (it is gone, or its deadline passed): out of the asks.
void cancel(rl_ctx_t* ctx) {
    rl_lease_wait_t* w = wait_of(ctx);
    if (w == nullptr) return;
    if (w->poll.timer_set) {
        ngx_del_timer(&w->poll);
    }
    w->polling = false;
    if (w->link.next != nullptr) {
        ngx_queue_remove(&w->link);
        w->link.next = nullptr;
    }
    if (w->waits == 0) return;
    for (ngx_queue_t* q = ngx_queue_head(&g_asks); q != ngx_queue_sentinel(&g_asks); q = ngx_queue_next(q)) {
        rl_sync_batch_t* b = ngx_queue_data(q, rl_sync_batch_t, link);
        bool waited = false;
        for (size_t k = 0; k < b->waiters.n; k++) {
            if (b->waiters.elts[k] != w) continue;
            b->waiters.elts[k] = nullptr;
            waited = true;
        }
        if (waited) unneed(b, ctx);
    }
    w->waits = 0;
}

}  // namespace

void rl_sync_lease_init(ngx_log_t* log) noexcept {
    ngx_queue_init(&g_waiting);
    ngx_queue_init(&g_asks);
    g_ask.handler = on_ask;
    g_ask.log = log;
}

void rl_sync_asks_done(rl_sync_batch_t* b) noexcept {
    ngx_queue_remove(&b->link);
    wake_waiters(b);
}

ngx_uint_t rl_sync_lease_refill(rl_ctx_t* ctx) noexcept {
    bool can = rl_sync_nzones > 0;
    for (ngx_uint_t i = 0; i < ctx->nresults && can; i++) {
        if ((ctx->results[i].flags & RL_SYNC_WAIT) && ctx->results[i].applied->zone->sync == nullptr) can = false;
    }
    rl_lease_wait_t* w = wait_of(ctx);
    if (can && w == nullptr) {
        w = static_cast<rl_lease_wait_t*>(ngx_pcalloc(ctx->pool, sizeof(rl_lease_wait_t)));
        if (w != nullptr) {
            w->ctx = ctx;
            w->poll.handler = on_poll;
            w->poll.data = w;
            w->poll.log = ctx->log;
            ctx->store_data[RL_STORE_ID_SYNC_LEASE] = w;
        }
    }
    if (!can || w == nullptr) {
        // Nothing can be asked: the fallback decides them.
        for (ngx_uint_t i = 0; i < ctx->nresults; i++) {
            if (ctx->results[i].flags & RL_SYNC_WAIT) ctx->results[i].flags |= RL_SYNC_WAITED | RL_SYNC_FAILED;
        }
        return 0;
    }
    ngx_queue_insert_tail(&g_waiting, &w->link);
    w->waits = 0;
    w->polling = false;
    if (!g_ask.posted) {
        ngx_post_event(&g_ask, &ngx_posted_events);
    }
    return 1;
}

void rl_sync_lease_timed_out(rl_ctx_t* ctx) noexcept {
    cancel(ctx);
    fall_back(ctx);  // no grant in time: its lease limits fall back
}

void rl_sync_ask_ahead(rl_zone_t* zone, rl::Slot* slot, const rl::Policy* policy, int64_t now) noexcept {
    rl_sync_key_t* k = rl_sync_key(slot);
    if (zone->sync == nullptr || g_nahead == kAheadMax || (k->asked_at != 0 && now - k->asked_at < kRlStaleAsk)) return;
    k->asked_at = now;  // one ask at a time per key, whichever worker sends it
    g_ahead[g_nahead++] = rl_ahead_t{zone->sync, slot->hash, slot->algo, policy};
    if (!g_ask.posted) {
        ngx_post_event(&g_ask, &ngx_posted_events);
    }
}

void rl_sync_lease_end(rl_ctx_t* ctx) noexcept {
    cancel(ctx);
    // Units granted for a request that goes away before it decides again go back to the lease.
    for (ngx_uint_t i = 0; i < ctx->nresults; i++) {
        rl_result_t& res = ctx->results[i];
        if (!(res.flags & RL_SYNC_GRANTED)) continue;
        rl_zone_t* zone = res.applied->zone;
        ngx_shmtx_lock(&zone->shpool->mutex);
        rl::Slot* slot = rl::table_acquire(zone->table, res.hash, static_cast<uint8_t>(res.applied->policy.algo), nullptr);
        if (slot != nullptr) rl_sync_release(res, slot);
        ngx_shmtx_unlock(&zone->shpool->mutex);
        res.flags &= ~RL_SYNC_GRANTED;
    }
}
