// A server of a ratelimit_redis in a worker: what every script call on it shares, whoever sends
// it (the request path, the sync engine).
#include "ngx/redis/node.h"

#include "core/text/log_text.h"
#include "ngx/metrics/metrics.h"
#include "ngx/redis/cluster.h"

namespace {

void code_loaded(rl_conn_op_t* op, redisReply* reply) noexcept {
    auto* node = static_cast<rl_redis_node_t*>(op->conn->data);
    node->reloading = 0;
    if (reply != nullptr && reply->type == REDIS_REPLY_ERROR) {
        rl_metrics_redis_error(node->redis->conn.metrics, RL_REDIS_ERR_ERROR_REPLY);
        rl_node_log_reply(node, "loading the Lua failed", reply);
    }
}

}  // namespace

rl_redis_node_t* rl_node_add(rl_redis_t* redis, const ngx_addr_t& addr, rl_redis_node_t* reuse) noexcept {
    rl_redis_node_t* node = reuse;
    ngx_uint_t index = reuse != nullptr ? reuse->index : redis->nodes.n;
    if (node != nullptr) {
        ngx_memzero(node, sizeof(rl_redis_node_t));
    } else {
        rl_redis_node_t** slot = redis->nodes.push(redis->conn.log);
        node = slot ? static_cast<rl_redis_node_t*>(ngx_calloc(sizeof(rl_redis_node_t), redis->conn.log)) : nullptr;
        if (node == nullptr) {
            if (slot != nullptr) redis->nodes.n--;
            return nullptr;
        }
        *slot = node;
    }
    node->redis = redis;
    node->index = index;
    ngx_queue_init(&node->queued);
    rl_conn_init(&node->conn, &redis->conn, addr, node);
    return node;
}

bool rl_node_idle(const rl_redis_node_t* node) noexcept {
    return ngx_queue_empty(&node->conn.inflight) && node->nqueued == 0 && node->batches == 0 && !node->reloading &&
           !node->conn.delivering;
}

void rl_node_retire(rl_redis_node_t* node) noexcept {
    rl_conn_free(&node->conn);
    node->conn.addr.sockaddr = nullptr;  // takes nothing (rl_conn_usable)
    ngx_str_set(&node->conn.addr.name, "(dropped node)");
    node->retired = 1;
}

void rl_node_failed(rl_redis_node_t* node) noexcept {
    node->reloading = 0;
    rl_cluster_node_failed(node);
    if (node->redis->address_stale) node->redis->address_stale(node);
}

bool rl_node_can_take(rl_redis_node_t* node, ngx_uint_t more) noexcept {
    if (!rl_conn_usable(&node->conn)) return false;
    rl_redis_t* redis = node->redis;
    if (node->conn.ninflight + node->nqueued + more <= redis->max_pending + node->conn.handshake) return true;
    rl_metrics_redis_error(redis->conn.metrics, RL_REDIS_ERR_OVERFLOW);
    rl_redis_log_error(&redis->conn, 0, "ratelimit redis \"%V\" at %V: max_pending (%ui) reached, on_error applies",
                       &redis->name, &node->conn.addr.name, redis->max_pending);
    return false;
}

rl_conn_op_t* rl_node_send(rl_redis_node_t* node, const u_char* cmd, size_t len, rl_conn_reply_pt done, void* data,
                           ngx_uint_t weight, bool asking) noexcept {
    static const char kAsking[] = "*1\r\n$6\r\nASKING\r\n";
    if (!rl_node_can_take(node, asking ? weight + 1 : weight)) return nullptr;
    if (asking && rl_conn_send(&node->conn, reinterpret_cast<const u_char*>(kAsking), sizeof(kAsking) - 1,
                               [](rl_conn_op_t*, redisReply*) noexcept {}, node, 0, 1) == nullptr) {
        return nullptr;
    }
    return rl_conn_send(&node->conn, cmd, len, done, data, 0, weight);
}

void* rl_redis_scratch(rl_redis_t* redis, size_t bytes) noexcept {
    if (bytes > redis->scratch_size) {
        size_t size = redis->scratch_size ? redis->scratch_size : 4096;
        while (size < bytes) size *= 2;
        void* mem = ngx_alloc(size, redis->conn.log);
        if (mem == nullptr) return nullptr;
        ngx_free(redis->scratch);
        redis->scratch = mem;
        redis->scratch_size = size;
    }
    return redis->scratch;
}

