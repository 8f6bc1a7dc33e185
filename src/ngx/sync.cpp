// The sync engine of sync=TIME zones, in each worker. Every worker ticks; under the zone's lock
// the first one whose tick finds the interval over claims the round, so a host reconciles once
// per interval whatever its number of workers. The round takes the dirty keys out of shared
// memory (their deltas, lease asks and give-backs), sends them as batched script calls (per node,
// per slot in a cluster), and applies the replies: each key's view becomes the global state plus
// what the host admitted since the send; a lease key's budget grows by what Redis granted. A call
// that fails puts its deltas back (at least once: a reply lost after Redis applied it counts
// twice). Lease requests whose budget is empty wait for one ask, sent at the end of the loop
// turn for all of them. An exiting worker sends what is unsent and waits for the reply.
#include "sync.h"

#include "core/log_text.h"
#include "core/redis_keys.h"
#include "core/sync_command.h"
#include "redis_cluster.h"

#include <algorithm>
#include <sys/random.h>
#include <unistd.h>

namespace {

constexpr size_t kItemsPerCall = 128;       // keys per script run: bounds its reply and its time in Redis
constexpr ngx_uint_t kTakePerLock = 1024;   // dirty keys taken per hold of the zone's lock
constexpr ngx_msec_t kTickMax = 100;        // ticks at least this often: an exiting worker flushes soon
constexpr ngx_msec_t kExitWait = 3000;      // an exiting worker waits this long at most for its last round
constexpr ngx_uint_t kExitRounds = 3;
constexpr ngx_uint_t kMaxRedirects = 5;
constexpr ngx_msec_t kStaleRound = 3000;    // a round claimed longer ago by a worker that died is over
constexpr int64_t kStaleAsk = 1000000;      // an ask in flight for longer is given up on (us)
constexpr size_t kAheadMax = 256;           // background asks queued in one loop turn at most
constexpr ngx_msec_t kPollMs = 2;           // a request beside another worker's ask looks again after

int64_t now_us() {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return static_cast<int64_t>(ts.tv_sec) * 1000000 + ts.tv_nsec / 1000;
}

struct rl_sync_item_t {
    rl::SyncItem si;
    uint32_t ref;    // its slot, to apply the reply (skipped if the slot went to another key)
    uint8_t algo;
    uint16_t slot;   // cluster slot of its Redis key
    bool need_granted;  // lease: Redis granted `need`: the requests counted in it are admitted
};

struct rl_sync_batch_t;

struct rl_sync_call_t {
    rl_sync_batch_t* batch;
    size_t first;
    size_t n;
    rl_redis_node_t* node;
    uint16_t slot;
    uint8_t redirects;
    int64_t sent_us;  // local clock at the send: the clock offset takes half the round trip
};

// A round, or the lease asks of one loop turn for one zone.
struct rl_sync_batch_t {
    rl_sync_zone_t* zs;
    bool lease_ask;
    bool failed;
    ngx_uint_t pending;  // calls without an outcome yet
    rl_sync_item_t* items;
    size_t nitems;
    size_t cap;
    rl_sync_call_t* calls;
    size_t ncalls;
    rl_ctx_t** waiters;  // lease asks: the requests waiting (nullptr once gone)
    size_t nwaiters;
    ngx_queue_t link;    // in g_asks
};

}  // namespace

struct rl_sync_zone_t {
    rl_zone_t* zone;
    rl_redis_t* redis;
    ngx_event_t tick;
    ngx_msec_t tick_ms;
    ngx_msec_t sync_ms;
    rl_sync_batch_t* round;   // this worker's round in flight
    ngx_msec_t exit_at;       // when this worker saw it is exiting
    ngx_uint_t exit_rounds;
    bool heartbeat_pending;
};

