// In-flight slots held in Redis: refreshed while their requests run, given back when they end.
#include "ngx/redis/held.h"

#include "core/redis_keys.h"
#include "ngx/metrics.h"
#include "ngx/redis/cluster.h"
#include "ngx/redis/node.h"

#include <sys/random.h>

namespace {

uint64_t owner_id = 0;
uint64_t last_seq = 0;

int64_t local_now_us() {
    ngx_time_t* tp = ngx_timeofday();
    return static_cast<int64_t>(tp->sec) * 1000000 + static_cast<int64_t>(tp->msec) * 1000;
}

rl_redis_node_t* node_for(rl_redis_t* redis, uint16_t slot) {
    if (redis->cluster) return rl_cluster_route(redis, slot);
    return redis->nodes.n > 0 ? redis->nodes.elts[0] : nullptr;
}

void on_reply(rl_conn_op_t* op, redisReply* reply) noexcept {
    if (reply != nullptr && reply->type != REDIS_REPLY_ERROR) return;
    auto* node = static_cast<rl_redis_node_t*>(op->conn->data);
    // Not retried: a release not done expires after hold; a refresh goes again next time.
    if (reply != nullptr) rl_metrics_redis_error(node->redis->conn.metrics, RL_REDIS_ERR_ERROR_REPLY);
    rl_node_log_reply(node, static_cast<const char*>(op->data), reply);
}

rl_redis_node_t* usable_node(rl_held_t* held) {
    rl_redis_node_t* node = node_for(held->redis, held->slot);
    return node != nullptr && rl_node_can_take(node, 0) ? node : nullptr;
}

void release(rl_held_t* held) {
    rl_redis_node_t* node = usable_node(held);
    if (node == nullptr) return;
    std::string_view prefix = rl_sv(held->redis->prefix);
    auto* buf = static_cast<char*>(rl_redis_scratch(held->redis, rl::release_command_len(prefix, held->check)));
    if (buf == nullptr) return;
    size_t len = rl::write_release_command(buf, prefix, held->check);
    rl_node_send(node, reinterpret_cast<u_char*>(buf), len, on_reply, const_cast<char*>("a slot's release failed"), 0);
}

// ZADD ... XX and PEXPIRE: one op per command, so that replies stay matched to commands even
// when the second cannot be queued.
void refresh(rl_held_t* held, int64_t score) {
    static const char kExpire[] = "*3\r\n$7\r\nPEXPIRE\r\n";
    rl_redis_node_t* node = usable_node(held);
    if (node == nullptr) return;
    std::string_view prefix = rl_sv(held->redis->prefix);
    auto* buf = static_cast<char*>(rl_redis_scratch(held->redis, rl::refresh_command_len(prefix, held->check, score)));
    if (buf == nullptr) return;
    size_t len = rl::write_refresh_command(buf, prefix, held->check, score);
    std::string_view both(buf, len);
    size_t split = both.rfind(kExpire);
    if (split == std::string_view::npos || split == 0) return;
    auto* what = const_cast<char*>("a slot's refresh failed");
    auto* cmd = reinterpret_cast<u_char*>(buf);
    if (rl_node_send(node, cmd, split, on_reply, what, 0) == nullptr) return;
    rl_node_send(node, cmd + split, len - split, on_reply, what, 0);
}

void on_refresh(ngx_event_t* ev) noexcept {
    auto* redis = static_cast<rl_redis_t*>(ev->data);
    int64_t now = local_now_us() + redis->clock_offset_us;
    for (ngx_queue_t* q = ngx_queue_head(&redis->held); q != ngx_queue_sentinel(&redis->held); q = ngx_queue_next(q)) {
        rl_held_t* held = ngx_queue_data(q, rl_held_t, link);
        refresh(held, now + held->policy.period_us);
    }
    if (!ngx_queue_empty(&redis->held)) ngx_add_timer(ev, redis->refresh_ms);
}

}  // namespace

uint64_t rl_held_owner() noexcept {
    if (owner_id == 0) {
        if (getrandom(&owner_id, sizeof(owner_id), GRND_NONBLOCK) != static_cast<ssize_t>(sizeof(owner_id))) {
            owner_id = (static_cast<uint64_t>(ngx_pid) << 24) ^ static_cast<uint64_t>(local_now_us());
        }
        owner_id &= (uint64_t{1} << 48) - 1;
        if (owner_id == 0) owner_id = 1;
    }
    return owner_id;
}

uint64_t rl_held_next_seq() noexcept { return ++last_seq; }

void rl_held_clock(rl_redis_t* redis, int64_t redis_now_us) noexcept {
    redis->clock_offset_us = redis_now_us - local_now_us();
}

rl_held_t* rl_held_add(rl_redis_t* redis, const rl::RedisCheck& check, uint16_t slot,
                       rl_metrics_zone_t* metrics) noexcept {
    auto* held = static_cast<rl_held_t*>(ngx_alloc(sizeof(rl_held_t), redis->conn.log));
    if (held == nullptr) return nullptr;
    held->next = nullptr;
    held->redis = redis;
    held->metrics = metrics;
    held->slot = slot;
    held->policy = *check.policy;
    held->check = check;
    held->check.policy = &held->policy;
    ngx_queue_insert_tail(&redis->held, &held->link);
    if (!redis->held_refresh.timer_set && redis->refresh_ms > 0) ngx_add_timer(&redis->held_refresh, redis->refresh_ms);
    if (metrics != nullptr) rl_metrics_add(&metrics->in_flight, 1);
    return held;
}

void rl_held_release(rl_held_t* held) noexcept {
    release(held);
    ngx_queue_remove(&held->link);
    if (held->metrics != nullptr) rl_metrics_add(&held->metrics->in_flight, -1);
    ngx_free(held);
}

void rl_held_init(rl_redis_t* redis) noexcept {
    ngx_queue_init(&redis->held);
    redis->held_refresh.handler = on_refresh;
    redis->held_refresh.data = redis;
    redis->held_refresh.log = redis->conn.log;
    redis->held_refresh.cancelable = 1;  // an old worker refreshes while its requests run, but waits for none
}

void rl_held_exit(rl_redis_t* redis) noexcept {
    if (redis->held_refresh.timer_set) ngx_del_timer(&redis->held_refresh);
    while (!ngx_queue_empty(&redis->held)) {
        ngx_queue_t* q = ngx_queue_head(&redis->held);
        ngx_queue_remove(q);
        ngx_free(ngx_queue_data(q, rl_held_t, link));
    }
}
