// A sync zone's batches: the keys of a round (or of one loop turn's lease asks) sent as script
// calls, per node and, in a cluster, per slot; each reply checked against what the policy
// allows and applied to the keys under the zone's lock (core/reconcile/sync_reply.h). A call whose reply
// is lost or refused is sent again with its id (once its connection is back), for
// kRlSyncResendFor at most: the script replays the reply of a call that ran, so it is applied
// once. A call that cannot be sent at all, or still fails after that, puts its keys back: a
// reply lost for longer after Redis applied the call counts its delta once more. A call of cold
// keys' count asks (the count form) has no id and is not sent again (rl::sync_count_form).
#include "ngx/sync/engine.h"

#include "core/wire/redis_keys.h"
#include "core/reconcile/sync_command.h"
#include "core/reconcile/sync_reply.h"
#include "ngx/metrics/metrics.h"
#include "ngx/redis/cluster.h"

#include <algorithm>

void rl_sync_log_failure(rl_sync_zone_t* zs, rl_redis_node_t* node, const char* what, const redisReply* reply) noexcept {
    u_char text[160];
    *ngx_snprintf(text, sizeof(text) - 1, "sync of zone \"%V\" %s", &zs->zone->name, what) = '\0';
    if (node != nullptr) {
        rl_node_log_reply(node, reinterpret_cast<char*>(text), reply);
    } else {
        rl_redis_log_error(&zs->redis->conn, 0, "ratelimit redis \"%V\": %s", &zs->redis->name, text);
    }
}

// The policy a key runs under: the zone's, applied with the key's algorithm and burst.
const rl::Policy* rl_sync_policy_for(const rl_zone_t* zone, uint8_t algo, int64_t burst) noexcept {
    auto* p = static_cast<const rl::Policy*>(zone->sync_policies->elts);
    const rl::Policy* same_algo = nullptr;
    for (ngx_uint_t i = 0; i < zone->sync_policies->nelts; i++) {
        if (static_cast<uint8_t>(p[i].algo) != algo) continue;
        if (p[i].burst == burst) return &p[i];
        if (same_algo == nullptr) same_algo = &p[i];
    }
    return same_algo;  // a burst of the previous configuration: the nearest this one has
}

rl_sync_batch_t* rl_sync_batch_new(rl_sync_zone_t* zs, bool lease_ask) noexcept {
    auto* b = static_cast<rl_sync_batch_t*>(ngx_calloc(sizeof(rl_sync_batch_t), rl_sync_log));
    if (b == nullptr) return nullptr;
    b->zs = zs;
    b->lease_ask = lease_ask;
    return b;
}

namespace {

void batch_free(rl_sync_batch_t* b) {
    b->items.reset();
    ngx_free(b->index);
    ngx_free(b->calls);
    b->waiters.reset();
    ngx_free(b);
}

// Where a key's item number is looked for first in the index.
size_t index_home(const rl::KeyHash& hash, uint8_t algo, size_t cap) { return (hash.lo ^ algo) & (cap - 1); }

void index_put(rl_sync_batch_t* b, size_t i) {
    const rl_sync_item_t& it = b->items.elts[i];
    size_t k = index_home(it.si.hash, it.algo, b->index_cap);
    while (b->index[k] != 0) k = (k + 1) & (b->index_cap - 1);
    b->index[k] = static_cast<uint32_t>(i + 1);
}

// The index of the batch's items laid out afresh (cap: a power of two above twice the items);
// without memory, none: rl_sync_item_find scans.
void index_build(rl_sync_batch_t* b, size_t cap) {
    ngx_free(b->index);
    b->index = static_cast<uint32_t*>(ngx_calloc(cap * sizeof(uint32_t), rl_sync_log));
    b->index_cap = b->index != nullptr ? cap : 0;
    for (size_t i = 0; b->index != nullptr && i < b->items.n; i++) index_put(b, i);
}

}  // namespace