namespace {

rl_sync_zone_t** g_zones;
ngx_uint_t g_nzones;
ngx_queue_t g_waiting;   // requests to ask grants for at the end of this loop turn
ngx_queue_t g_asks;      // lease asks in flight
ngx_event_t g_ask;       // posted: sends them
ngx_log_t* g_log;

// Lease keys whose budget runs low, to ask for in the background at the end of the loop turn.
struct rl_ahead_t {
    rl_sync_zone_t* zs;
    rl::KeyHash hash;
    uint8_t algo;
    const rl::Policy* policy;
};
rl_ahead_t g_ahead[kAheadMax];
size_t g_nahead;

void log_sync(rl_sync_zone_t* zs, rl_redis_node_t* node, const char* what, const redisReply* reply) {
    u_char text[160];
    *ngx_snprintf(text, sizeof(text) - 1, "sync of zone \"%V\" %s", &zs->zone->name, what) = '\0';
    if (node != nullptr) {
        rl_redis_log_reply(zs->redis, node, reinterpret_cast<char*>(text), reply);
    } else {
        rl_redis_log_error(&zs->redis->conn, 0, "ratelimit redis \"%V\": %s", &zs->redis->name, text);
    }
}

// The policy a key runs under: the zone's, applied with the key's algorithm and burst.
const rl::Policy* policy_for(const rl_zone_t* zone, uint8_t algo, int64_t burst) {
    auto* p = static_cast<const rl::Policy*>(zone->sync_policies->elts);
    const rl::Policy* same_algo = nullptr;
    for (ngx_uint_t i = 0; i < zone->sync_policies->nelts; i++) {
        if (static_cast<uint8_t>(p[i].algo) != algo) continue;
        if (p[i].burst == burst) return &p[i];
        if (same_algo == nullptr) same_algo = &p[i];
    }
    return same_algo;  // a burst of the previous configuration: the nearest this one has
}

bool batch_reserve(rl_sync_batch_t* b, size_t more) {
    if (b->nitems + more <= b->cap) return true;
    size_t cap = b->cap ? b->cap * 2 : 256;
    while (cap < b->nitems + more) cap *= 2;
    auto* items = static_cast<rl_sync_item_t*>(ngx_alloc(cap * sizeof(rl_sync_item_t), g_log));
    if (items == nullptr) return false;
    if (b->nitems) ngx_memcpy(items, b->items, b->nitems * sizeof(rl_sync_item_t));
    ngx_free(b->items);
    b->items = items;
    b->cap = cap;
    return true;
}

rl_sync_batch_t* batch_new(rl_sync_zone_t* zs, bool lease_ask) {
    auto* b = static_cast<rl_sync_batch_t*>(ngx_calloc(sizeof(rl_sync_batch_t), g_log));
    if (b == nullptr) return nullptr;
    b->zs = zs;
    b->lease_ask = lease_ask;
    return b;
}

void batch_free(rl_sync_batch_t* b) {
    ngx_free(b->items);
    ngx_free(b->calls);
    ngx_free(b->waiters);
    ngx_free(b);
}

rl_sync_item_t* item_push(rl_sync_batch_t* b, rl_sync_zone_t* zs, rl::Slot* slot, const rl::Policy* p) {
    if (!batch_reserve(b, 1)) return nullptr;
    rl_sync_item_t* it = &b->items[b->nitems++];
    *it = rl_sync_item_t{};
    it->si.zone = rl_sv(zs->zone->name);
    it->si.hash = slot->hash;
    it->si.policy = p;
    it->si.hosts = zs->zone->sync_shm->hosts > 0 ? zs->zone->sync_shm->hosts : 1;
    it->ref = rl::table_ref(zs->zone->table, slot);
    it->algo = slot->algo;
    return it;
}

// The slot an item came from, if it still holds the item's key.
rl::Slot* item_slot(rl_zone_t* zone, const rl_sync_item_t& it) {
    rl::TableHeader* t = zone->table;
    if (it.ref == 0 || it.ref > t->used) return nullptr;
    rl::Slot* s = rl::table_slot(t, it.ref);
    return s->hash == it.si.hash && s->algo == it.algo ? s : nullptr;
}

rl_sync_item_t* find_item(rl_sync_batch_t* b, const rl::KeyHash& hash, uint8_t algo) {
    for (size_t k = 0; b != nullptr && k < b->nitems; k++) {
        if (b->items[k].si.hash == hash && b->items[k].algo == algo) return &b->items[k];
    }
    return nullptr;
}

// ---- calls -------------------------------------------------------------------------------

void on_call_reply(rl_conn_op_t* op, redisReply* reply) noexcept;

bool send_call(rl_sync_call_t* call) {
    rl_sync_batch_t* b = call->batch;
    rl_redis_t* redis = b->zs->redis;
    rl::SyncItem items[kItemsPerCall];
    for (size_t i = 0; i < call->n; i++) items[i] = b->items[call->first + i].si;
    std::string_view prefix = rl_sv(redis->prefix);
    size_t len = rl::sync_command_bound(prefix, items, call->n);
    auto* buf = static_cast<char*>(rl_redis_scratch(redis, len));
    if (buf == nullptr) return false;
    len = rl::write_sync_command(buf, rl_redis_script(call->node), false, prefix, items, call->n, 0);
    call->sent_us = now_us();
    return rl_redis_send(call->node, reinterpret_cast<u_char*>(buf), len, on_call_reply, call) != nullptr;
}

void batch_done(rl_sync_batch_t* b);

// The call's keys go back to what is unsent: deltas merged, give-backs back in the budget.
void call_failed(rl_sync_call_t* call) {
    rl_sync_batch_t* b = call->batch;
    rl_zone_t* zone = b->zs->zone;
    rl_sync_shm_t* h = zone->sync_shm;
    ngx_shmtx_lock(&zone->shpool->mutex);
    for (size_t i = call->first; i < call->first + call->n; i++) {
        const rl_sync_item_t& it = b->items[i];
        rl::Slot* slot = item_slot(zone, it);
        if (slot == nullptr) continue;
        rl_sync_key_t* k = rl_sync_key(slot);
        if (!it.si.delta.empty()) {
            rl::Delta merged = it.si.delta;  // the older units first
            rl::delta_merge(merged, k->unsent, *it.si.policy);
            k->unsent = merged;
        }
        if (it.si.give_back > 0 && k->lease.units == 0) {  // else they drain in Redis
            k->lease = rl::Lease{it.si.give_back, it.si.give_back_top, it.si.give_back_at};
        }
        if (it.si.want > 0) k->asked_at = 0;
        rl_sync_mark(h, it.ref);
    }
    ngx_shmtx_unlock(&zone->shpool->mutex);
    b->failed = true;
}

void call_settled(rl_sync_call_t* call) {
    rl_sync_batch_t* b = call->batch;
    if (--b->pending == 0) batch_done(b);
}

// Whether Redis kept a bucket's given-back units (it does when units were granted above them
// since: rl::give_back), seen from the state after: its level is still above their top. Told
// from `remaining` (whole units), so a doubt counts as given back: the units are then dropped,
// which can only leave them to drain.
bool give_back_refused(const rl::SyncItem& si, const rl::State& global, int64_t now) {
    const rl::Policy& p = *si.policy;
    if (!rl::is_bucket(p.algo)) return false;  // windows always take them back
    // Whole units below their top now: what a lease as high as the top could still use.
    int64_t top_units = rl::lease_usable(rl::Lease{rl::kExact, si.give_back_top, si.give_back_at}, p, now);
    // The level after is above depth - (remaining + 1) units: refused if that reaches the top.
    int64_t remaining = rl::decide(global, p, now, 0).remaining;
    return p.burst - remaining >= top_units + 1;
}

// Applies a reply: {now_us, then per key a, b, c, granted, retry_after_us}.
bool take_reply(rl_sync_call_t* call, const redisReply* reply) {
    rl_sync_batch_t* b = call->batch;
    rl_zone_t* zone = b->zs->zone;
    rl_sync_shm_t* h = zone->sync_shm;
    if (reply->type != REDIS_REPLY_ARRAY || reply->elements != rl::sync_reply_len(call->n)) return false;
    size_t nvalues = reply->elements;
    auto* mem = static_cast<u_char*>(
        rl_redis_scratch(b->zs->redis, nvalues * sizeof(int64_t) + call->n * sizeof(rl::SyncResult)));
    if (mem == nullptr) return false;
    auto* values = reinterpret_cast<int64_t*>(mem);
    auto* results = reinterpret_cast<rl::SyncResult*>(values + nvalues);
    for (size_t i = 0; i < nvalues; i++) {
        if (reply->element[i]->type != REDIS_REPLY_INTEGER) return false;
        values[i] = reply->element[i]->integer;
    }
    int64_t redis_now = 0;
    if (!rl::decode_sync_reply(values, nvalues, call->n, results, &redis_now)) return false;
    for (size_t i = 0; i < call->n; i++) {  // never more than was asked: Redis is not trusted
        const rl::SyncItem& si = b->items[call->first + i].si;
        if (results[i].granted > (si.want > si.need ? si.want : si.need)) return false;
    }

    int64_t local = now_us();
    ngx_shmtx_lock(&zone->shpool->mutex);
    // Redis ran the call about half a round trip before its reply came.
    h->offset_us = redis_now - (call->sent_us + (local - call->sent_us) / 2);
    for (size_t i = 0; i < call->n; i++) {
        rl_sync_item_t& it = b->items[call->first + i];
        const rl::SyncResult& r = results[i];
        rl::Slot* slot = item_slot(zone, it);
        if (slot == nullptr) continue;  // forgotten since: Redis has its units all the same
        rl_sync_key_t* k = rl_sync_key(slot);
        // The view: the global state plus what this host admitted since the send.
        slot->state = k->unsent.empty() ? r.global : rl::apply_delta(r.global, *it.si.policy, redis_now, k->unsent);
        if (zone->sync_mode != RL_SYNC_LEASE) continue;
        if (it.si.want > 0) k->asked_at = 0;
        if (it.si.give_back > 0 && k->lease.units == 0 && give_back_refused(it.si, r.global, redis_now)) {
            // Redis granted above these units since (another host): they stay this host's, usable
            // as they drain, and are given back again once they are on top.
            k->lease = rl::Lease{it.si.give_back, it.si.give_back_top, it.si.give_back_at};
        }
        // The requests that waited for `need` are admitted as of the grant: the lease keeps the rest.
        it.need_granted = it.si.need > 0 && r.granted >= it.si.need;
        int64_t rest = it.need_granted ? r.granted - it.si.need : r.granted;
        if (r.granted > 0 && k->lease.units > 0 && redis_now < k->lease.at) {
            // Granted before the units this host already holds (another worker's ask, answered
            // later): they lie below those, whose top stays the lease's.
            k->lease.units += rest;
        } else if (r.granted > 0) {
            // All of it stacks on the lease, then the need is spent at the grant: the lowest units,
            // so the rest keeps the grant's top.
            rl::lease_add(k->lease, *it.si.policy, redis_now, r.granted, r.global);
            if (it.need_granted) rl::lease_take(k->lease, *it.si.policy, redis_now, it.si.need);
            k->used_at = redis_now;  // a fresh grant is not idle
        }
        if (it.si.need > r.granted) {
            k->retry_at = redis_now + (r.retry_after_us >= 0 ? r.retry_after_us : it.si.policy->period_us);
        } else {
            k->retry_at = 0;
        }
        if (k->lease.units > 0) rl_sync_mark(h, it.ref);  // given back when idle
    }
    ngx_shmtx_unlock(&zone->shpool->mutex);
    return true;
}

void on_call_reply(rl_conn_op_t* op, redisReply* reply) noexcept {
    auto* call = static_cast<rl_sync_call_t*>(op->data);
    rl_sync_zone_t* zs = call->batch->zs;
    rl_redis_t* redis = zs->redis;
    auto* node = static_cast<rl_redis_node_t*>(op->conn->data);
    rl_redis_node_t* retry_on = nullptr;
    bool ask = false;

    if (reply != nullptr && (rl_redis_error_is(reply, "NOSCRIPT") || rl_redis_error_is(reply, "ERR Function not found"))) {
        rl_redis_reload_code(node);  // nothing ran: the same call again, after the load
        retry_on = node;
    } else if (reply != nullptr && redis->cluster && (rl_redis_error_is(reply, "MOVED ") || rl_redis_error_is(reply, "ASK "))) {
        retry_on = rl_cluster_redirect(redis, reply, &ask);
        rl_metrics_redirect(redis->conn.metrics, ask);
    } else if (reply != nullptr && take_reply(call, reply)) {
        call_settled(call);
        return;
    }

    if (retry_on != nullptr && ++call->redirects <= kMaxRedirects) {
        static const char kAsking[] = "*1\r\n$6\r\nASKING\r\n";
        call->node = retry_on;
        bool asked = !ask || rl_redis_send(retry_on, reinterpret_cast<const u_char*>(kAsking), sizeof(kAsking) - 1,
                                           [](rl_conn_op_t*, redisReply*) noexcept {}, redis) != nullptr;
        if (asked && send_call(call)) return;
    }
    if (reply != nullptr && redis->cluster) rl_cluster_refresh_soon(redis);
    if (reply != nullptr) {
        rl_metrics_redis_error(redis->conn.metrics, reply->type == REDIS_REPLY_ERROR ? RL_REDIS_ERR_ERROR_REPLY
                                                                                     : RL_REDIS_ERR_PROTOCOL);
    }
    log_sync(zs, node, "failed (its keys go again in the next round)", reply);
    call_failed(call);
    call_settled(call);
}

// The batch's keys in calls: per cluster slot (a script's keys share one), kItemsPerCall at most.
bool plan_calls(rl_sync_batch_t* b) {
    rl_redis_t* redis = b->zs->redis;
    if (redis->cluster) {
        std::string_view prefix = rl_sv(redis->prefix), name = rl_sv(b->zs->zone->name);
        char key[512];
        if (rl::redis_key_max_len(prefix, name) > sizeof(key)) return false;
        for (size_t i = 0; i < b->nitems; i++) {
            rl_sync_item_t& it = b->items[i];
            size_t len = rl::redis_key(key, prefix, name, it.si.hash, it.si.policy->algo);
            it.slot = rl::cluster_slot(std::string_view(key, len));
        }
        std::sort(b->items, b->items + b->nitems,
                  [](const rl_sync_item_t& x, const rl_sync_item_t& y) { return x.slot < y.slot; });
    }
    size_t most = b->nitems;  // calls at most: one per key
    b->calls = static_cast<rl_sync_call_t*>(ngx_calloc(most * sizeof(rl_sync_call_t), g_log));
    if (b->calls == nullptr) return false;
    for (size_t i = 0; i < b->nitems;) {
        rl_sync_call_t* call = &b->calls[b->ncalls++];
        call->batch = b;
        call->first = i;
        call->slot = b->items[i].slot;
        while (i < b->nitems && i - call->first < kItemsPerCall && b->items[i].slot == call->slot) i++;
        call->n = i - call->first;
        call->node = redis->cluster ? rl_cluster_route(redis, call->slot) : redis->nodes[0];
    }
    return true;
}

// Sends every call of a batch; each has an outcome later, or fails now.
void send_batch(rl_sync_batch_t* b) {
    if (b->nitems == 0 || !plan_calls(b)) {
        if (b->nitems > 0) {
            rl_sync_call_t all{b, 0, b->nitems, nullptr, 0, 0, 0};
            call_failed(&all);
        }
        batch_done(b);
        return;
    }
    b->pending = b->ncalls + 1;  // + 1 until all are sent: no outcome ends the batch early
    bool unsent = false;
    for (size_t c = 0; c < b->ncalls; c++) {
        if (send_call(&b->calls[c])) continue;
        unsent = true;
        call_failed(&b->calls[c]);
        b->pending--;
    }
    if (unsent) log_sync(b->zs, nullptr, "not sent: Redis unavailable (its keys go again in the next round)", nullptr);
    call_settled(&b->calls[0]);  // the + 1
}

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
        rl_redis_reload_code(node);
    }
    log_sync(zs, node, "heartbeat failed", reply);
}

