// The sync engine of sync=TIME zones, in each worker. Every worker ticks; under the zone's lock
// the first one whose tick finds the interval over claims the round, so a host reconciles once
// per interval whatever its number of workers. The round takes the dirty keys out of shared
// memory (their deltas, lease asks and give-backs) and sends them (batch.cpp), with a heartbeat
// that counts the hosts. An exiting worker sends what is unsent and waits for the reply.
#include "ngx/sync/engine.h"

#include "core/wire/redis_keys.h"
#include "core/reconcile/sync_command.h"
#include "ngx/redis/cluster.h"

rl_sync_zone_t** rl_sync_zones;
ngx_uint_t rl_sync_nzones;
ngx_log_t* rl_sync_log;

namespace {

constexpr ngx_uint_t kTakePerLock = 1024;   // dirty keys taken per hold of the zone's lock
constexpr ngx_msec_t kTickMax = 100;        // ticks at least this often: an exiting worker flushes soon
constexpr ngx_msec_t kExitWait = 3000;      // an exiting worker waits this long at most for its last round
constexpr ngx_uint_t kExitRounds = 3;
constexpr ngx_msec_t kStaleRound = 3000;    // a round claimed longer ago by a worker that died is over

// ---- heartbeat ---------------------------------------------------------------------------

void on_heartbeat(rl_conn_op_t* op, redisReply* reply) noexcept {
    auto* zs = static_cast<rl_sync_zone_t*>(op->data);
    auto* node = static_cast<rl_redis_node_t*>(op->conn->data);
    zs->heartbeat_pending = false;
    rl_sync_shm_t* h = zs->zone->sync_shm;
    bool ok = reply != nullptr && reply->type == REDIS_REPLY_INTEGER;
    if (reply != nullptr && zs->redis->cluster &&
        (rl_redis_error_is(reply, "MOVED ") || rl_redis_error_is(reply, "ASK "))) {
        bool ask;
        rl_cluster_redirect(zs->redis, reply, &ask);  // the map learns it: the next heartbeat goes there
        return;
    }
    ngx_shmtx_lock(&zs->zone->shpool->mutex);
    if (ok) {
        h->hosts = reply->integer > 0 && reply->integer < 1000000 ? reply->integer : 1;
        h->last_ok = ngx_current_msec;
    }
    // Redis answers or not: a round in flight says it for its keys; without one, this does.
    if (zs->round == nullptr) h->down = ok ? 0 : 1;
    ngx_shmtx_unlock(&zs->zone->shpool->mutex);
    if (ok) return;
    if (reply != nullptr && (rl_redis_error_is(reply, "NOSCRIPT") || rl_redis_error_is(reply, "ERR Function not found"))) {
        rl_node_reload_code(node);
    }
    rl_sync_log_failure(zs, node, "heartbeat failed", reply);
}

// This host in the zone's set of hosts, and how many there are (a lease's fair share).
void send_heartbeat(rl_sync_zone_t* zs) {
    if (zs->heartbeat_pending) return;
    rl_redis_t* redis = zs->redis;
    rl_sync_shm_t* h = zs->zone->sync_shm;
    std::string_view prefix = rl_sv(redis->prefix), name = rl_sv(zs->zone->name);
    std::string_view id(reinterpret_cast<const char*>(h->host_id), h->host_id_len);
    rl_redis_node_t* node = redis->nodes.elts[0];
    if (redis->cluster) {
        char key[512];
        if (rl::hosts_key_len(prefix, name) > sizeof(key)) return;  // prefix and name are short in practice
        node = rl_cluster_route(redis, rl::cluster_slot(std::string_view(key, rl::hosts_key(key, prefix, name))));
    }
    // Hosts not seen for three intervals (and a second) are gone.
    int64_t window = 3 * zs->zone->sync_us + 1000000;
    rl::CommandScript script = rl_node_script(node);
    size_t len = rl::hosts_command_len(script, false, prefix, name, id, window, 0);
    auto* buf = static_cast<char*>(rl_redis_scratch(redis, len));
    if (buf == nullptr) return;
    len = rl::write_hosts_command(buf, script, false, prefix, name, id, window, 0);
    zs->heartbeat_pending = rl_node_send(node, reinterpret_cast<u_char*>(buf), len, on_heartbeat, zs, 1) != nullptr;
    if (!zs->heartbeat_pending) {  // Redis unavailable: decisions say so until it answers again
        ngx_shmtx_lock(&zs->zone->shpool->mutex);
        h->down = 1;
        ngx_shmtx_unlock(&zs->zone->shpool->mutex);
    }
}
// ---- rounds ------------------------------------------------------------------------------

// Takes the dirty keys out of shared memory: what each sends, and re-lists the lease keys that
// keep a budget (given back once idle).
void collect(rl_sync_zone_t* zs, rl_sync_batch_t* b, bool final) {
    rl_zone_t* zone = zs->zone;
    rl_sync_shm_t* h = zone->sync_shm;
    bool lease = zone->sync_mode == RL_SYNC_LEASE;
    rl_array_t<uint32_t> keep{};  // refs to list again
    uint32_t taken = 0;
    int64_t local = rl_sync_local_us();
    for (;;) {
        ngx_shmtx_lock(&zone->shpool->mutex);
        int64_t now = local + h->offset_us;
        rl::TableHeader* t = zone->table;
        uint32_t* dirty = rl_sync_dirty(h);
        uint8_t* listed = rl_sync_listed(h);
        ngx_uint_t n = 0;
        for (; n < kTakePerLock && h->ndirty > 0 && taken < h->cap; n++, taken++) {
            uint32_t ref = dirty[--h->ndirty];
            listed[ref - 1] = 0;
            if (ref > t->used) continue;
            rl::Slot* slot = rl::table_slot(t, ref);
            rl_sync_key_t* k = rl_sync_key(slot);
            const rl::Policy* p = rl_sync_policy_for(zone, slot->algo, k->burst);
            if (p == nullptr) {  // an algorithm this configuration no longer applies
                k->unsent = rl::Delta{};
                continue;
            }
            rl::SyncItem si;
            si.delta = k->unsent;
            if (lease && rl_sync_shares(zone, *p)) {
                // Shares: its demand over the last two rounds (an epoch), its next share, more
                // of this one if short; given back once unused for two epochs.
                const int64_t epoch = rl_sync_epoch_us(zone);
                const int64_t units = k->spent + k->rate, last_rate = k->rate;
                k->rate = k->spent;
                k->spent = 0;
                bool holds = rl::share_holds_any(k->share);
                if (holds && (final || now - k->used_at >= 2 * epoch)) {
                    si.share = rl::share_give_back_ask(k->share, *p, now, rl_sync_guard_us(zone), &si.give_back);
                    holds = false;
                } else if (!final && units > 0 && (holds || rl::warmth_hot(k->warmth, now, zone->sync_us)) &&
                           (k->asked_at == 0 || now - k->asked_at >= kRlStaleAsk)) {
                    // (A cold key holding no share asks none: its requests are asked for one by one.)
                    int64_t span = rl::share_demand_span(last_rate > 0 ? epoch : zone->sync_us, k->asks.since, now,
                                                         zone->sync_us / 2);
                    si.share = rl::share_round_ask(k->share, k->asks, *p, epoch, now, rl::share_demand(*p, units, span));
                    si.want = rl::share_units_wanted(si.share);
                    if (si.share.epoch_us > 0) k->asked_at = now;
                }
                if (holds) {
                    if (uint32_t* again = keep.push(rl_sync_log)) *again = ref;
                }
            } else if (lease) {
                k->rate = k->spent;
                k->spent = 0;
                int64_t usable = rl::lease_usable(k->lease, *p, now);
                if (k->lease.units > 0 && (final || now - k->used_at >= 2 * zone->sync_us)) {
                    si.give_back = k->lease.units;  // unspent for two intervals: others may need it
                    si.give_back_at = k->lease.at;
                    si.give_back_top = k->lease.top;
                    k->lease = rl::Lease{};
                } else if (k->rate > 0 && usable < k->rate && rl_sync_asks_ahead(zone, k, now) &&
                           (k->asked_at == 0 || now - k->asked_at >= kRlStaleAsk)) {
                    // Ask ahead: two intervals at the recent rate. Not beside an ask in flight:
                    // grants answered out of order stack lower than they are.
                    si.want = 2 * k->rate - usable;
                    k->asked_at = now;
                }
                if (k->lease.units > 0) {
                    if (uint32_t* again = keep.push(rl_sync_log)) *again = ref;
                }
            }
            bool refresh = k->refresh != 0;  // optimistic: a rejecting view asks for the global state
            k->refresh = 0;
            if (si.delta.empty() && si.want == 0 && si.give_back == 0 && si.share.epoch_us == 0 && !refresh) continue;
            rl_sync_item_t* it = rl_sync_item_push(b, slot, p);
            if (it == nullptr) {  // out of memory: the key stays for the next round (a give-back of shares: they expire)
                if (si.give_back > 0 && si.share.epoch_us == 0) k->lease = rl::Lease{si.give_back, si.give_back_top, si.give_back_at};
                if (si.share.rate[1] > 0) k->asks.asked_next = 0;
                if (si.share.epoch_us > 0 && si.share.back_at == 0) k->asked_at = 0;
                k->refresh = refresh ? 1 : 0;
                rl_sync_mark(h, ref);
                break;
            }
            k->unsent = rl::Delta{};
            it->si.delta = si.delta;
            it->si.want = si.want;
            it->si.give_back = si.give_back;
            it->si.give_back_at = si.give_back_at;
            it->si.give_back_top = si.give_back_top;
            it->si.share = si.share;
        }
        bool more = h->ndirty > 0 && taken < h->cap && n == kTakePerLock;
        if (!more) {
            for (size_t i = 0; i < keep.n; i++) rl_sync_mark(h, keep.elts[i]);
        }
        ngx_shmtx_unlock(&zone->shpool->mutex);
        if (!more) break;
    }
    keep.reset();
}

void start_round(rl_sync_zone_t* zs, bool final) {
    rl_sync_batch_t* b = rl_sync_batch_new(zs, false);
    rl_sync_shm_t* h = zs->zone->sync_shm;
    if (b == nullptr) {
        ngx_shmtx_lock(&zs->zone->shpool->mutex);
        h->syncing_since = 0;
        ngx_shmtx_unlock(&zs->zone->shpool->mutex);
        return;
    }
    zs->round = b;
    collect(zs, b, final);
    if (!final) send_heartbeat(zs);
    rl_sync_batch_send(b);
}

// One round per interval per host: claimed under the lock by the first worker that sees it due
// (or that finds the last claim stale: its worker died).
void maybe_round(rl_sync_zone_t* zs) {
    if (zs->round != nullptr) return;
    rl_sync_shm_t* h = zs->zone->sync_shm;
    ngx_msec_t now = ngx_current_msec;
    ngx_shmtx_lock(&zs->zone->shpool->mutex);
    bool due = static_cast<ngx_msec_int_t>(now - h->next_sync_at) >= 0 &&
               (h->syncing_since == 0 || now - h->syncing_since > kStaleRound);
    if (due) {
        h->next_sync_at = now + zs->sync_ms;
        h->syncing_since = now ? now : 1;
        h->syncing_pid = ngx_pid;
    }
    ngx_shmtx_unlock(&zs->zone->shpool->mutex);
    if (due) start_round(zs, false);
}

void on_tick(ngx_event_t* ev) noexcept {
    auto* zs = static_cast<rl_sync_zone_t*>(ev->data);
    if (ngx_terminate) return;
    // An old worker after a reload that laid the zone out anew (sync turned off): not ours any more.
    if (zs->zone->sync_shm->magic != kRlSyncMagic) return;
    if (ngx_exiting || ngx_quit) {
        // The last rounds: what is unsent goes out, and the worker stays until the reply (the
        // timer is not cancelable), kExitWait at most.
        if (zs->exit_at == 0) zs->exit_at = ngx_current_msec ? ngx_current_msec : 1;
        bool in_time = ngx_current_msec - zs->exit_at < kExitWait;
        if (zs->round == nullptr && in_time && zs->exit_rounds < kExitRounds && zs->zone->sync_shm->ndirty > 0) {
            zs->exit_rounds++;
            start_round(zs, true);
        }
        // Requests that end a lease wait still commit: their deltas go in a later exit round.
        bool more = zs->round != nullptr || (zs->exit_rounds < kExitRounds && zs->zone->sync_shm->ndirty > 0);
        if (more && in_time) ngx_add_timer(ev, 10);
        return;
    }
    maybe_round(zs);
    ngx_add_timer(ev, zs->tick_ms);
}

}  // namespace