bool rl_redis_error_is(const redisReply* reply, const char* prefix) noexcept {
    if (reply->type != REDIS_REPLY_ERROR) return false;
    size_t n = ngx_strlen(prefix);
    return reply->len >= n && ngx_strncmp(reply->str, prefix, n) == 0;
}

void rl_node_reload_code(rl_redis_node_t* node) noexcept {
    rl_redis_t* redis = node->redis;
    if (node->reloading) return;
    const ngx_str_t& load = node->scripts ? redis->script_load : redis->function_load;
    if (rl_conn_send(&node->conn, load.data, load.len, code_loaded, node, 0) != nullptr) node->reloading = 1;
}

void rl_node_log_reply(rl_redis_node_t* node, const char* what, const redisReply* reply) noexcept {
    rl_redis_t* redis = node->redis;
    char text[rl::kLogTextCap];
    size_t n = 0;
    if (reply != nullptr && (reply->type == REDIS_REPLY_ERROR || reply->type == REDIS_REPLY_STRING ||
                             reply->type == REDIS_REPLY_STATUS)) {
        n = rl::log_text(reply->str, reply->len, text, sizeof(text));
    }
    rl_redis_log_error(&redis->conn, 0, "ratelimit redis \"%V\" at %V: %s: %s%*s", &redis->name,
                       &node->conn.addr.name, what,
                       reply == nullptr ? "no reply" : reply->type == REDIS_REPLY_ERROR ? "error reply " : "reply ", n,
                       text);
}

rl_reply_e rl_node_reply(rl_redis_node_t* node, const redisReply* reply, rl_retry_t* retry) noexcept {
    if (reply == nullptr) return RL_REPLY_FAILED;
    if (reply->type != REDIS_REPLY_ERROR) return RL_REPLY_TAKE;
    rl_redis_t* redis = node->redis;
    if (rl_redis_error_is(reply, "NOSCRIPT") || rl_redis_error_is(reply, "ERR Function not found")) {
        // Redis restarted without persistence, or its functions or scripts were flushed:
        // nothing ran. The code is loaded again, ahead of the call sent again.
        rl_node_reload_code(node);
        *retry = rl_retry_t{node, false};
        return RL_REPLY_RETRY;
    }
    if (!redis->cluster) return RL_REPLY_TAKE;
    if (rl_redis_error_is(reply, "MOVED ") || rl_redis_error_is(reply, "ASK ")) {
        bool ask = false;
        rl_redis_node_t* to = rl_cluster_redirect(redis, reply, &ask);
        *retry = rl_retry_t{to, ask};
        rl_metrics_redirect(redis->conn.metrics, ask);
#if (NGX_DEBUG)
        char text[rl::kLogTextCap];
        size_t len = rl::log_text(reply->str, reply->len, text, sizeof(text));
        ngx_log_debug4(NGX_LOG_DEBUG_HTTP, redis->conn.log, 0, "ratelimit redis \"%V\" at %V: %*s", &redis->name,
                       &node->conn.addr.name, len, text);
#endif
        return retry->node != nullptr ? RL_REPLY_RETRY : RL_REPLY_FAILED;
    }
    // A slot in migration, with some of the call's keys moved and some not.
    if (rl_redis_error_is(reply, "TRYAGAIN")) return RL_REPLY_SPLIT;
    return RL_REPLY_TAKE;
}

void rl_node_reply_failed(rl_redis_node_t* node, const char* what, const redisReply* reply) noexcept {
    rl_redis_t* redis = node->redis;
    if (reply != nullptr) {
        if (redis->cluster) rl_cluster_refresh_soon(redis);  // CLUSTERDOWN, TRYAGAIN...
        // A master that became a replica, or lost its own: the address may have moved.
        if ((rl_redis_error_is(reply, "READONLY") || rl_redis_error_is(reply, "MASTERDOWN")) && redis->address_stale) {
            redis->address_stale(node);
        }
        rl_metrics_redis_error(redis->conn.metrics, reply->type == REDIS_REPLY_ERROR ? RL_REDIS_ERR_ERROR_REPLY
                                                                                     : RL_REDIS_ERR_PROTOCOL);
    }
    rl_node_log_reply(node, what, reply);
}