// This host in the zone's set of hosts, and how many there are (a lease's fair share).
void send_heartbeat(rl_sync_zone_t* zs) {
    if (zs->heartbeat_pending) return;
    rl_redis_t* redis = zs->redis;
    rl_sync_shm_t* h = zs->zone->sync_shm;
    std::string_view prefix = rl_sv(redis->prefix), name = rl_sv(zs->zone->name);
    std::string_view id(reinterpret_cast<const char*>(h->host_id), h->host_id_len);
    rl_redis_node_t* node = redis->nodes[0];
    if (redis->cluster) {
        char key[512];
        if (rl::hosts_key_len(prefix, name) > sizeof(key)) return;  // prefix and name are short in practice
        node = rl_cluster_route(redis, rl::cluster_slot(std::string_view(key, rl::hosts_key(key, prefix, name))));
    }
    // Hosts not seen for three intervals (and a second) are gone.
    int64_t window = 3 * zs->zone->sync_us + 1000000;
    rl::CommandScript script = rl_redis_script(node);
    size_t len = rl::hosts_command_len(script, false, prefix, name, id, window, 0);
    auto* buf = static_cast<char*>(rl_redis_scratch(redis, len));
    if (buf == nullptr) return;
    len = rl::write_hosts_command(buf, script, false, prefix, name, id, window, 0);
    zs->heartbeat_pending = rl_redis_send(node, reinterpret_cast<u_char*>(buf), len, on_heartbeat, zs) != nullptr;
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
    uint32_t* keep = nullptr;  // refs to list again
    size_t nkeep = 0, keep_cap = 0;
    uint32_t taken = 0;
    int64_t local = now_us();
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
            const rl::Policy* p = policy_for(zone, slot->algo, k->burst);
            if (p == nullptr) {  // an algorithm this configuration no longer applies
                k->unsent = rl::Delta{};
                continue;
            }
            rl::SyncItem si;
            si.delta = k->unsent;
            if (lease) {
                k->rate = k->spent;
                k->spent = 0;
                int64_t usable = rl::lease_usable(k->lease, *p, now);
                if (k->lease.units > 0 && (final || now - k->used_at >= 2 * zone->sync_us)) {
                    si.give_back = k->lease.units;  // unspent for two intervals: others may need it
                    si.give_back_at = k->lease.at;
                    si.give_back_top = k->lease.top;
                    k->lease = rl::Lease{};
                } else if (k->rate > 0 && usable < k->rate && (k->asked_at == 0 || now - k->asked_at >= kStaleAsk)) {
                    // Ask ahead: two intervals at the recent rate. Not beside an ask in flight:
                    // grants answered out of order stack lower than they are.
                    si.want = 2 * k->rate - usable;
                    k->asked_at = now;
                }
                if (k->lease.units > 0) {
                    if (nkeep == keep_cap) {
                        size_t cap = keep_cap ? keep_cap * 2 : 64;
                        auto* more = static_cast<uint32_t*>(ngx_alloc(cap * sizeof(uint32_t), g_log));
                        if (more != nullptr) {
                            if (nkeep) ngx_memcpy(more, keep, nkeep * sizeof(uint32_t));
                            ngx_free(keep);
                            keep = more;
                            keep_cap = cap;
                        }
                    }
                    if (nkeep < keep_cap) keep[nkeep++] = ref;
                }
            }
            if (si.delta.empty() && si.want == 0 && si.give_back == 0) continue;
            rl_sync_item_t* it = item_push(b, zs, slot, p);
            if (it == nullptr) {  // out of memory: the key stays for the next round
                if (si.give_back > 0) k->lease = rl::Lease{si.give_back, si.give_back_top, si.give_back_at};
                rl_sync_mark(h, ref);
                break;
            }
            k->unsent = rl::Delta{};
            it->si.delta = si.delta;
            it->si.want = si.want;
            it->si.give_back = si.give_back;
            it->si.give_back_at = si.give_back_at;
            it->si.give_back_top = si.give_back_top;
        }
        bool more = h->ndirty > 0 && taken < h->cap && n == kTakePerLock;
        if (!more) {
            for (size_t i = 0; i < nkeep; i++) rl_sync_mark(h, keep[i]);
        }
        ngx_shmtx_unlock(&zone->shpool->mutex);
        if (!more) break;
    }
    ngx_free(keep);
}

