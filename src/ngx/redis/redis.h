// A `ratelimit_redis` (directive.cpp): its configuration and, in each worker (worker.cpp), its
// servers (nodes, node.h) and the connections' shared settings. The transport: it knows RESP,
// servers, clusters, Sentinels, TLS and names, not what its users send; the per-request store
// keeps its own state beside it (`store`).
#pragma once

#include "ngx/base/array.h"
#include "ngx/base/conf.h"
#include "ngx/redis/conn.h"

struct rl_redis_node_t;
struct rl_redis_store_t;

// One address as configured: host and port, and the socket address once known (at
// configuration time, or in the worker for `resolve`).
struct rl_redis_addr_t {
    ngx_addr_t addr;          // sockaddr nullptr until resolved
    ngx_str_t host;           // as written (without brackets), for TLS and the resolver
    in_port_t port;
    bool literal;             // an IP address: nothing to resolve
};

struct rl_redis_t {
    ngx_str_t name;
    bool cluster;
    ngx_array_t* addrs;       // of rl_redis_addr_t: the server, a cluster's seed nodes, or the Sentinels
    ngx_str_t sentinel;       // sentinel=MASTER_NAME: the addresses are Sentinels
    ngx_str_t sentinel_username;
    ngx_str_t sentinel_password;
    bool resolve;             // host names are resolved again in the worker (resolve.cpp)
    ngx_resolver_t* resolver; // the front end block's, for `resolve`
    ngx_msec_t resolver_timeout;
    // TLS (tls.cpp): every connection of this Redis, the Sentinels' too.
    bool ssl;
    bool ssl_verify;
    ngx_str_t ssl_name;       // the name checked and sent as SNI; default: the address's host
    ngx_str_t ssl_trusted_certificate;
    ngx_str_t ssl_certificate;
    ngx_str_t ssl_certificate_key;
    void* ssl_ctx;            // the ngx_ssl_t, made when the configuration is read
    ngx_str_t username;
    ngx_str_t password;
    ngx_int_t database;
    ngx_msec_t timeout;
    ngx_msec_t connect_timeout;
    ngx_str_t prefix;
    ngx_uint_t max_pending;   // calls in flight per node before on_error applies
    u_char* file;
    ngx_uint_t line;

    // Per worker, from init_process on.
    rl_conn_shared_t conn;    // what its connections share: settings, callbacks, error log
    ngx_pool_t* pool;         // the cycle's: addresses of cluster nodes found at run time
    rl_array_t<rl_redis_node_t*> nodes;  // its servers (node.cpp): a cluster's grow as they are found
    void* scratch;            // for building commands and reading replies (node.cpp)
    size_t scratch_size;
    ngx_uint_t mode_check;    // the handshake's reply that tells cluster, standalone, Sentinel apart
    ngx_uint_t role_check;    // (sentinel=) the handshake's ROLE
    ngx_uint_t function_check;  // the handshake's FUNCTION LOAD reply
    ngx_str_t function_load;  // the handshake's FUNCTION LOAD, sent again when the function is gone
    ngx_str_t script_load;    // the handshake's SCRIPT LOAD, sent again after a NOSCRIPT
    void* cluster_state;      // cluster.cpp
    void* sentinel_state;     // sentinel.cpp
    void* resolve_state;      // resolve.cpp
    rl_redis_store_t* store;  // the per-request store's state here (stores/redis_state.h)
    // Called when a node's connection fails or its server says it cannot take writes
    // (READONLY, MASTERDOWN): where the address comes from (Sentinel, DNS) may know better.
    void (*address_stale)(rl_redis_node_t* node);
};

// Appends one command in RESP to `out` (in `pool`); AUTH [username] password (handshake.cpp).
bool rl_redis_append_command(ngx_pool_t* pool, ngx_str_t& out, int argc, const char** argv,
                             const size_t* lens) noexcept;
bool rl_redis_append_auth(ngx_pool_t* pool, ngx_str_t& out, const ngx_str_t& username,
                          const ngx_str_t& password) noexcept;

// ratelimit_redis (directive.cpp): the server, checked, among `all` (of rl_redis_t*).
char* rl_redis_parse(ngx_conf_t* cf, ngx_array_t* all) noexcept;
// The ratelimit_redis `name` of `all`, or nullptr.
rl_redis_t* rl_redis_find(const ngx_array_t* all, const ngx_str_t& name) noexcept;
// Once the block (`block`: "http", "stream") is read: each ratelimit_redis with `resolve` gets
// the block's resolver (an error names the directive when there is none).
ngx_int_t rl_redis_set_resolver(ngx_conf_t* cf, ngx_array_t* all, const char* block, ngx_resolver_t* resolver,
                                ngx_msec_t resolver_timeout) noexcept;

// In a worker (worker.cpp): the handshake written on every connection, the servers, and their
// connections, opened now. The owner's callbacks (redis->conn.fill, .failed) are set before.
ngx_int_t rl_redis_start(rl_redis_t* redis, ngx_cycle_t* cycle) noexcept;
void rl_redis_stop(rl_redis_t* redis) noexcept;
// handshake.cpp: the handshake's commands and the check of their replies.
bool rl_redis_build_handshake(ngx_pool_t* pool, rl_redis_t* redis) noexcept;
bool rl_redis_check_handshake(rl_conn_t* conn, ngx_uint_t index, const redisReply* reply) noexcept;
