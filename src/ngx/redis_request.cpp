// A request's Redis side: its checks grouped into script calls (one per server, or per slot
// of a cluster), sent on the workers' pipelined connections, their replies decoded into the
// request's results; refunds when the request is rejected after all.
#include "ratelimit.h"

#include "core/redis_command.h"
#include "core/redis_keys.h"
#include "redis_cluster.h"

namespace {

std::string_view sv(const ngx_str_t& s) { return {reinterpret_cast<const char*>(s.data), s.len}; }

// The core's description of a call's checks, in the request's pool.
rl::RedisCheck* checks_of(rl_call_t* call, ngx_pool_t* pool) {
    auto* checks = static_cast<rl::RedisCheck*>(ngx_palloc(pool, call->nchecks * sizeof(rl::RedisCheck)));
    if (checks == nullptr) return nullptr;
    for (ngx_uint_t i = 0; i < call->nchecks; i++) {
        const rl_result_t& res = call->ctx->results[call->checks[i]];
        checks[i] = rl::RedisCheck{};
        checks[i].zone = sv(res.applied->zone->name);
        checks[i].hash = res.hash;
        checks[i].policy = &res.applied->policy;
        checks[i].cost = res.cost;
        checks[i].at = res.at;
    }
    return checks;
}

// Builds the call's command: EVALSHA, or EVAL with the script's text.
bool build_command(rl_call_t* call, ngx_pool_t* pool, bool eval) {
    rl::RedisCheck* checks = checks_of(call, pool);
    if (checks == nullptr) return false;
    rl::CommandScript script = eval ? rl::CommandScript::eval : rl::CommandScript::evalsha;
    std::string_view prefix = sv(call->redis->prefix);
    size_t len = rl::decide_command_len(script, false, prefix, checks, call->nchecks, 0);
    auto* buf = static_cast<u_char*>(ngx_pnalloc(pool, len));
    if (buf == nullptr) return false;
    call->len = rl::write_decide_command(reinterpret_cast<char*>(buf), script, false, prefix, checks, call->nchecks, 0);
    call->cmd = buf;
    return true;
}

void call_failed(rl_call_t* call) {
    call->state = RL_CALL_FAILED;
    for (ngx_uint_t i = 0; i < call->nchecks; i++) call->ctx->results[call->checks[i]].store = RL_STORE_FAILED;
}

void call_settled(rl_call_t* call) {
    rl_ctx_t* ctx = call->ctx;
    if (--ctx->waiting == 0) rl_redis_finished(ctx);
}

void on_reply(rl_redis_op_t* op, redisReply* reply) noexcept;

bool send_call(rl_call_t* call) {
    call->op = rl_redis_send(call->node, call->cmd, call->len, on_reply, call, 0);
    return call->op != nullptr;
}

// Decodes a decide reply into the call's results; false if it is not one.
bool take_reply(rl_call_t* call, const redisReply* reply) {
    constexpr size_t kMaxValues = 2 + 4 * 64;
    if (reply->type != REDIS_REPLY_ARRAY || reply->elements > kMaxValues) return false;
    int64_t values[kMaxValues];
    for (size_t i = 0; i < reply->elements; i++) {
        if (reply->element[i]->type != REDIS_REPLY_INTEGER) return false;
        values[i] = reply->element[i]->integer;
    }
    rl::Decision decisions[64];
    if (call->nchecks > 64) return false;
    int64_t now = 0;
    if (!rl::decode_decide_reply(values, reply->elements, call->nchecks, decisions, &now)) return false;
    call->at = now;
    // The script is all or nothing: its checks consumed only if every one of them allowed.
    bool admitted = true;
    for (ngx_uint_t i = 0; i < call->nchecks; i++) admitted = admitted && decisions[i].allowed;
    for (ngx_uint_t i = 0; i < call->nchecks; i++) {
        rl_result_t& res = call->ctx->results[call->checks[i]];
        res.decision = decisions[i];
        res.decision.limit = res.applied->policy.requests;
        res.at = now;
        res.consumed = admitted && res.cost > 0;
    }
    return true;
}

bool is_error(const redisReply* reply, const char* prefix) {
    size_t n = ngx_strlen(prefix);
    return reply->type == REDIS_REPLY_ERROR && reply->len >= n && ngx_strncmp(reply->str, prefix, n) == 0;
}

void on_asking_reply(rl_redis_op_t*, redisReply*) noexcept {}

// A cluster node answered MOVED or ASK: retry on the node it names. True if the call went.
bool follow_redirect(rl_call_t* call, const redisReply* reply) {
    bool ask = false;
    rl_redis_node_t* node = rl_cluster_redirect(call->redis, reply, &ask);
    if (node == nullptr || call->redirects >= 5) return false;
    call->redirects++;
    call->node = node;
    if (ask) {
        // ASKING applies to the next command on that connection: queue both back to back.
        static const char kAsking[] = "*1\r\n$6\r\nASKING\r\n";
        if (!rl_redis_send(node, reinterpret_cast<const u_char*>(kAsking), sizeof(kAsking) - 1, on_asking_reply,
                           call->redis, 0)) {
            return false;
        }
    }
    return send_call(call);
}

void on_reply(rl_redis_op_t* op, redisReply* reply) noexcept {
    auto* call = static_cast<rl_call_t*>(op->data);
    call->op = nullptr;
    if (reply != nullptr && is_error(reply, "NOSCRIPT") && call->redirects < 5) {
        // Redis restarted or its scripts were flushed: load the script again ahead of the retry.
        call->redirects++;
        rl_redis_reload_script(call->node);
        if (send_call(call)) return;
    } else if (reply != nullptr && call->redis->cluster && (is_error(reply, "MOVED ") || is_error(reply, "ASK "))) {
        if (follow_redirect(call, reply)) return;
    } else if (reply != nullptr && take_reply(call, reply)) {
        call->state = RL_CALL_DONE;
        call_settled(call);
        return;
    } else if (reply != nullptr) {
        if (call->redis->cluster) rl_cluster_refresh_soon(call->redis);  // CLUSTERDOWN, TRYAGAIN...
        rl_redis_error(call->redis, "ratelimit redis \"%V\" at %V: unexpected reply: %*s", &call->redis->name,
                       &call->node->addr.name, reply->type == REDIS_REPLY_ERROR ? static_cast<size_t>(reply->len) : 0,
                       reply->str);
    }
    call_failed(call);
    call_settled(call);
}

void on_refund_reply(rl_redis_op_t* op, redisReply* reply) noexcept {
    auto* redis = static_cast<rl_redis_t*>(op->data);
    if (reply == nullptr || reply->type == REDIS_REPLY_ERROR) {
        rl_redis_error(redis, "ratelimit redis \"%V\": a refund failed: %*s", &redis->name,
                       reply != nullptr ? static_cast<size_t>(reply->len) : 0, reply != nullptr ? reply->str : "");
    }
}

// The cluster slot of a result's Redis key.
uint16_t slot_of(const rl_result_t& res) {
    const rl_zone_t* zone = res.applied->zone;
    std::string_view prefix = sv(zone->redis->prefix), name = sv(zone->name);
    char buf[512];
    if (rl::redis_key_max_len(prefix, name) > sizeof(buf)) return 0;  // prefix and name are short in practice
    size_t len = rl::redis_key(buf, prefix, name, res.hash, res.applied->policy.algo);
    return rl::cluster_slot(std::string_view(buf, len));
}

// The call a result's check goes into, created on first use: one per ratelimit_redis, and
// in a cluster one per slot (a script's keys must share a slot).
rl_call_t* call_for(rl_ctx_t* ctx, const rl_result_t& res) {
    rl_redis_t* redis = res.applied->zone->redis;
    uint16_t slot = redis->cluster ? slot_of(res) : 0;
    for (ngx_uint_t k = 0; k < ctx->ncalls; k++) {
        if (ctx->calls[k].redis == redis && ctx->calls[k].slot == slot) return &ctx->calls[k];
    }
    rl_call_t* call = &ctx->calls[ctx->ncalls++];
    call->ctx = ctx;
    call->redis = redis;
    call->slot = slot;
    call->node = redis->cluster ? rl_cluster_route(redis, slot) : redis->nodes[0];
    return call;
}

// Fire and forget: the request does not wait for its refund. The command is built in
// `pool` and copied into the connection's buffer at once.
void send_refund(rl_redis_t* redis, rl_redis_node_t* node, const rl::RedisCheck* checks, ngx_uint_t n,
                 ngx_pool_t* pool) {
    std::string_view prefix = sv(redis->prefix);
    size_t len = rl::refund_command_len(prefix, checks, n);
    auto* buf = static_cast<u_char*>(pool ? ngx_pnalloc(pool, len) : ngx_alloc(len, redis->log));
    if (buf == nullptr) return;
    len = rl::write_refund_command(reinterpret_cast<char*>(buf), prefix, checks, n);
    if (rl_redis_send(node, buf, len, on_refund_reply, redis, 0) == nullptr) {
        rl_redis_error(redis, "ratelimit redis \"%V\": a refund could not be sent", &redis->name);
    }
    if (pool == nullptr) ngx_free(buf);
}

// A call that timed out is still in flight. If Redis admits it late, the request (which was
// rejected meanwhile) must not keep what it consumed: the op keeps what a refund needs.
struct rl_late_t {
    rl_redis_t* redis;
    ngx_uint_t nchecks;
    rl::RedisCheck checks[1];  // nchecks of them; zone names and policies live in the configuration
};

void on_late_reply(rl_redis_op_t* op, redisReply* reply) noexcept {
    auto* late = static_cast<rl_late_t*>(op->data);
    constexpr size_t kMaxValues = 2 + 4 * 64;
    if (reply != nullptr && reply->type == REDIS_REPLY_ARRAY && reply->elements >= 2 && reply->elements <= kMaxValues &&
        reply->element[0]->type == REDIS_REPLY_INTEGER && reply->element[0]->integer == 1 &&
        reply->element[1]->type == REDIS_REPLY_INTEGER) {
        for (ngx_uint_t i = 0; i < late->nchecks; i++) late->checks[i].at = reply->element[1]->integer;
        send_refund(late->redis, op->node, late->checks, late->nchecks, nullptr);
    }
    ngx_free(late);
}

void arm_late_refund(rl_call_t* call) {
    size_t bytes = sizeof(rl_late_t) + call->nchecks * sizeof(rl::RedisCheck);
    auto* late = static_cast<rl_late_t*>(ngx_alloc(bytes, call->redis->log));
    rl::RedisCheck* checks = late ? checks_of(call, call->ctx->r->pool) : nullptr;
    if (checks == nullptr) {
        ngx_free(late);
        return;
    }
    late->redis = call->redis;
    late->nchecks = call->nchecks;
    for (ngx_uint_t i = 0; i < call->nchecks; i++) late->checks[i] = checks[i];
    call->op->done = on_late_reply;
    call->op->data = late;
    call->op = nullptr;
}

}  // namespace