void start_round(rl_sync_zone_t* zs, bool final) {
    rl_sync_batch_t* b = batch_new(zs, false);
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
    send_batch(b);
}

void wake_waiters(rl_sync_batch_t* b);

void batch_done(rl_sync_batch_t* b) {
    rl_sync_zone_t* zs = b->zs;
    rl_sync_shm_t* h = zs->zone->sync_shm;
    ngx_shmtx_lock(&zs->zone->shpool->mutex);
    if (!b->lease_ask && h->syncing_pid == ngx_pid) h->syncing_since = 0;
    if (!b->lease_ask) h->rounds++;
    h->keys_sent += b->nitems;
    if (b->failed) {
        h->down = 1;
        h->failures++;
    } else if (b->nitems > 0) {
        h->down = 0;
        h->last_ok = ngx_current_msec;
    }
    ngx_shmtx_unlock(&zs->zone->shpool->mutex);
    if (b->lease_ask) {
        ngx_queue_remove(&b->link);
        wake_waiters(b);
    } else if (zs->round == b) {
        zs->round = nullptr;
    }
    batch_free(b);
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

// ---- lease asks --------------------------------------------------------------------------

void wake_waiters(rl_sync_batch_t* b) {
    for (size_t w = 0; w < b->nwaiters; w++) {
        rl_ctx_t* ctx = b->waiters[w];
        if (ctx == nullptr) continue;
        for (ngx_uint_t i = 0; i < ctx->nresults; i++) {
            rl_result_t& res = ctx->results[i];
            if (res.applied->zone->sync != b->zs || !(res.sync & RL_SYNC_WAIT)) continue;
            int waited = (res.sync & RL_SYNC_WAITED) ? RL_SYNC_WAITED2 : RL_SYNC_WAITED;
            const rl_sync_item_t* it = find_item(b, res.hash, static_cast<uint8_t>(res.applied->policy.algo));
            int granted = it != nullptr && it->need_granted && (res.sync & RL_SYNC_NEEDED) ? RL_SYNC_GRANTED : 0;
            res.sync = static_cast<uint8_t>((res.sync & ~(RL_SYNC_WAIT | RL_SYNC_NEEDED)) | waited | granted |
                                            (b->failed ? RL_SYNC_FAILED : 0));
        }
        if (ctx->lease_waits > 0 && --ctx->lease_waits == 0) rl_lease_finished(ctx);
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
        if (res.applied->zone->sync != b->zs || !(res.sync & RL_SYNC_NEEDED)) continue;
        res.sync &= ~RL_SYNC_NEEDED;
        rl_sync_item_t* it = find_item(b, res.hash, static_cast<uint8_t>(res.applied->policy.algo));
        if (it == nullptr || it->si.need < res.cost) continue;
        if (!it->need_granted) {
            it->si.need -= res.cost;
        } else if (rl::Slot* slot = item_slot(zone, *it)) {
            rl_sync_key(slot)->lease.units += res.cost;  // as rl_sync_release
        }
    }
    ngx_shmtx_unlock(&zone->shpool->mutex);
}

// A request applies a zone once: it is a waiter of the zone's ask once.
bool add_waiter(rl_sync_batch_t* b, rl_ctx_t* ctx) {
    if ((b->nwaiters & (b->nwaiters - 1)) == 0) {  // 0, 1, 2, 4...: grow to the next power of two
        size_t cap = b->nwaiters ? b->nwaiters * 2 : 4;
        auto* more = static_cast<rl_ctx_t**>(ngx_alloc(cap * sizeof(rl_ctx_t*), g_log));
        if (more == nullptr) return false;
        if (b->nwaiters) ngx_memcpy(more, b->waiters, b->nwaiters * sizeof(rl_ctx_t*));
        ngx_free(b->waiters);
        b->waiters = more;
    }
    b->waiters[b->nwaiters++] = ctx;
    return true;
}

// A lease ask for one key (zone locked): two intervals at its recent rate (the last round's or
// this one's so far; `need` is added by the caller), and what it admitted while Redis was away.
rl_sync_item_t* ask_item(rl_sync_batch_t* b, rl_sync_zone_t* zs, const rl::KeyHash& hash, uint8_t algo,
                         const rl::Policy* policy, int64_t now) {
    rl::Slot* slot = rl::table_acquire(zs->zone->table, hash, algo, nullptr);
    rl_sync_key_t* k = rl_sync_key(slot);
    rl_sync_item_t* it = item_push(b, zs, slot, policy);
    if (it == nullptr) return nullptr;
    k->burst = policy->burst;
    k->asked_at = now;
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
    int64_t now = now_us() + zone->sync_shm->offset_us;
    // The keys running low first: a request waiting on one of them rides its ask.
    for (size_t i = 0; i < g_nahead; i++) {
        const rl_ahead_t& a = g_ahead[i];
        if (a.zs != zs || find_item(b, a.hash, a.algo) != nullptr) continue;
        if (b == nullptr && (b = batch_new(zs, true)) == nullptr) break;
        ask_item(b, zs, a.hash, a.algo, a.policy, now);
    }
    for (ngx_queue_t* q = ngx_queue_head(&g_waiting); q != ngx_queue_sentinel(&g_waiting); q = ngx_queue_next(q)) {
        rl_ctx_t* ctx = ngx_queue_data(q, rl_ctx_t, lease);
        for (ngx_uint_t i = 0; i < ctx->nresults; i++) {
            rl_result_t& res = ctx->results[i];
            if (res.applied->zone != zone || !(res.sync & RL_SYNC_WAIT)) continue;
            auto algo = static_cast<uint8_t>(res.applied->policy.algo);
            rl_sync_item_t* it = find_item(b, res.hash, algo);
            if (it == nullptr) {
                // One ask at a time per key and host: grants answered out of order would stack
                // lower than they are (and be hard to give back). Beside another worker's ask,
                // the request looks again shortly.
                rl_sync_key_t* k = rl_sync_key(rl::table_acquire(zone->table, res.hash, algo, nullptr));
                if (k->asked_at != 0 && now - k->asked_at < kStaleAsk) {
                    ctx->lease_poll = 1;
                    continue;
                }
                if (b == nullptr && (b = batch_new(zs, true)) == nullptr) break;
                if ((it = ask_item(b, zs, res.hash, algo, &res.applied->policy, now)) == nullptr) continue;
            }
            if (!add_waiter(b, ctx)) continue;  // out of memory: that request falls back
            ctx->lease_waits++;
            // A need beyond the capacity never fits: the requests beyond it spend what the lease
            // gets (or wait again).
            if (it->si.need + res.cost <= res.applied->policy.capacity()) {
                it->si.need += res.cost;
                res.sync |= RL_SYNC_NEEDED;
            }
            if (it->si.want < it->si.need) it->si.want = it->si.need;
        }
    }
    ngx_shmtx_unlock(&zone->shpool->mutex);
    return b;
}

// A request that found another worker's ask in flight looks again (its timeout still runs).
void on_poll(ngx_event_t* ev) noexcept {
    auto* ctx = static_cast<rl_ctx_t*>(ev->data);
    ctx->lease_poll = 0;
    rl_lease_again(ctx);
}

// The end of a loop turn: one ask per lease zone for all the requests that wait on it.
void on_ask(ngx_event_t*) noexcept {
    ngx_queue_t ready;
    ngx_queue_init(&ready);
    for (ngx_uint_t z = 0; z < g_nzones; z++) {
        if (g_zones[z]->zone->sync_mode != RL_SYNC_LEASE) continue;
        rl_sync_batch_t* b = lease_batch(g_zones[z]);
        if (b != nullptr) {
            ngx_queue_insert_tail(&ready, &b->link);
        }
    }
    g_nahead = 0;
    // Every request now knows how many asks it waits for (none: decided at once, on the fallback).
    while (!ngx_queue_empty(&g_waiting)) {
        ngx_queue_t* q = ngx_queue_head(&g_waiting);
        ngx_queue_remove(q);
        rl_ctx_t* ctx = ngx_queue_data(q, rl_ctx_t, lease);
        ctx->lease.next = nullptr;
        if (ctx->lease_waits == 0 && ctx->lease_poll) {
            ngx_add_timer(&ctx->poll, kPollMs);
        } else if (ctx->lease_waits == 0) {
            rl_lease_finished(ctx);
        }
    }
    while (!ngx_queue_empty(&ready)) {
        ngx_queue_t* q = ngx_queue_head(&ready);
        ngx_queue_remove(q);
        ngx_queue_insert_tail(&g_asks, q);
        send_batch(ngx_queue_data(q, rl_sync_batch_t, link));
    }
}

}  // namespace