void rl_sync_round_done(rl_sync_batch_t* b) noexcept {
    if (b->zs->round == b) b->zs->round = nullptr;
}

ngx_int_t rl_sync_start(ngx_cycle_t* cycle, const ngx_array_t* all) noexcept {
    if (rl_sync_log == nullptr) rl_sync_lease_init(cycle->log);  // once per worker
    rl_sync_log = cycle->log;
    auto** zones = static_cast<rl_zone_t**>(all->elts);
    // Appended to the worker's list: two front ends built into one binary share it.
    auto** list = static_cast<rl_sync_zone_t**>(
        ngx_calloc((rl_sync_nzones + all->nelts) * sizeof(rl_sync_zone_t*) + 1, cycle->log));
    if (list == nullptr) return NGX_ERROR;
    if (rl_sync_nzones > 0) ngx_memcpy(list, rl_sync_zones, rl_sync_nzones * sizeof(rl_sync_zone_t*));
    ngx_free(rl_sync_zones);
    rl_sync_zones = list;
    for (ngx_uint_t i = 0; i < all->nelts; i++) {
        rl_zone_t* zone = zones[i];
        if (zone->sync_mode == RL_SYNC_OFF || zone->sync_shm == nullptr || zone->redis == nullptr) continue;
        auto* zs = static_cast<rl_sync_zone_t*>(ngx_calloc(sizeof(rl_sync_zone_t), cycle->log));
        if (zs == nullptr) return NGX_ERROR;
        zs->zone = zone;
        zs->redis = zone->redis;
        zs->sync_ms = static_cast<ngx_msec_t>((zone->sync_us + 999) / 1000);
        zs->tick_ms = zs->sync_ms < kTickMax ? zs->sync_ms : kTickMax;
        zs->tick.handler = on_tick;
        zs->tick.data = zs;
        zs->tick.log = cycle->log;
        zs->tick.cancelable = 0;  // keeps an exiting worker until its last round is answered
        zone->sync = zs;
        rl_sync_zones[rl_sync_nzones++] = zs;
        ngx_add_timer(&zs->tick, 1 + static_cast<ngx_msec_t>(ngx_random()) % zs->tick_ms);
    }
    return NGX_OK;
}

void rl_sync_stop() noexcept {
    for (ngx_uint_t z = 0; z < rl_sync_nzones; z++) {
        if (rl_sync_zones[z]->tick.timer_set) {
            ngx_del_timer(&rl_sync_zones[z]->tick);
        }
    }
}

void rl_sync_exit_wake(rl_zone_t* zone) noexcept {
    rl_sync_zone_t* zs = zone->sync;
    if (zs == nullptr || !(ngx_exiting || ngx_quit) || zs->exit_at == 0 || zs->tick.timer_set) return;
    if (ngx_current_msec - zs->exit_at < kExitWait && zs->exit_rounds < kExitRounds) ngx_add_timer(&zs->tick, 10);
}