rl_sync_item_t* rl_sync_item_push(rl_sync_batch_t* b, rl::Slot* slot, const rl::Policy* p) noexcept {
    rl_sync_zone_t* zs = b->zs;
    rl_sync_item_t* it = b->items.push(rl_sync_log);
    if (it == nullptr) return nullptr;
    *it = rl_sync_item_t{};
    it->si.zone = rl_sv(zs->zone->name);
    it->si.hash = slot->hash;
    it->si.policy = p;
    it->si.hosts = zs->zone->sync_shm->hosts > 0 ? zs->zone->sync_shm->hosts : 1;
    it->life = rl::slot_life(zs->zone->table, slot);
    it->algo = slot->algo;
    if (b->items.n * 2 > b->index_cap) {
        size_t cap = b->index_cap > 0 ? 2 * b->index_cap : 64;
        while (cap < 2 * b->items.n) cap *= 2;  // (after a build that found no memory)
        index_build(b, cap);
    } else {
        index_put(b, b->items.n - 1);
    }
    return it;
}

// The slot an item came from, if it still holds the item's key in the life the item was taken
// from: a reply that lands after a DELETE (or an eviction) gives the key's new life nothing of
// the old one's global state, delta or lease.
rl::Slot* rl_sync_item_slot(rl_zone_t* zone, const rl_sync_item_t& it) noexcept {
    return rl::table_find_life(zone->table, it.si.hash, it.algo, it.life);
}

rl_sync_item_t* rl_sync_item_find(rl_sync_batch_t* b, const rl::KeyHash& hash, uint8_t algo) noexcept {
    if (b != nullptr && b->index != nullptr) {
        for (size_t k = index_home(hash, algo, b->index_cap); b->index[k] != 0; k = (k + 1) & (b->index_cap - 1)) {
            rl_sync_item_t* it = &b->items.elts[b->index[k] - 1];
            if (it->si.hash == hash && it->algo == algo) return it;
        }
        return nullptr;
    }
    for (size_t k = 0; b != nullptr && k < b->items.n; k++) {
        if (b->items.elts[k].si.hash == hash && b->items.elts[k].algo == algo) return &b->items.elts[k];
    }
    return nullptr;
}