// ---- the shared-memory header ------------------------------------------------------------

size_t rl_sync_area_bytes(uint32_t cap) noexcept {
    size_t bytes = sizeof(rl_sync_shm_t) + size_t{cap} * (sizeof(uint32_t) + sizeof(uint8_t));
    return (bytes + 7) & ~size_t{7};
}

void rl_sync_format(rl_sync_shm_t* h, uint32_t cap, ngx_log_t* log) noexcept {
    ngx_memzero(h, rl_sync_area_bytes(cap));
    h->magic = kRlSyncMagic;
    h->cap = cap;
    h->hosts = 1;
    h->last_ok = ngx_current_msec;  // not "unavailable" before the first round
    // This host among the others in Redis: its name and a random tag, kept across reloads.
    char name[32] = "nginx";
    if (gethostname(name, sizeof(name)) != 0) ngx_memcpy(name, "nginx", 6);
    name[sizeof(name) - 1] = '\0';
    uint64_t tag = 0;
    if (getrandom(&tag, sizeof(tag), GRND_NONBLOCK) != static_cast<ssize_t>(sizeof(tag))) {
        tag = static_cast<uint64_t>(ngx_pid) * 0x9e3779b97f4a7c15ULL ^ static_cast<uint64_t>(now_us());
    }
    size_t namelen = rl::log_text(name, ngx_strlen(name), reinterpret_cast<char*>(h->host_id), 24);
    u_char* end = ngx_snprintf(h->host_id + namelen, kRlHostIdLen - namelen, "-%016uxL", tag);
    h->host_id_len = static_cast<uint32_t>(end - h->host_id);
    (void)log;
}