ngx_uint_t rl_redis_start(rl_ctx_t* ctx) noexcept {
    ngx_http_request_t* r = ctx->r;
    ngx_uint_t n = ctx->nresults;
    // At most one call per result; each result's index goes into exactly one call.
    ctx->calls = static_cast<rl_call_t*>(ngx_pcalloc(r->pool, n * sizeof(rl_call_t)));
    auto* indices = static_cast<ngx_uint_t*>(ngx_palloc(r->pool, n * sizeof(ngx_uint_t)));
    if (ctx->calls == nullptr || indices == nullptr) {
        for (ngx_uint_t i = 0; i < n; i++) {
            if (ctx->results[i].store == RL_STORE_REDIS) ctx->results[i].store = RL_STORE_FAILED;
        }
        return 0;
    }

    // One call per ratelimit_redis (per slot in a cluster): its checks in one script run,
    // all or nothing. First count each call's checks, then give each call its run of indices.
    for (int pass = 0; pass < 2; pass++) {
        for (ngx_uint_t i = 0; i < n; i++) {
            rl_result_t& res = ctx->results[i];
            if (res.store != RL_STORE_REDIS) continue;
            rl_call_t* call = call_for(ctx, res);
            if (pass == 1) call->checks[call->nchecks] = i;
            call->nchecks++;
        }
        if (pass == 1) break;
        ngx_uint_t offset = 0;
        for (ngx_uint_t k = 0; k < ctx->ncalls; k++) {
            ctx->calls[k].checks = indices + offset;
            offset += ctx->calls[k].nchecks;
            ctx->calls[k].nchecks = 0;
        }
    }

    for (ngx_uint_t k = 0; k < ctx->ncalls; k++) {
        rl_call_t* call = &ctx->calls[k];
        if (build_command(call, r->pool, false) && send_call(call)) {
            ctx->waiting++;
        } else {
            call_failed(call);
        }
    }
    return ctx->waiting;
}

