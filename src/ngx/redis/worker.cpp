// A ratelimit_redis in a worker: its connections' shared settings, its servers (the one
// configured, a cluster's seeds, or the master the Sentinels name) and their connections,
// opened at start; closed at exit. The master never talks to Redis.
#include "ngx/redis/redis.h"

#include "ngx/redis/cluster.h"
#include "ngx/redis/node.h"
#include "ngx/redis/resolve.h"
#include "ngx/redis/sentinel.h"

namespace {

// A node failed or refused writes: where its address comes from may know better.
void on_address_stale(rl_redis_node_t* node) noexcept {
    rl_redis_t* redis = node->redis;
    if (redis->sentinel.len) {
        rl_sentinel_ask_soon(redis);
    } else if (redis->resolve) {
        rl_resolve_soon(redis, &node->conn);
    }
}

// The servers as configured: one, or a cluster's seeds; each connects now.
ngx_int_t add_configured(rl_redis_t* redis) {
    auto* addrs = static_cast<rl_redis_addr_t*>(redis->addrs->elts);
    for (ngx_uint_t k = 0; k < redis->addrs->nelts; k++) {
        rl_redis_node_t* node = rl_node_add(redis, addrs[k].addr);
        if (node == nullptr) return NGX_ERROR;
        node->conn.tls_name = redis->ssl_name.len ? redis->ssl_name : addrs[k].host;
        if (redis->resolve && !addrs[k].literal && !rl_resolve_watch(redis, &node->conn, addrs[k].host, addrs[k].port)) {
            return NGX_ERROR;
        }
        rl_conn_usable(&node->conn);  // connect now rather than on the first request
    }
    return NGX_OK;
}

}  // namespace

ngx_int_t rl_redis_start(rl_redis_t* redis, ngx_cycle_t* cycle) noexcept {
    rl_conn_shared_t& shared = redis->conn;
    shared.name = redis->name;
    shared.log = cycle->log;
    shared.timeout = redis->timeout;
    shared.connect_timeout = redis->connect_timeout;
    shared.handshake_reply = rl_redis_check_handshake;
    ngx_queue_init(&shared.free_ops);
    shared.ssl = redis->ssl_ctx;
    shared.ssl_verify = redis->ssl_verify;
    redis->pool = cycle->pool;
    if (!rl_redis_build_handshake(cycle->pool, redis)) return NGX_ERROR;
    redis->address_stale = on_address_stale;
    if (redis->resolve && !rl_resolve_init(redis)) return NGX_ERROR;
    if (redis->sentinel.len) {
        // One server, the master, whose address the Sentinels give (sentinel.cpp).
        ngx_addr_t none;
        ngx_memzero(&none, sizeof(none));
        ngx_str_set(&none.name, "(master not known yet)");
        rl_redis_node_t* master = rl_node_add(redis, none);
        if (master == nullptr || !rl_sentinel_init(redis)) return NGX_ERROR;
        master->conn.tls_name = redis->ssl_name;  // else the address the Sentinels give
    } else if (add_configured(redis) != NGX_OK) {
        return NGX_ERROR;
    }
    if (redis->cluster && !rl_cluster_init(redis)) return NGX_ERROR;
    return NGX_OK;
}

void rl_redis_stop(rl_redis_t* redis) noexcept {
    rl_sentinel_exit(redis);
    rl_resolve_exit(redis);
    for (ngx_uint_t k = 0; k < redis->nodes.n; k++) rl_conn_close(&redis->nodes.elts[k]->conn);
}
