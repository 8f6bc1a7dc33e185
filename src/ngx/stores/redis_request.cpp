// A request's Redis side: its checks grouped into calls (one per server, or per slot of a
// cluster). Calls wait on their node until the end of the event-loop turn; then all the calls
// queued on a node go out as ONE script run (a batch: each request is a group, all or nothing
// on its own), so Redis runs one script for many requests. Replies are decoded into the
// requests' results; refunds when a request is rejected after all.
#include "ngx/stores/redis_request.h"
#include "ngx/stores/redis_settle.h"

#include "core/wire/redis_command.h"
#include "core/wire/redis_keys.h"
#include "ngx/metrics/metrics.h"
#include "ngx/redis/cluster.h"
#include "ngx/stores/redis_held.h"
#include "ngx/redis/node.h"
#include "ngx/stores/redis_rejected.h"
#include "ngx/stores/redis_state.h"
#include "ngx/redis/resend.h"

namespace {

constexpr ngx_uint_t kMaxGroups = 64;  // requests per script run: bounds its reply and its time in Redis
// Script runs in flight per node before new calls wait for one to come back. Under load, calls
// then gather into fewer, larger runs (Redis's time per request falls); when Redis is idle a
// call goes at once, as before. Two: one run is read or written while the next is in Redis.
constexpr ngx_uint_t kMaxBatchesInFlight = 2;

struct rl_batch_t;
struct rl_call_t;

// What the store keeps for a request while its calls are out (ctx->store_data[RL_STORE_ID_REDIS]).
struct rl_calls_t {
    rl_call_t* calls;
    ngx_uint_t ncalls;
    ngx_uint_t waiting;  // calls still in flight
};

// One call to Redis: the checks of one request that live on one server (one slot of a
// cluster), decided together, all or nothing, as one group of a batch.
struct rl_call_t {
    rl_ctx_t* ctx;
    rl_redis_t* redis;
    rl_redis_node_t* node;
    ngx_uint_t* checks;       // indices into ctx->results
    ngx_uint_t nchecks;
    rl::RedisCheck* rchecks;  // the same, as the Redis command takes them (request pool)
    ngx_queue_t queue;        // in node->queued until the end of the event-loop turn
    rl_batch_t* batch;        // while in flight
    uint16_t index;           // its group in the batch
    uint16_t slot;            // cluster: the slot of its keys
    uint8_t state;            // RL_CALL_*
    uint8_t tries;            // retries so far (rl_node_retry_left)
    uint8_t solo;             // cluster: sent in a batch of its own (its slot is migrating)
    int64_t at;               // Redis's time of the decision
    uint64_t seq;             // its in-flight slots' member in Redis: "<owner>.<seq>" (redis_held.h)
    rl_held_t* held;          // the slots the request holds once admitted, until it ends
};

enum { RL_CALL_PENDING = 0, RL_CALL_DONE, RL_CALL_FAILED };

// rl_result_t::flags (redis_rejected.h): decided by a remembered rejection; asks Redis for the
// host while the others are rejected from memory (RL_REJECTED_ASK), until its reply.
constexpr uint8_t kRejectedHere = 4;
constexpr uint8_t kAsksForHost = 8;

// A result that asked for the host goes without an answer: the others ask again.
void release_ask(rl_result_t& res) {
    if (!(res.flags & kAsksForHost)) return;
    res.flags &= ~kAsksForHost;
    rl_rejected_release(res);
}

rl_calls_t* calls_of(rl_ctx_t* ctx) { return static_cast<rl_calls_t*>(ctx->store_data[RL_STORE_ID_REDIS]); }

// What a timed-out call needs for a refund if Redis admits it late (the request is gone).
struct rl_late_t {
    ngx_uint_t nchecks;
    rl::RedisCheck checks[1];  // nchecks of them; zone names live in the configuration, policies
                               // after the checks (a tier's is the request's own)
};

// One script run in flight: the calls it carries, in group order.
struct rl_batch_t {
    ngx_queue_t link;  // in the free list
    rl_redis_t* redis;
    ngx_uint_t n;
    uint16_t sizes[kMaxGroups];    // each group's number of checks, to read the reply
    rl_call_t* calls[kMaxGroups];  // nullptr once a call is abandoned
    rl_late_t* late[kMaxGroups];   // an abandoned call's refund, armed if its request was rejected
    int64_t sent;                  // when it was sent, on rl_rejected_now's clock: a Retry-After
                                   // of its reply counts from no later than this
};

// The core's description of a call's checks, into `checks` (room for call->nchecks).
rl::RedisCheck* checks_of(rl_call_t* call, rl::RedisCheck* checks) {
    if (checks == nullptr) return nullptr;
    for (ngx_uint_t i = 0; i < call->nchecks; i++) {
        const rl_result_t& res = call->ctx->results[call->checks[i]];
        checks[i] = rl::RedisCheck{};
        checks[i].zone = rl_sv(res.applied->zone->name);
        checks[i].hash = res.hash;
        checks[i].policy = res.policy;
        checks[i].cost = res.cost;
        checks[i].at = res.at;
        checks[i].admitted_at = res.at;  // a refund's: dropped if the key was reset since
        checks[i].owner = rl_held_owner();
        checks[i].seq = call->seq;
    }
    return checks;
}

rl_redis_node_t* node_of(rl_conn_op_t* op) { return static_cast<rl_redis_node_t*>(op->conn->data); }

rl_batch_t* batch_alloc(rl_redis_t* redis) {
    if (!ngx_queue_empty(&redis->store->free_batches)) {
        ngx_queue_t* q = ngx_queue_head(&redis->store->free_batches);
        ngx_queue_remove(q);
        return ngx_queue_data(q, rl_batch_t, link);
    }
    return static_cast<rl_batch_t*>(ngx_alloc(sizeof(rl_batch_t), redis->conn.log));
}

void batch_free(rl_batch_t* batch) {
    for (ngx_uint_t i = 0; i < batch->n; i++) ngx_free(batch->late[i]);
    ngx_queue_insert_head(&batch->redis->store->free_batches, &batch->link);
}

void call_failed(rl_call_t* call) {
    call->state = RL_CALL_FAILED;
    for (ngx_uint_t i = 0; i < call->nchecks; i++) {
        rl_result_t& res = call->ctx->results[call->checks[i]];
        res.store = RL_STORE_FAILED;
        release_ask(res);
    }
}

// The last call of a request has an outcome: the request's wait for this store is over.
void call_settled(rl_call_t* call) {
    rl_ctx_t* ctx = call->ctx;
    if (--calls_of(ctx)->waiting == 0) ctx->resume(ctx, true);
}

void call_fails_now(rl_call_t* call) {
    call_failed(call);
    call_settled(call);
}

// Queues a call on its node for the end of this event-loop turn. False if the node cannot
// take it now (down, backing off, too much in flight): on_error applies at once.
bool queue_call(rl_call_t* call, bool first) {
    rl_redis_node_t* node = call->node;
    if (!rl_node_can_take(node, 1)) return false;
    if (first) {
        ngx_queue_insert_head(&node->queued, &call->queue);
    } else {
        ngx_queue_insert_tail(&node->queued, &call->queue);
    }
    node->nqueued++;
    call->batch = nullptr;
    rl_conn_schedule_flush(&node->conn);
    return true;
}

void on_batch_reply(rl_conn_op_t* op, redisReply* reply) noexcept;
bool on_batch_ints(rl_conn_op_t* op, const int64_t* values, size_t n) noexcept;

// Sends calls[0..n) as one script run on `node` (after ASKING when `asking`). Failed calls
// settle at once.
void send_batch(rl_redis_node_t* node, rl_call_t** calls, ngx_uint_t n, bool asking) {
    rl_redis_t* redis = node->redis;
    rl::RedisGroup groups[kMaxGroups] = {};  // {}: quiets gcc -O; only [0, n) is read
    for (ngx_uint_t i = 0; i < n; i++) groups[i] = rl::RedisGroup{calls[i]->rchecks, calls[i]->nchecks};
    std::string_view prefix = rl_sv(redis->prefix);
    size_t len = rl::batch_command_bound(prefix, groups, n);  // cheaper than measuring exactly
    auto* buf = static_cast<char*>(rl_redis_scratch(redis, len));
    rl_batch_t* batch = buf ? batch_alloc(redis) : nullptr;
    rl_conn_op_t* op = nullptr;
    if (batch != nullptr) {
        len = rl::write_batch_command(buf, rl_node_script(node), false, prefix, groups, n, 0);
        op = rl_node_send(node, reinterpret_cast<u_char*>(buf), len, on_batch_reply, batch, n, asking);
        if (op != nullptr) rl_conn_expect_ints(op, on_batch_ints, rl::batch_reply_len(groups, n));
    }
    if (op == nullptr) {
        if (batch != nullptr) {
            ngx_queue_insert_head(&redis->store->free_batches, &batch->link);
        }
        for (ngx_uint_t i = 0; i < n; i++) call_fails_now(calls[i]);
        return;
    }
    node->batches++;
    batch->redis = redis;
    batch->n = n;
    batch->sent = rl_rejected_now();
    for (ngx_uint_t i = 0; i < n; i++) {
        batch->calls[i] = calls[i];
        batch->sizes[i] = static_cast<uint16_t>(calls[i]->nchecks);
        batch->late[i] = nullptr;
        calls[i]->batch = batch;
        calls[i]->index = static_cast<uint16_t>(i);
    }
    rl_metrics_batch(redis->conn.metrics, batch->sizes, n);
}

// A call that came back unanswered for a reason Redis can fix at once goes again: at the head
// of its node's queue, or, after an ASK, at once after ASKING (which applies to the next
// command on that connection only, so it cannot wait behind other calls).
void retry_call(rl_call_t* call, const rl_retry_t& retry) {
    call->node = retry.node;
    if (!rl_node_retry_left(&call->tries)) {
        call_fails_now(call);
    } else if (retry.ask) {
        send_batch(call->node, &call, 1, true);
    } else if (!queue_call(call, true)) {
        call_fails_now(call);
    }
}

void send_refund(rl_redis_t* redis, rl_redis_node_t* node, const rl::RedisCheck* checks, ngx_uint_t n);

// Distributes a decided batch to its calls; late admissions of abandoned calls are refunded.
// Its reply's integers are `ints`, or else `reply`'s elements. False, having done nothing, if
// they do not decode.
bool take_batch(rl_batch_t* batch, const redisReply* reply, const int64_t* ints, size_t nints, rl_redis_node_t* node) {
    rl_redis_t* redis = batch->redis;
    rl::RedisGroup groups[kMaxGroups];
    size_t total = 0;
    for (ngx_uint_t i = 0; i < batch->n; i++) {
        groups[i] = rl::RedisGroup{nullptr, batch->sizes[i]};  // an abandoned call's request may be gone
        total += batch->sizes[i];
    }
    if (ints == nullptr && reply->type != REDIS_REPLY_ARRAY) return false;
    size_t nvalues = ints != nullptr ? nints : reply->elements;
    size_t copied = ints != nullptr ? 0 : nvalues;
    size_t bytes = copied * sizeof(int64_t) + total * sizeof(rl::Decision) + kMaxGroups * sizeof(bool);
    auto* mem = static_cast<u_char*>(rl_redis_scratch(redis, bytes));
    if (mem == nullptr) return false;
    auto* copy = reinterpret_cast<int64_t*>(mem);
    auto* decisions = reinterpret_cast<rl::Decision*>(copy + copied);
    auto* admitted = reinterpret_cast<bool*>(decisions + total);
    for (size_t i = 0; i < copied; i++) {
        if (reply->element[i]->type != REDIS_REPLY_INTEGER) return false;
        copy[i] = reply->element[i]->integer;
    }
    const int64_t* values = ints != nullptr ? ints : copy;
    int64_t now = 0;
    if (!rl::decode_batch_reply(values, nvalues, groups, batch->n, decisions, admitted, &now)) return false;
    rl_held_clock(redis, now);

    size_t at = 0;
    int64_t local_now = batch->sent;
    for (ngx_uint_t g = 0; g < batch->n; g++) {
        rl_call_t* call = batch->calls[g];
        if (call != nullptr) {
            call->at = now;
            for (ngx_uint_t i = 0; i < call->nchecks; i++) {
                rl_result_t& res = call->ctx->results[call->checks[i]];
                res.decision = decisions[at + i];
                res.decision.limit = res.policy->requests;
                res.at = now;
                res.consumed = admitted[g] && res.cost > 0;
                rl_rejected_remember(res, local_now, res.flags & kAsksForHost);
                res.flags &= ~kAsksForHost;
            }
            call->batch = nullptr;
            call->state = RL_CALL_DONE;
            call_settled(call);
        } else if (batch->late[g] != nullptr && admitted[g]) {
            rl_late_t* late = batch->late[g];
            for (ngx_uint_t i = 0; i < late->nchecks; i++) late->checks[i].at = late->checks[i].admitted_at = now;
            send_refund(redis, node, late->checks, late->nchecks);
        }
        at += groups[g].n;
    }
    return true;
}

// A node's count of batches in flight, now that one came back.
void batch_back(rl_redis_node_t* node) {
    if (node->batches > 0) node->batches--;
    if (node->nqueued > 0) rl_conn_schedule_flush(&node->conn);  // calls held back by kMaxBatchesInFlight
}

// The reply read straight as integers (the common case); one that does not decode goes to
// on_batch_reply as hiredis reads it, which says why.
bool on_batch_ints(rl_conn_op_t* op, const int64_t* values, size_t n) noexcept {
    auto* batch = static_cast<rl_batch_t*>(op->data);
    rl_redis_node_t* node = node_of(op);
    if (!take_batch(batch, nullptr, values, n, node)) return false;
    batch_back(node);
    batch_free(batch);
    return true;
}

void on_batch_reply(rl_conn_op_t* op, redisReply* reply) noexcept {
    auto* batch = static_cast<rl_batch_t*>(op->data);
    rl_redis_node_t* node = node_of(op);
    batch_back(node);
    rl_retry_t retry{};
    rl_reply_e verdict = rl_node_reply(node, reply, &retry);
    if (verdict == RL_REPLY_SPLIT && batch->n > 1) {
        // Some of the batch's keys moved and some not: each request on its own is on one side
        // or the other (and gets its own ASK).
        for (ngx_uint_t g = 0; g < batch->n; g++) {
            if (batch->calls[g] != nullptr) batch->calls[g]->solo = 1;
        }
        retry = rl_retry_t{node, false};
        verdict = RL_REPLY_RETRY;
    }
    if (verdict == RL_REPLY_TAKE && take_batch(batch, reply, nullptr, 0, node)) {
        batch_free(batch);
        return;
    }
    if (verdict == RL_REPLY_TAKE || verdict == RL_REPLY_SPLIT) rl_node_reply_failed(node, "check failed", reply);

    // Nothing of this batch ran: retry its live calls, or fail them. In reverse order, so
    // that queueing each one first keeps their order.
    for (ngx_uint_t g = batch->n; g > 0; g--) {
        rl_call_t* call = batch->calls[g - 1];
        if (call == nullptr) continue;
        call->batch = nullptr;
        if (verdict == RL_REPLY_RETRY) {
            retry_call(call, retry);
        } else {
            call_fails_now(call);
        }
    }
    batch_free(batch);
}

// A refund, kept with its bytes until Redis answered it (it follows MOVED / ASK: resend.h).
struct rl_refund_t {
    rl_resend_t cmd;
    u_char bytes[1];
};

void refund_done(rl_resend_t* cmd, rl_redis_node_t* node, const redisReply* reply, bool taken) {
    rl_resend_failed(node, "a refund failed", reply, taken);
    ngx_free(cmd->data);
}

// Fire and forget: the request does not wait for its refund. Refunds are rare: their own
// memory, as the scratch may be holding a reply being read.
void send_refund(rl_redis_t* redis, rl_redis_node_t* node, const rl::RedisCheck* checks, ngx_uint_t n) {
    std::string_view prefix = rl_sv(redis->prefix);
    size_t len = rl::refund_command_len(prefix, checks, n, rl_node_script(node));
    auto* refund = static_cast<rl_refund_t*>(ngx_alloc(sizeof(rl_refund_t) + len, redis->conn.log));
    if (refund == nullptr) return;
    len = rl::write_refund_command(reinterpret_cast<char*>(refund->bytes), prefix, checks, n, rl_node_script(node));
    refund->cmd = rl_resend_t{refund_done, refund, refund->bytes, len, 1, 0};
    if (!rl_resend_send(&refund->cmd, node)) {
        rl_redis_log_error(&redis->conn, 0, "ratelimit redis \"%V\": a refund could not be sent", &redis->name);
        ngx_free(refund);
    }
}

// A call that timed out (or whose request went away) is still in flight. If Redis admits it
// late, what it consumed must be given back: all of it when the request was rejected
// meanwhile (`slots_only` false), else its in-flight slots only (nothing else holds them: the
// request is gone or was let through without them). Its batch keeps what that needs.
void arm_late_refund(rl_call_t* call, bool slots_only) {
    rl_batch_t* batch = call->batch;
    if (batch == nullptr || batch->late[call->index] != nullptr) return;
    ngx_uint_t n = 0;
    for (ngx_uint_t i = 0; i < call->nchecks; i++) {
        n += !slots_only || call->rchecks[i].policy->algo == rl::Algo::concurrency;
    }
    if (n == 0) return;
    size_t bytes = sizeof(rl_late_t) + n * (sizeof(rl::RedisCheck) + sizeof(rl::Policy));
    auto* late = static_cast<rl_late_t*>(ngx_alloc(bytes, call->redis->conn.log));
    if (late == nullptr) return;
    late->nchecks = n;
    auto* policies = reinterpret_cast<rl::Policy*>(late->checks + n);
    ngx_uint_t k = 0;
    for (ngx_uint_t i = 0; i < call->nchecks; i++) {
        if (slots_only && call->rchecks[i].policy->algo != rl::Algo::concurrency) continue;
        late->checks[k] = call->rchecks[i];
        policies[k] = *call->rchecks[i].policy;
        late->checks[k].policy = &policies[k];
        k++;
    }
    batch->late[call->index] = late;
}


// The call a result's check goes into, created on first use: one per ratelimit_redis, and
// in a cluster one per slot (a script's keys must share a slot).
rl_call_t* call_for(rl_calls_t* cs, rl_ctx_t* ctx, const rl_result_t& res, uint16_t slot) {
    rl_redis_t* redis = res.applied->zone->redis;
    for (ngx_uint_t k = 0; k < cs->ncalls; k++) {
        if (cs->calls[k].redis == redis && cs->calls[k].slot == slot) return &cs->calls[k];
    }
    rl_call_t* call = &cs->calls[cs->ncalls++];
    call->ctx = ctx;
    call->redis = redis;
    call->slot = slot;
    call->node = redis->cluster ? rl_cluster_route(redis, slot) : redis->nodes.elts[0];
    call->seq = rl_held_next_seq();
    return call;
}

// Whether a limit of the request is one Redis rejected and would still reject: the request is
// then rejected without a call, its other Redis limits not asked (all or nothing).
bool rejected_here(rl_ctx_t* ctx) {
    int64_t now = 0;  // read only if needed
    bool rejected = false;
    for (ngx_uint_t i = 0; i < ctx->nresults; i++) {
        rl_result_t& res = ctx->results[i];
        if (res.store != RL_STORE_REDIS) continue;
        rl_rejected_e found = rl_rejected_check(res, &now);
        if (found == RL_REJECTED_HIT) {
            res.flags |= kRejectedHere;
            rejected = true;
        } else if (found == RL_REJECTED_ASK) {
            res.flags |= kAsksForHost;
        }
    }
    if (!rejected) return false;
    for (ngx_uint_t i = 0; i < ctx->nresults; i++) {
        rl_result_t& res = ctx->results[i];
        if (res.store == RL_STORE_REDIS && !(res.flags & kRejectedHere)) {
            res.store = RL_STORE_SKIPPED;
            release_ask(res);  // not asked after all
        }
    }
    return true;
}

// Sends the request's Redis checks; returns the number of calls now in flight.
ngx_uint_t redis_remote(rl_ctx_t* ctx) noexcept {
    ngx_uint_t n = ctx->nresults, nredis = 0;
    bool cluster = false;
    for (ngx_uint_t i = 0; i < n; i++) {
        const rl_result_t& res = ctx->results[i];
        if (res.store != RL_STORE_REDIS) continue;
        nredis++;
        cluster = cluster || res.applied->zone->redis->cluster;
    }
    if (nredis == 0) return 0;  // (every key of its zones was empty)
    if (rejected_here(ctx)) return 0;
    // One allocation: at most one call per result, each result's index in exactly one call, the
    // checks as the command takes them, and in a cluster each result's slot.
    size_t calls_bytes = sizeof(rl_calls_t) + n * sizeof(rl_call_t);
    size_t bytes = calls_bytes + n * (sizeof(ngx_uint_t) + sizeof(rl::RedisCheck)) + (cluster ? n * sizeof(uint16_t) : 0);
    auto* cs = static_cast<rl_calls_t*>(ngx_palloc(ctx->pool, bytes));
    if (cs == nullptr) {
        for (ngx_uint_t i = 0; i < n; i++) {
            if (ctx->results[i].store != RL_STORE_REDIS) continue;
            ctx->results[i].store = RL_STORE_FAILED;
            release_ask(ctx->results[i]);
        }
        return 0;
    }
    ngx_memzero(cs, calls_bytes);
    cs->calls = reinterpret_cast<rl_call_t*>(cs + 1);
    auto* indices = reinterpret_cast<ngx_uint_t*>(cs->calls + n);
    static_assert(alignof(rl::RedisCheck) <= alignof(ngx_uint_t), "the checks follow the indices");
    auto* rchecks = reinterpret_cast<rl::RedisCheck*>(indices + n);
    uint16_t* slots = cluster ? reinterpret_cast<uint16_t*>(rchecks + n) : nullptr;
    ctx->store_data[RL_STORE_ID_REDIS] = cs;
    for (ngx_uint_t i = 0; slots != nullptr && i < n; i++) {
        const rl_result_t& res = ctx->results[i];
        slots[i] = res.store == RL_STORE_REDIS && res.applied->zone->redis->cluster ? rl_redis_slot_of(res) : 0;
    }

    // One call per ratelimit_redis (per slot in a cluster): its checks in one group, all or
    // nothing. First count each call's checks, then give each call its run of indices.
    for (int pass = 0; pass < 2; pass++) {
        for (ngx_uint_t i = 0; i < n; i++) {
            rl_result_t& res = ctx->results[i];
            if (res.store != RL_STORE_REDIS) continue;
            rl_call_t* call = call_for(cs, ctx, res, slots != nullptr ? slots[i] : 0);
            if (pass == 1) call->checks[call->nchecks] = i;
            call->nchecks++;
        }
        if (pass == 1) break;
        ngx_uint_t offset = 0;
        for (ngx_uint_t k = 0; k < cs->ncalls; k++) {
            cs->calls[k].checks = indices + offset;
            cs->calls[k].rchecks = rchecks + offset;
            offset += cs->calls[k].nchecks;
            cs->calls[k].nchecks = 0;
        }
    }

    for (ngx_uint_t k = 0; k < cs->ncalls; k++) {
        rl_call_t* call = &cs->calls[k];
        checks_of(call, call->rchecks);
        if (queue_call(call, false)) {
            cs->waiting++;
        } else {
            call_failed(call);
        }
    }
    return cs->waiting;
}

// Stops waiting: the request is gone, or its timeout passed (logged, rate limited); late
// replies are dropped. Calls still in flight stay known until redis_decided, so that
// redis_give_back can arm a refund for a late admission of a request that was rejected meanwhile.
void abandon(rl_ctx_t* ctx, bool timed_out) {
    rl_calls_t* cs = calls_of(ctx);
    if (cs == nullptr) return;
    for (ngx_uint_t k = 0; k < cs->ncalls; k++) {
        rl_call_t* call = &cs->calls[k];
        if (call->state != RL_CALL_PENDING) continue;
        if (timed_out) {
            rl_redis_t* redis = call->redis;
            rl_metrics_redis_error(redis->conn.metrics, RL_REDIS_ERR_TIMEOUT);
            rl_redis_log_error(&redis->conn, 0, "ratelimit redis \"%V\" at %V: timed out: no reply within %M ms, "
                               "on_error applies", &redis->name, &call->node->conn.addr.name, redis->timeout);
        }
        if (call->batch != nullptr) {
            // In flight: its group's reply is dropped, unless redis_give_back arms a late
            // refund right away (call->batch is kept only for that).
            call->batch->calls[call->index] = nullptr;
        } else {
            ngx_queue_remove(&call->queue);  // never sent: nothing to undo
            call->node->nqueued--;
        }
        call_failed(call);
    }
    cs->waiting = 0;
}

// The request is over: the in-flight slots it holds go back.
void redis_end(rl_ctx_t* ctx) noexcept {
    rl_calls_t* cs = calls_of(ctx);
    if (cs == nullptr) return;
    for (ngx_uint_t k = 0; k < cs->ncalls; k++) {
        if (cs->calls[k].state == RL_CALL_PENDING) arm_late_refund(&cs->calls[k], true);
    }
    abandon(ctx, false);
    for (ngx_uint_t k = 0; k < cs->ncalls; k++) {
        rl_call_t* call = &cs->calls[k];
        while (rl_held_t* held = call->held) {
            call->held = held->next;
            rl_held_release(held);
        }
        for (ngx_uint_t i = 0; i < call->nchecks; i++) {
            rl_result_t& res = ctx->results[call->checks[i]];
            if (res.policy->algo == rl::Algo::concurrency) res.consumed = false;
        }
    }
}

void redis_timed_out(rl_ctx_t* ctx) noexcept { abandon(ctx, true); }

// Gives back what the Redis calls of a rejected request consumed.
void redis_give_back(rl_ctx_t* ctx) noexcept {
    rl_calls_t* cs = calls_of(ctx);
    if (cs == nullptr) return;
    for (ngx_uint_t k = 0; k < cs->ncalls; k++) {
        rl_call_t* call = &cs->calls[k];
        if (call->state == RL_CALL_FAILED && call->batch != nullptr) {
            arm_late_refund(call, false);
            continue;
        }
        if (call->state != RL_CALL_DONE) continue;
        bool consumed = false;
        for (ngx_uint_t i = 0; i < call->nchecks; i++) consumed = consumed || ctx->results[call->checks[i]].consumed;
        if (!consumed) continue;
        // With each result's decision time; not in the request's pool, which is gone when a
        // request ends while delayed (the front end's delay).
        rl::RedisCheck* checks = checks_of(call, static_cast<rl::RedisCheck*>(
                                                     ngx_alloc(call->nchecks * sizeof(rl::RedisCheck), call->redis->conn.log)));
        if (checks != nullptr) send_refund(call->redis, call->node, checks, call->nchecks);
        ngx_free(checks);
        for (ngx_uint_t i = 0; i < call->nchecks; i++) {
            rl_result_t& res = ctx->results[call->checks[i]];
            if (res.consumed) rl_rejected_forget(res);  // units back: a rejection of its key may no longer hold
            res.consumed = false;
        }
    }
}

// The verdict is final: the in-flight slots an admitted request took are kept alive (redis_held.h)
// until it ends.
void redis_decided(rl_ctx_t* ctx) noexcept {
    rl_calls_t* cs = calls_of(ctx);
    if (cs == nullptr) return;
    for (ngx_uint_t k = 0; k < cs->ncalls; k++) {
        rl_call_t* call = &cs->calls[k];
        // Timed out, the request let through (on_error): a slot Redis grants late goes back.
        if (call->state == RL_CALL_FAILED) arm_late_refund(call, true);
        call->batch = nullptr;
        if (call->state != RL_CALL_DONE) continue;
        for (ngx_uint_t i = 0; i < call->nchecks; i++) {
            const rl_result_t& res = ctx->results[call->checks[i]];
            if (!res.consumed || res.policy->algo != rl::Algo::concurrency) continue;
            rl::RedisCheck check = call->rchecks[i];
            check.policy = res.policy;
            if (rl_held_t* held = rl_held_add(call->redis, check, call->slot, res.applied->zone->metrics)) {
                held->next = call->held;
                call->held = held;
            }
        }
    }
}

constexpr rl_store_t redis_store() {
    rl_store_t s{};
    s.name = "redis";
    s.id = RL_STORE_ID_REDIS;
    s.remote = redis_remote;
    s.timed_out = redis_timed_out;
    s.give_back = redis_give_back;
    s.decided = redis_decided;
    s.end = redis_end;
    s.settle_remote = rl_redis_settle;
    return s;
}

}  // namespace

