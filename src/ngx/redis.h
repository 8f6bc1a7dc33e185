// Redis state for ratelimit zones: the configuration of a `ratelimit_redis` and, in each
// worker, its servers (nodes): a connection each (redis_conn.h) and the calls of requests
// waiting for the end of the event-loop turn (redis_request.cpp).
#pragma once

#include "ngx_include.h"
#include "redis_conn.h"

#include "core/redis_command.h"

struct rl_redis_t;

// One server of a ratelimit_redis, in a worker.
struct rl_redis_node_t {
    rl_conn_t conn;
    rl_redis_t* redis;
    ngx_queue_t queued;    // requests' calls waiting for the end of the loop turn (rl_call_t)
    ngx_uint_t nqueued;
    unsigned reloading:1;  // a FUNCTION LOAD or SCRIPT LOAD is in flight after the code went missing
    unsigned scripts:1;    // the server took no FUNCTION LOAD (before Redis 7): EVALSHA instead
};

// One `ratelimit_redis` directive.
struct rl_redis_t {
    ngx_str_t name;
    bool cluster;
    ngx_array_t* addrs;       // of ngx_addr_t: the server, or the cluster's seed nodes
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
    rl_redis_node_t** nodes;
    ngx_uint_t nnodes;
    ngx_uint_t nodes_cap;
    ngx_queue_t free_batches; // redis_request.cpp
    void* scratch;            // for building commands and reading replies
    size_t scratch_size;
    ngx_uint_t mode_check;    // the handshake's reply that tells cluster from standalone
    ngx_uint_t function_check;  // the handshake's FUNCTION LOAD reply
    ngx_str_t function_load;  // the handshake's FUNCTION LOAD, sent again when the function is gone
    ngx_str_t script_load;    // the handshake's SCRIPT LOAD, sent again after a NOSCRIPT
    void* cluster_state;      // redis_cluster.cpp
};

struct rl_main_conf_t {
    ngx_array_t redis;  // of rl_redis_t*
    ngx_array_t zones;  // of rl_zone_t*, to resolve their redis= once the http block is read
};

// redis_conf.cpp
char* rl_redis_directive(ngx_conf_t* cf, ngx_command_t* cmd, void* conf) noexcept;
rl_redis_t* rl_redis_find(rl_main_conf_t* mcf, const ngx_str_t& name) noexcept;
ngx_int_t rl_redis_init_process(ngx_cycle_t* cycle) noexcept;
void rl_redis_exit_process(ngx_cycle_t* cycle) noexcept;

// redis_request.cpp
rl_redis_node_t* rl_redis_node_create(rl_redis_t* redis, const ngx_addr_t& addr) noexcept;
// The connections' callbacks: the end of a loop turn sends the calls queued on the node as
// batches; a failed connection fails them.
void rl_redis_fill(rl_conn_t* conn) noexcept;
void rl_redis_failed(rl_conn_t* conn) noexcept;
// What the sync engine (sync.cpp) shares with the request path: sending on a node within
// max_pending, how the node runs the Lua, the scratch buffer (valid until the next call),
// error replies, reloading the Lua after NOSCRIPT, and the sanitized, rate-limited log.
rl_conn_op_t* rl_redis_send(rl_redis_node_t* node, const u_char* cmd, size_t len, rl_conn_reply_pt done,
                            void* data) noexcept;
rl::CommandScript rl_redis_script(const rl_redis_node_t* node) noexcept;
void* rl_redis_scratch(rl_redis_t* redis, size_t bytes) noexcept;
bool rl_redis_error_is(const redisReply* reply, const char* prefix) noexcept;
void rl_redis_reload_code(rl_redis_node_t* node) noexcept;
void rl_redis_log_reply(rl_redis_t* redis, rl_redis_node_t* node, const char* what, const redisReply* reply) noexcept;