bool rl_sync_compatible(const rl_sync_shm_t* h, uint32_t cap) noexcept {
    return h != nullptr && h->magic == kRlSyncMagic && h->cap == cap;
}

// ---- the worker's engine -------------------------------------------------------------------

ngx_int_t rl_sync_init_process(ngx_cycle_t* cycle) noexcept {
    if (ngx_process != NGX_PROCESS_WORKER && ngx_process != NGX_PROCESS_SINGLE) return NGX_OK;
    auto* mcf = static_cast<rl_main_conf_t*>(ngx_http_cycle_get_module_main_conf(cycle, ngx_http_ratelimit_module));
    if (mcf == nullptr) return NGX_OK;
    g_log = cycle->log;
    ngx_queue_init(&g_waiting);
    ngx_queue_init(&g_asks);
    g_ask.handler = on_ask;
    g_ask.log = cycle->log;
    auto** zones = static_cast<rl_zone_t**>(mcf->zones.elts);
    g_zones = static_cast<rl_sync_zone_t**>(ngx_calloc(mcf->zones.nelts * sizeof(rl_sync_zone_t*) + 1, cycle->log));
    if (g_zones == nullptr) return NGX_ERROR;
    for (ngx_uint_t i = 0; i < mcf->zones.nelts; i++) {
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
        g_zones[g_nzones++] = zs;
        ngx_add_timer(&zs->tick, 1 + static_cast<ngx_msec_t>(ngx_random()) % zs->tick_ms);
    }
    return NGX_OK;
}