void rl_redis_abandon(rl_ctx_t* ctx) noexcept {
    for (ngx_uint_t k = 0; k < ctx->ncalls; k++) {
        rl_call_t* call = &ctx->calls[k];
        if (call->state != RL_CALL_PENDING) continue;
        // Detached: a late reply is dropped, unless rl_redis_refund arms a late refund on it
        // right away (the op pointer is only kept for that).
        if (call->op != nullptr) call->op->data = nullptr;
        call_failed(call);
    }
    ctx->waiting = 0;
}

void rl_redis_refund(rl_ctx_t* ctx) noexcept {
    for (ngx_uint_t k = 0; k < ctx->ncalls; k++) {
        rl_call_t* call = &ctx->calls[k];
        if (call->state == RL_CALL_FAILED && call->op != nullptr) {
            arm_late_refund(call);
            continue;
        }
        if (call->state != RL_CALL_DONE) continue;
        bool consumed = false;
        for (ngx_uint_t i = 0; i < call->nchecks; i++) consumed = consumed || ctx->results[call->checks[i]].consumed;
        if (!consumed) continue;
        rl::RedisCheck* checks = checks_of(call, ctx->r->pool);
        if (checks != nullptr) send_refund(call->redis, call->node, checks, call->nchecks, ctx->r->pool);
        for (ngx_uint_t i = 0; i < call->nchecks; i++) ctx->results[call->checks[i]].consumed = false;
    }
}

void rl_redis_forget(rl_ctx_t* ctx) noexcept {
    for (ngx_uint_t k = 0; k < ctx->ncalls; k++) ctx->calls[k].op = nullptr;
}
