// Redis state for ratelimit zones: the configuration of a `ratelimit_redis` and, in each
// worker, its persistent pipelined connections driven by nginx's event loop.
#pragma once

#include "ngx_include.h"

#include <hiredis/read.h>
#include <hiredis/hiredis.h>

struct rl_redis_t;
struct rl_redis_node_t;
struct rl_redis_op_t;

// Called once per operation: with its reply, or with nullptr when the connection failed
// before the reply came. The reply belongs to the caller only for the duration of the call.
typedef void (*rl_redis_done_pt)(rl_redis_op_t* op, redisReply* reply);

// One command in flight on a connection. Owned by the connection; the owner only keeps a
// pointer to abandon it (data = nullptr), and must forget it once `done` has been called.
struct rl_redis_op_t {
    ngx_queue_t queue;
    rl_redis_done_pt done;
    void* data;      // the owner, or nullptr once abandoned (the reply is then dropped)
    uintptr_t tag;   // the owner's own index
    rl_redis_node_t* node;
    ngx_uint_t weight;  // requests it carries (a batch carries many): what max_pending counts
};

enum rl_conn_state_e {
    RL_CONN_DOWN = 0,    // not connected; a connect starts at the next send or retry
    RL_CONN_CONNECTING,  // commands queue, they are written once connected
    RL_CONN_READY,       // connected (the handshake's commands lead the pipeline)
    RL_CONN_BACKOFF,     // failed recently: sends fail at once until the retry timer
};

// One server of a ratelimit_redis, with this worker's connection to it.
struct rl_redis_node_t {
    rl_redis_t* redis;
    ngx_addr_t addr;
    ngx_peer_connection_t peer;
    ngx_connection_t* c;
    rl_conn_state_e state;
    redisReader* reader;
    void* arena;             // where the reader builds replies (redis_conn.cpp)
    u_char* out;             // commands not yet written: out[sent, len)
    size_t out_len;
    size_t out_sent;
    size_t out_cap;
    ngx_queue_t inflight;    // ops written or queued, in reply order
    ngx_uint_t ninflight;    // their weight
    ngx_queue_t queued;      // requests' calls waiting for the end of the loop turn (rl_call_t)
    ngx_uint_t nqueued;
    ngx_uint_t handshake;    // handshake replies still expected
    ngx_msec_t backoff;
    ngx_event_t retry;       // reconnect after a failure
    ngx_event_t flush;       // posted: one write for all commands queued in this loop turn
    ngx_log_t log;           // connect errors are reported by us, rate limited
    unsigned reloading:1;    // a SCRIPT LOAD is in flight after a NOSCRIPT
    unsigned flushing:1;     // in the flush handler: no need to post it again
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
    ngx_uint_t max_pending;   // ops in flight per connection before on_error applies
    u_char* file;
    ngx_uint_t line;

    // Per worker, from init_process on.
    ngx_log_t* log;
    ngx_pool_t* pool;         // the cycle's: addresses of cluster nodes found at run time
    rl_redis_node_t** nodes;
    ngx_uint_t nnodes;
    ngx_uint_t nodes_cap;
    ngx_queue_t free_ops;
    ngx_queue_t free_batches; // redis_request.cpp
    void* scratch;            // for building commands and reading replies
    size_t scratch_size;
    u_char* handshake;        // AUTH / SELECT / SCRIPT LOAD, written first on each connection
    size_t handshake_len;
    ngx_uint_t handshake_replies;
    u_char* script_load;      // the handshake's SCRIPT LOAD, sent again after a NOSCRIPT
    size_t script_load_len;
    time_t error_logged;      // errors are logged once per second
    ngx_uint_t errors_suppressed;
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
ngx_int_t rl_redis_check_modes(ngx_cycle_t* cycle) noexcept;
void rl_redis_exit_process(ngx_cycle_t* cycle) noexcept;

// redis_conn.cpp
// Queues a command on a node; nullptr if the node cannot take it now (down, backing off,
// too many in flight): the caller applies on_error at once.
rl_redis_op_t* rl_redis_send(rl_redis_node_t* node, const u_char* cmd, size_t len, rl_redis_done_pt done,
                             void* data, uintptr_t tag, ngx_uint_t weight = 1) noexcept;
// Whether the node can take `more` commands now (connecting it if it is down).
bool rl_redis_can_send(rl_redis_node_t* node, ngx_uint_t more) noexcept;
// Writes what is queued at the end of this event-loop turn.
void rl_redis_schedule_flush(rl_redis_node_t* node) noexcept;
rl_redis_node_t* rl_redis_node_create(rl_redis_t* redis, const ngx_addr_t& addr) noexcept;
void rl_redis_node_connect(rl_redis_node_t* node) noexcept;
// Closes the node's connection at worker exit: nothing is in flight any more by then.
void rl_redis_node_close(rl_redis_node_t* node) noexcept;
// After a NOSCRIPT: queues SCRIPT LOAD unless one is already in flight, so that commands
// queued after it find the script again.
void rl_redis_reload_script(rl_redis_node_t* node) noexcept;
// redis_request.cpp: the calls queued on a node go out as batches (from the flush), or fail
// (when the node fails).
void rl_redis_flush_queued(rl_redis_node_t* node) noexcept;
void rl_redis_fail_queued(rl_redis_node_t* node) noexcept;
// Logs a Redis error at most once per second per ratelimit_redis.
void rl_redis_error(rl_redis_t* redis, const char* fmt, ...) noexcept;