void rl_sync_exit_process(ngx_cycle_t*) noexcept {
    for (ngx_uint_t z = 0; z < g_nzones; z++) {
        if (g_zones[z]->tick.timer_set) {
            ngx_del_timer(&g_zones[z]->tick);
        }
    }
}

bool rl_sync_lease_wait(rl_ctx_t* ctx) noexcept {
    if (g_nzones == 0) return false;
    for (ngx_uint_t i = 0; i < ctx->nresults; i++) {
        if ((ctx->results[i].sync & RL_SYNC_WAIT) && ctx->results[i].applied->zone->sync == nullptr) return false;
    }
    ngx_queue_insert_tail(&g_waiting, &ctx->lease);
    ctx->lease_waits = 0;
    ctx->lease_poll = 0;
    ctx->poll.handler = on_poll;
    ctx->poll.data = ctx;
    ctx->poll.log = ctx->r->connection->log;
    if (!g_ask.posted) {
        ngx_post_event(&g_ask, &ngx_posted_events);
    }
    return true;
}

void rl_sync_ask_ahead(rl_zone_t* zone, rl::Slot* slot, const rl::Policy* policy, int64_t now) noexcept {
    rl_sync_key_t* k = rl_sync_key(slot);
    if (zone->sync == nullptr || g_nahead == kAheadMax || (k->asked_at != 0 && now - k->asked_at < kStaleAsk)) return;
    k->asked_at = now;  // one ask at a time per key, whichever worker sends it
    g_ahead[g_nahead++] = rl_ahead_t{zone->sync, slot->hash, slot->algo, policy};
    if (!g_ask.posted) {
        ngx_post_event(&g_ask, &ngx_posted_events);
    }
}

