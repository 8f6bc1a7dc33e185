// A `ratelimit_redis` (conf.cpp): its configuration and, in each worker, its servers (nodes,
// node.h), the connections' shared settings and what the request path and the sync engine
// share on it.
#pragma once

#include "ngx/array.h"
#include "ngx/conf.h"
#include "ngx/redis/conn.h"

struct rl_redis_node_t;

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
    rl_array_t<rl_redis_node_t*> nodes;  // its servers (node.cpp): a cluster's grow as they are found
    ngx_queue_t free_batches; // request.cpp
    void* scratch;            // for building commands and reading replies (node.cpp)
    size_t scratch_size;
    ngx_uint_t mode_check;    // the handshake's reply that tells cluster from standalone
    ngx_uint_t function_check;  // the handshake's FUNCTION LOAD reply
    ngx_str_t function_load;  // the handshake's FUNCTION LOAD, sent again when the function is gone
    ngx_str_t script_load;    // the handshake's SCRIPT LOAD, sent again after a NOSCRIPT
    void* cluster_state;      // cluster.cpp
};

char* rl_redis_directive(ngx_conf_t* cf, ngx_command_t* cmd, void* conf) noexcept;
rl_redis_t* rl_redis_find(rl_main_conf_t* mcf, const ngx_str_t& name) noexcept;
ngx_int_t rl_redis_init_process(ngx_cycle_t* cycle) noexcept;
void rl_redis_exit_process(ngx_cycle_t* cycle) noexcept;