const rl_store_t rl_redis_store = redis_store();

void rl_redis_request_fill(rl_conn_t* conn) noexcept {
    auto* node = static_cast<rl_redis_node_t*>(conn->data);
    while (!ngx_queue_empty(&node->queued) && node->batches < kMaxBatchesInFlight) {
        // All the calls queued on the node in one run; in a cluster, those of one slot.
        rl_call_t* calls[kMaxGroups];
        ngx_uint_t n = 0;
        ngx_queue_t* q = ngx_queue_head(&node->queued);
        uint16_t slot = (ngx_queue_data(q, rl_call_t, queue))->slot;
        bool solo = (ngx_queue_data(q, rl_call_t, queue))->solo;
        while (q != ngx_queue_sentinel(&node->queued) && n < (solo ? 1 : kMaxGroups)) {
            ngx_queue_t* next = ngx_queue_next(q);
            rl_call_t* call = ngx_queue_data(q, rl_call_t, queue);
            if (n == 0 || !node->redis->cluster || (call->slot == slot && !call->solo)) {
                ngx_queue_remove(q);
                node->nqueued--;
                calls[n++] = call;
            }
            q = next;
        }
        send_batch(node, calls, n, false);
    }
}

void rl_redis_request_failed(rl_conn_t* conn) noexcept {
    auto* node = static_cast<rl_redis_node_t*>(conn->data);
    while (!ngx_queue_empty(&node->queued)) {
        ngx_queue_t* q = ngx_queue_head(&node->queued);
        ngx_queue_remove(q);
        node->nqueued--;
        call_fails_now(ngx_queue_data(q, rl_call_t, queue));
    }
    // Rejections remembered until now may be of a Redis that lost its state. After the calls
    // failed: an asker's release finds its entry by the epoch it asked in.
    node->redis->store->epoch++;
    rl_node_failed(node);
}

uint16_t rl_redis_slot_of(const rl_result_t& res) noexcept {
    const rl_zone_t* zone = res.applied->zone;
    std::string_view prefix = rl_sv(zone->redis->prefix), name = rl_sv(zone->name);
    char buf[512];
    if (rl::redis_key_max_len(prefix, name) > sizeof(buf)) return 0;  // prefix and name are short in practice
    size_t len = rl::redis_key(buf, prefix, name, res.hash, res.policy->algo);
    return rl::cluster_slot(std::string_view(buf, len));
}