void rl_sync_lease_cancel(rl_ctx_t* ctx) noexcept {
    if (ctx->poll.timer_set) {
        ngx_del_timer(&ctx->poll);
    }
    ctx->lease_poll = 0;
    if (ctx->lease.next != nullptr) {
        ngx_queue_remove(&ctx->lease);
        ctx->lease.next = nullptr;
    }
    if (ctx->lease_waits == 0) return;
    for (ngx_queue_t* q = ngx_queue_head(&g_asks); q != ngx_queue_sentinel(&g_asks); q = ngx_queue_next(q)) {
        rl_sync_batch_t* b = ngx_queue_data(q, rl_sync_batch_t, link);
        bool waited = false;
        for (size_t w = 0; w < b->nwaiters; w++) {
            if (b->waiters[w] != ctx) continue;
            b->waiters[w] = nullptr;
            waited = true;
        }
        if (waited) unneed(b, ctx);
    }
    ctx->lease_waits = 0;
}

void rl_sync_exit_wake(rl_zone_t* zone) noexcept {
    rl_sync_zone_t* zs = zone->sync;
    if (zs == nullptr || !(ngx_exiting || ngx_quit) || zs->exit_at == 0 || zs->tick.timer_set) return;
    if (ngx_current_msec - zs->exit_at < kExitWait && zs->exit_rounds < kExitRounds) ngx_add_timer(&zs->tick, 10);
}

void rl_sync_lease_drop(rl_ctx_t* ctx) noexcept {
    for (ngx_uint_t i = 0; i < ctx->nresults; i++) {
        rl_result_t& res = ctx->results[i];
        if (!(res.sync & RL_SYNC_GRANTED)) continue;
        rl_zone_t* zone = res.applied->zone;
        ngx_shmtx_lock(&zone->shpool->mutex);
        rl::Slot* slot = rl::table_acquire(zone->table, res.hash, static_cast<uint8_t>(res.applied->policy.algo), nullptr);
        if (slot != nullptr) rl_sync_release(res, slot);
        ngx_shmtx_unlock(&zone->shpool->mutex);
        res.sync &= ~RL_SYNC_GRANTED;
    }
}
