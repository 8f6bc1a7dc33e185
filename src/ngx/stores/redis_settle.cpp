// A settle is a call of its own, built when the request ends and kept (with its bytes) until
// its reply, so that it can go again: after a MOVED / ASK / NOSCRIPT as any call does
// (resend.h), and once more, kRetryMs later (a connection that failed is backing off
// meanwhile), after a failure: no reply, an error, or Redis away when it was to be sent. Each
// carries a call id (redis_command.h), the same in every send of its bytes: a call Redis ran
// whose reply was lost is not applied again when it goes again, it only gets its first reply
// back.
#include "ngx/stores/redis_settle.h"

#include "core/wire/redis_command.h"
#include "core/algo/settle.h"
#include "ngx/metrics/metrics.h"
#include "ngx/stores/redis_held.h"
#include "ngx/stores/redis_rejected.h"
#include "ngx/stores/redis_request.h"
#include "ngx/redis/resend.h"
#include "ngx/stores/store.h"

namespace {

constexpr ngx_msec_t kRetryMs = 500;

struct rl_settle_call_t {
    rl_resend_t cmd;             // its bytes and its redirections
    rl_redis_t* redis;
    rl_metrics_zone_t* metrics;  // its zone's
    ngx_str_t zone;              // its zone's name, for the log
    uint16_t slot;               // its key's cluster slot
    bool again;                  // its second try is set or done
    ngx_event_t retry;
    u_char bytes[1];
};

void failed(rl_settle_call_t* call, rl_redis_node_t* node, const redisReply* reply);

void on_retry(ngx_event_t* ev) noexcept {
    auto* call = static_cast<rl_settle_call_t*>(ev->data);
    if (!rl_resend_send(&call->cmd, rl_resend_route(call->redis, call->slot))) failed(call, nullptr, nullptr);
}

// A failure: the second try, kRetryMs later, or (the second failed too) the end.
void retry_or_fail(rl_settle_call_t* call, rl_redis_node_t* node, const redisReply* reply) {
    if (call->again || ngx_exiting || ngx_terminate || ngx_quit) {
        failed(call, node, reply);
        return;
    }
    call->again = true;
    // An error reply tells the server's state (a cluster's map, a master that moved) now.
    if (node != nullptr && reply != nullptr) rl_node_reply_failed(node, "a settle failed", reply);
    ngx_memzero(&call->retry, sizeof(ngx_event_t));
    call->retry.handler = on_retry;
    call->retry.data = call;
    call->retry.log = call->redis->conn.log;
    call->retry.cancelable = 1;  // a worker that exits does not wait for it (the settle is lost)
    ngx_add_timer(&call->retry, kRetryMs);
}

// A lost settle has a line of its own (once a second per worker), whatever else the server's
// errors logged in that second: its difference is gone.
time_t lost_logged = 0;
ngx_uint_t lost_suppressed = 0;

void failed(rl_settle_call_t* call, rl_redis_node_t* node, const redisReply* reply) {
    if (call->metrics != nullptr) rl_metrics_add(&call->metrics->settle_failures, 1);
    if (node != nullptr && reply != nullptr) rl_node_reply_failed(node, "a settle failed", reply);
    if (lost_logged == ngx_time()) {
        lost_suppressed++;
    } else {
        const char* why = reply != nullptr ? "Redis answered an error" : node != nullptr ? "no reply" : "Redis unavailable";
        if (lost_suppressed > 0) {
            ngx_log_error(NGX_LOG_ERR, call->redis->conn.log, 0,
                          "ratelimit redis \"%V\": a settle of zone \"%V\" was lost after two tries (%s); %ui more "
                          "in the last second", &call->redis->name, &call->zone, why, lost_suppressed);
        } else {
            ngx_log_error(NGX_LOG_ERR, call->redis->conn.log, 0,
                          "ratelimit redis \"%V\": a settle of zone \"%V\" was lost after two tries (%s)",
                          &call->redis->name, &call->zone, why);
        }
        lost_logged = ngx_time();
        lost_suppressed = 0;
    }
    ngx_free(call);
}

// The end of a try, after the redirections it followed (resend.h).
void on_done(rl_resend_t* cmd, rl_redis_node_t* node, const redisReply* reply, bool taken) {
    auto* call = static_cast<rl_settle_call_t*>(cmd->data);
    if (taken && reply->type == REDIS_REPLY_ARRAY) {
        ngx_free(call);
        return;
    }
    retry_or_fail(call, node, reply);
}

// A settle's call id: unique among the hosts and workers sharing the Redis for far longer than
// Redis keeps it (kCallMemoryMs): this worker's random owner id (redis_held.h) and a count.
constexpr size_t kCallIdLen = 12 + 1 + 16;  // below 2^48, '.', a 64-bit count
static_assert(kCallIdLen <= rl::kCallIdMax, "a settle's call id is sent whole");

size_t next_call_id(u_char* buf) {
    static u_char owner[13];  // "<owner>.", formatted once per worker (the owner is the worker's)
    static size_t owner_len;
    static uint64_t count;
    if (owner_len == 0) {
        const auto id = static_cast<int64_t>(rl_held_owner());
        owner_len = static_cast<size_t>(ngx_snprintf(owner, sizeof(owner), "%xL.", id) - owner);
    }
    u_char* p = ngx_cpymem(buf, owner, owner_len);
    uint64_t n = ++count;
    int digits = 1;
    while (digits < 16 && (n >> (4 * digits)) != 0) digits++;
    for (int i = digits - 1; i >= 0; i--) *p++ = "0123456789abcdef"[(n >> (4 * i)) & 0xf];
    return static_cast<size_t>(p - buf);
}

// The call of one result's settle: a charge on its debt policy, or a refund of part of its cost.
rl_settle_call_t* build(rl_ctx_t* ctx, const rl_result_t& res, rl::CommandScript script) {
    rl_zone_t* zone = res.applied->zone;
    rl_redis_t* redis = zone->redis;
    std::string_view prefix = rl_sv(redis->prefix);
    rl::Policy debt = rl_debt_of(res);
    rl::RedisCheck check;
    check.zone = rl_sv(zone->name);
    check.hash = res.hash;
    check.admitted_at = res.at;  // dropped if the key was reset since (the API's DELETE)
    if (res.delta > 0) {
        check.policy = &debt;
        check.cost = res.delta;
        check.at = rl::debt_shift(*res.policy, debt);
    } else {
        check.policy = res.policy;
        check.cost = -res.delta;
        check.at = res.at;
    }
    u_char idbuf[kCallIdLen];
    std::string_view id(reinterpret_cast<const char*>(idbuf), next_call_id(idbuf));
    size_t len = res.delta > 0 ? rl::charge_command(nullptr, script, false, prefix, &check, 1, 0, id)
                               : rl::refund_command_len(prefix, &check, 1, script, id);
    auto* call = static_cast<rl_settle_call_t*>(ngx_alloc(sizeof(rl_settle_call_t) + len, ctx->log));
    if (call == nullptr) return nullptr;
    auto* buf = reinterpret_cast<char*>(call->bytes);
    len = res.delta > 0 ? rl::charge_command(buf, script, false, prefix, &check, 1, 0, id)
                        : rl::write_refund_command(buf, prefix, &check, 1, script, id);
    call->cmd = rl_resend_t{on_done, call, call->bytes, len, 1, 0};
    call->redis = redis;
    call->metrics = zone->metrics;
    call->zone = zone->name;
    call->slot = redis->cluster ? rl_redis_slot_of(res) : 0;
    call->again = false;
    return call;
}

}  // namespace

void rl_redis_settle(rl_ctx_t* ctx) noexcept {
    for (ngx_uint_t i = 0; i < ctx->nresults; i++) {
        const rl_result_t& res = ctx->results[i];
        if (res.store != RL_STORE_REDIS || res.delta == 0) continue;
        if (res.delta < 0) rl_rejected_forget(res);  // units back: a rejection of its key may no longer hold
        rl_redis_t* redis = res.applied->zone->redis;
        rl_redis_node_t* first = rl_resend_route(redis, redis->cluster ? rl_redis_slot_of(res) : 0);
        // The call is built for how the node runs the Lua (as Redis was last seen: FCALL
        // unless it refused functions).
        rl_settle_call_t* call = build(ctx, res, first != nullptr ? rl_node_script(first) : rl::kPreferredScript);
        if (call == nullptr) continue;
        // Not queued (Redis away, too much in flight, no route yet): as a failure.
        if (!rl_resend_send(&call->cmd, first)) retry_or_fail(call, nullptr, nullptr);
    }
}