namespace {

void batch_done(rl_sync_batch_t* b) {
    rl_sync_zone_t* zs = b->zs;
    rl_sync_shm_t* h = zs->zone->sync_shm;
    ngx_shmtx_lock(&zs->zone->shpool->mutex);
    if (!b->lease_ask && h->syncing_pid == ngx_pid) h->syncing_since = 0;
    if (!b->lease_ask) h->rounds++;
    h->keys_sent += b->items.n;
    if (b->failed) {
        h->down = 1;
        h->failures++;
    } else if (b->items.n > 0) {
        h->down = 0;
        h->last_ok = ngx_current_msec;
    }
    ngx_shmtx_unlock(&zs->zone->shpool->mutex);
    if (b->lease_ask) {
        rl_sync_asks_done(b);
    } else {
        rl_sync_round_done(b);
    }
    batch_free(b);
}

// ---- calls -------------------------------------------------------------------------------

void on_call_reply(rl_conn_op_t* op, redisReply* reply) noexcept;
bool on_call_ints(rl_conn_op_t* op, const int64_t* values, size_t n) noexcept;

bool send_call(rl_sync_call_t* call, bool asking) {
    rl_sync_batch_t* b = call->batch;
    rl_redis_t* redis = b->zs->redis;
    // Static: a call's items are copied in (only its own); one on the stack would be zeroed
    // whole for every call (~25 KiB).
    static rl::SyncItem items[kRlSyncItemsPerCall];
    for (size_t i = 0; i < call->n; i++) items[i] = b->items.elts[call->first + i].si;
    std::string_view prefix = rl_sv(redis->prefix);
    size_t len = rl::sync_command_bound(prefix, items, call->n);
    auto* buf = static_cast<char*>(rl_redis_scratch(redis, len));
    if (buf == nullptr) return false;
    call->counted = rl::sync_count_form(items, call->n);
    if (call->id_len == 0 && !call->counted) {
        // Unique among the hosts: this host's random tag (the end of its id), the worker, a count.
        static uint64_t count;
        const rl_sync_shm_t* h = b->zs->zone->sync_shm;
        size_t tag = h->host_id_len > 16 ? h->host_id_len - 16 : 0;
        u_char* end = ngx_snprintf(call->id, sizeof(call->id), "%*s.%xi.%xL", static_cast<size_t>(h->host_id_len - tag),
                                   h->host_id + tag, static_cast<ngx_int_t>(ngx_pid), ++count);
        call->id_len = static_cast<uint8_t>(end - call->id);
    }
    std::string_view id(reinterpret_cast<const char*>(call->id), call->id_len);
    len = rl::write_sync_command(buf, rl_node_script(call->node), false, prefix, items, call->n, 0, id,
                                 call->counted ? rl::SyncForm::count : rl::SyncForm::general);
    call->sent_us = rl_sync_local_us();
    if (call->first_sent_us == 0) call->first_sent_us = call->sent_us;
    rl_conn_op_t* op = rl_node_send(call->node, reinterpret_cast<u_char*>(buf), len, on_call_reply, call, 1, asking);
    if (op != nullptr) rl_conn_expect_ints(op, on_call_ints, rl::sync_reply_len(call->n, call->counted));
    return op != nullptr;
}


// The call's keys go back to what is unsent: deltas merged, give-backs back in the budget.
void call_failed(rl_sync_call_t* call) {
    rl_sync_batch_t* b = call->batch;
    rl_zone_t* zone = b->zs->zone;
    rl_sync_shm_t* h = zone->sync_shm;
    ngx_shmtx_lock(&zone->shpool->mutex);
    for (size_t i = call->first; i < call->first + call->n; i++) {
        const rl_sync_item_t& it = b->items.elts[i];
        rl::Slot* slot = rl_sync_item_slot(zone, it);
        if (slot == nullptr) continue;
        rl_sync_key_t* k = rl_sync_key(slot);
        if (!it.si.delta.empty()) {
            rl::Delta merged = it.si.delta;  // the older units first
            rl::delta_merge(merged, k->unsent, *it.si.policy);
            k->unsent = merged;
        }
        if (rl_sync_shares(zone, *it.si.policy)) {
            // A share given back is not given again (the host uses it no more: it expires);
            // asks go again.
            if (it.si.share.rate[1] > 0) k->asks.asked_next = 0;
            if (it.si.share.epoch_us > 0 || it.si.need > 0) k->asked_at = 0;
            rl_sync_mark(h, it.life.ref);
            continue;
        }
        if (it.si.give_back > 0 && k->lease.units == 0) {  // else they drain in Redis
            k->lease = rl::Lease{it.si.give_back, it.si.give_back_top, it.si.give_back_at};
        }
        if (it.si.want > 0) k->asked_at = 0;
        rl_sync_mark(h, it.life.ref);
    }
    ngx_shmtx_unlock(&zone->shpool->mutex);
    b->failed = true;
}

void call_settled(rl_sync_call_t* call) {
    rl_sync_batch_t* b = call->batch;
    if (--b->pending == 0) batch_done(b);
}

// Logs a refused reply (rate limited with the Redis errors) and counts it.
void refused(rl_sync_call_t* call, const char* why) {
    rl_sync_zone_t* zs = call->batch->zs;
    u_char what[200];
    *ngx_snprintf(what, sizeof(what) - 1, "refused a reply: %s", why) = '\0';
    rl_sync_log_failure(zs, nullptr, reinterpret_cast<char*>(what), nullptr);
    rl_metrics_redis_error(zs->redis->conn.metrics, RL_REDIS_ERR_BOUNDS);
}

enum taken_e { TAKEN, BAD_SHAPE, BAD_CLOCK };

// Applies a reply's integers: {now_us, then per key its state, grant, retry and shares}
// (sync_command.h). Not at all if they do not decode, or Redis's clock stepped (refused, logged
// and counted here): the call is then sent again.
taken_e take_values(rl_sync_call_t* call, const int64_t* values, size_t nvalues) {
    rl_sync_batch_t* b = call->batch;
    rl_zone_t* zone = b->zs->zone;
    rl_sync_shm_t* h = zone->sync_shm;
    auto* results = static_cast<rl::SyncResult*>(rl_redis_scratch(b->zs->redis, call->n * sizeof(rl::SyncResult)));
    if (results == nullptr) return BAD_SHAPE;
    int64_t redis_now = 0;
    if (!rl::decode_sync_reply(values, nvalues, call->n, results, &redis_now, call->counted)) return BAD_SHAPE;

    int64_t local = rl_sync_local_us();
    rl::ReplyBounds bounds;
    bounds.hosts = h->hosts;
    bounds.interval_us = zone->sync_us;
    bounds.round_trip_us = static_cast<int64_t>(b->zs->redis->timeout) * 1000;
    ngx_uint_t nrefused = 0;
    rl::ReplyFault fault = rl::ReplyFault::none;
    ngx_shmtx_lock(&zone->shpool->mutex);
    // Redis ran the call about half a round trip before its reply came (a call sent again may
    // get the reply of its first run: its time moves the offset only when it confirms a step).
    rl::SyncClock clock{h->offset_us, h->clock_candidate, h->clock_seen};
    int64_t mid = call->sent_us + (local - call->sent_us) / 2;
    bool clock_ok = rl::accept_clock(clock, redis_now, mid);
    bool stepped = clock.offset - h->offset_us > rl::kMaxClockStep || h->offset_us - clock.offset > rl::kMaxClockStep;
    if (clock_ok && (call->resends == 0 || stepped)) {
        h->offset_us = clock.offset;
        // The offset is off by at most half the round trip that measured it (shares' guard).
        int64_t err = (local - call->sent_us) / 2 + 1000;
        h->clock_error_us = static_cast<uint32_t>(err < 1000 ? 1000 : (err > 1000000000 ? 1000000000 : err));
    }
    h->clock_candidate = clock.candidate;
    h->clock_seen = clock.seen;
    for (size_t i = 0; clock_ok && i < call->n; i++) {
        rl_sync_item_t& it = b->items.elts[call->first + i];
        rl::Slot* slot = rl_sync_item_slot(zone, it);
        if (slot == nullptr) continue;  // forgotten since: Redis has its units all the same
        rl_sync_key_t* k = rl_sync_key(slot);
        bool lease = zone->sync_mode == RL_SYNC_LEASE;
        if (lease && rl_sync_shares(zone, *it.si.policy)) {
            // Shares: the grant adds to the host's shares; `got` units of the need go to the
            // requests that waited. (The view is kept for the headers only.)
            rl::ReplyFault f = rl::check_key_reply(*it.si.policy, it.si, results[i], redis_now, bounds);
            if (f != rl::ReplyFault::none) {
                nrefused++;
                fault = f;
            } else {
                int64_t now_here = local + h->offset_us;
                it.got = rl::take_share_reply(k->share, it.si, results[i], now_here, rl_sync_guard_us(zone));
                it.need_granted = it.got > 0;
                rl::share_asks_reply(k->asks, it.si, results[i], redis_now);
                slot->state = results[i].global;
            }
            if (it.si.want > 0 || it.si.need > 0 || it.si.share.epoch_us > 0) k->asked_at = 0;
            continue;
        }
        rl::SyncKeyState ks{slot->state, k->unsent, k->lease, k->used_at, k->retry_at};
        rl::KeyReply kr = rl::take_key_reply(ks, it.si, results[i], redis_now, lease, bounds);
        slot->state = ks.view;
        k->lease = ks.lease;
        k->used_at = ks.used_at;
        k->retry_at = ks.retry_at;
        if (kr.refused) {
            nrefused++;
            fault = kr.fault;
        }
        if (!lease) continue;
        if (it.si.want > 0) k->asked_at = 0;
        it.need_granted = kr.need_granted;
        it.got = kr.need_granted ? it.si.need : 0;
        if (kr.keep) rl_sync_mark(h, it.life.ref);  // given back when idle
    }
    ngx_shmtx_unlock(&zone->shpool->mutex);
    if (!clock_ok) {
        refused(call, "Redis's clock stepped (sent again)");
        return BAD_CLOCK;
    }
    if (nrefused > 0) {
        char why[160];
        *ngx_snprintf(reinterpret_cast<u_char*>(why), sizeof(why) - 1, "%ui of %uz keys outside what the policy "
                      "allows (%s): not stored", nrefused, call->n, rl::reply_fault_text(fault)) = '\0';
        refused(call, why);
    }
    return TAKEN;
}

// The same from hiredis's reply (one the connection did not read as integers).
taken_e take_reply(rl_sync_call_t* call, const redisReply* reply) {
    if (reply->type != REDIS_REPLY_ARRAY || reply->elements != rl::sync_reply_len(call->n, call->counted)) return BAD_SHAPE;
    size_t nvalues = reply->elements;
    auto* values = static_cast<int64_t*>(ngx_alloc(nvalues * sizeof(int64_t), rl_sync_log));
    if (values == nullptr) return BAD_SHAPE;
    for (size_t i = 0; i < nvalues; i++) {
        if (reply->element[i]->type != REDIS_REPLY_INTEGER) {
            ngx_free(values);
            return BAD_SHAPE;
        }
        values[i] = reply->element[i]->integer;
    }
    taken_e taken = take_values(call, values, nvalues);
    ngx_free(values);
    return taken;
}

void call_resend(ngx_event_t* ev) noexcept;

// A call's reply was lost or refused: sent again with its id after an interval, while that is
// recent enough for the script to remember the call; true if so. Never a count call.
bool call_again(rl_sync_call_t* call) {
    rl_sync_zone_t* zs = call->batch->zs;
    int64_t limit = ngx_exiting || ngx_quit ? kRlSyncResendExiting : kRlSyncResendFor;
    if (call->counted || ngx_terminate || rl_sync_local_us() - call->first_sent_us >= limit) return false;
    call->resend.handler = call_resend;
    call->resend.data = call;
    call->resend.log = rl_sync_log;
    call->resend.cancelable = 0;  // an exiting worker stays for it
    ngx_add_timer(&call->resend, zs->sync_ms);
    return true;
}

void on_call_reply(rl_conn_op_t* op, redisReply* reply) noexcept {
    auto* call = static_cast<rl_sync_call_t*>(op->data);
    rl_sync_zone_t* zs = call->batch->zs;
    auto* node = static_cast<rl_redis_node_t*>(op->conn->data);
    rl_retry_t retry{};
    rl_reply_e verdict = rl_node_reply(node, reply, &retry);
    taken_e taken = verdict == RL_REPLY_TAKE ? take_reply(call, reply) : BAD_SHAPE;
    if (taken == TAKEN) {
        call_settled(call);
        return;
    }
    // (TRYAGAIN: a call's keys share one slot, and go again in the next round.)
    if (verdict == RL_REPLY_RETRY && rl_node_retry_left(&call->tries)) {
        call->node = retry.node;
        if (send_call(call, retry.ask)) return;
    }
    u_char what[160];
    bool again = call_again(call);
    *ngx_snprintf(what, sizeof(what) - 1, "sync of zone \"%V\" failed (%s)", &zs->zone->name,
                  again ? "sent again with its id" : "its keys go again in the next round") = '\0';
    if (taken != BAD_CLOCK) rl_node_reply_failed(node, reinterpret_cast<char*>(what), reply);  // (else counted)
    if (again) return;
    call_failed(call);
    call_settled(call);
}

// The reply read straight as integers (the common case); one that does not decode goes to
// on_call_reply as hiredis reads it, which says why. A clock refused was logged and counted.
bool on_call_ints(rl_conn_op_t* op, const int64_t* values, size_t n) noexcept {
    auto* call = static_cast<rl_sync_call_t*>(op->data);
    taken_e taken = take_values(call, values, n);
    if (taken == BAD_SHAPE) return false;
    if (taken == BAD_CLOCK && !call_again(call)) {
        call_failed(call);
        call_settled(call);
    } else if (taken == TAKEN) {
        call_settled(call);
    }
    return true;
}

void call_resend(ngx_event_t* ev) noexcept {
    auto* call = static_cast<rl_sync_call_t*>(ev->data);
    rl_redis_t* redis = call->batch->zs->redis;
    call->resends++;
    call->tries = 0;
    // The slot's owner as the map says now: the node may have left the map since.
    if (redis->cluster) call->node = rl_cluster_route(redis, call->slot);
    if (send_call(call, false)) return;
    // The connection that lost the reply is not back yet (backing off): the call waits for it
    // with its id while the script remembers it. Its keys going again under a new id would
    // have Redis count their units twice.
    if (call_again(call)) return;
    rl_sync_log_failure(call->batch->zs, nullptr, "not sent again: Redis unavailable (its keys go again in the next round)",
                        nullptr);
    call_failed(call);
    call_settled(call);
}

// The batch's keys in calls: per cluster slot (a script's keys share one), kRlSyncItemsPerCall at most.
bool plan_calls(rl_sync_batch_t* b) {
    rl_redis_t* redis = b->zs->redis;
    if (redis->cluster) {
        std::string_view prefix = rl_sv(redis->prefix), name = rl_sv(b->zs->zone->name);
        char key[512];
        if (rl::redis_key_max_len(prefix, name) > sizeof(key)) return false;
        for (size_t i = 0; i < b->items.n; i++) {
            rl_sync_item_t& it = b->items.elts[i];
            size_t len = rl::redis_key(key, prefix, name, it.si.hash, it.si.policy->algo);
            it.slot = rl::cluster_slot(std::string_view(key, len));
        }
        std::sort(b->items.elts, b->items.elts + b->items.n,
                  [](const rl_sync_item_t& x, const rl_sync_item_t& y) { return x.slot < y.slot; });
        if (b->index != nullptr) index_build(b, b->index_cap);  // the items moved
    }
    // Calls at most: one per key in a cluster, else one per kRlSyncItemsPerCall.
    size_t most = redis->cluster ? b->items.n : (b->items.n + kRlSyncItemsPerCall - 1) / kRlSyncItemsPerCall;
    b->calls = static_cast<rl_sync_call_t*>(ngx_calloc(most * sizeof(rl_sync_call_t), rl_sync_log));
    if (b->calls == nullptr) return false;
    for (size_t i = 0; i < b->items.n;) {
        rl_sync_call_t* call = &b->calls[b->ncalls++];
        call->batch = b;
        call->first = i;
        call->slot = b->items.elts[i].slot;
        while (i < b->items.n && i - call->first < kRlSyncItemsPerCall && b->items.elts[i].slot == call->slot) i++;
        call->n = i - call->first;
        call->node = redis->cluster ? rl_cluster_route(redis, call->slot) : redis->nodes.elts[0];
    }
    return true;
}

}  // namespace

void rl_sync_batch_send(rl_sync_batch_t* b) noexcept {
    if (b->items.n == 0 || !plan_calls(b)) {
        if (b->items.n > 0) {
            rl_sync_call_t all{};
            all.batch = b;
            all.n = b->items.n;
            call_failed(&all);
        }
        batch_done(b);
        return;
    }
    b->pending = b->ncalls + 1;  // + 1 until all are sent: no outcome ends the batch early
    bool unsent = false;
    for (size_t c = 0; c < b->ncalls; c++) {
        if (send_call(&b->calls[c], false)) continue;
        unsent = true;
        call_failed(&b->calls[c]);
        b->pending--;
    }
    if (unsent) rl_sync_log_failure(b->zs, nullptr, "not sent: Redis unavailable (its keys go again in the next round)", nullptr);
    call_settled(&b->calls[0]);  // the + 1
}
