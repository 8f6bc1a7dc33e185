// One server of a ratelimit_redis, in a worker (node.cpp): its connection, the code it runs
// (Functions, or scripts before Redis 7), sending within max_pending, and what a script call's
// reply means for its caller. The per-request store (stores/redis_request.cpp) and the sync engine (sync/) both
// go through it, so reloading the Lua after NOSCRIPT, following MOVED / ASK, TRYAGAIN and the
// cap on retries are written once.
#pragma once

#include "ngx/redis/redis.h"

#include "core/wire/redis_command.h"

struct rl_redis_node_t {
    rl_conn_t conn;
    rl_redis_t* redis;
    ngx_uint_t index;      // in redis->nodes (an entry never moves)
    ngx_queue_t queued;    // the request path's calls waiting for the end of the loop turn (stores/redis_request.cpp)
    ngx_uint_t nqueued;
    ngx_uint_t batches;    // the request path's script runs in flight (stores/redis_request.cpp)
    unsigned reloading:1;  // a FUNCTION LOAD or SCRIPT LOAD is in flight after the code went missing
    unsigned scripts:1;    // the server took no FUNCTION LOAD (before Redis 7): EVALSHA instead
    unsigned retired:1;    // dropped from a cluster's map (rl_node_retire): takes nothing
    u_char name[254];      // a cluster node's TLS name as it announced it (conn.tls_name), if any
};

// A new server of the ratelimit_redis (its address, its connection not yet up); nullptr
// without memory. `reuse`: a retired node whose entry (and memory) it takes over.
rl_redis_node_t* rl_node_add(rl_redis_t* redis, const ngx_addr_t& addr, rl_redis_node_t* reuse = nullptr) noexcept;
// Whether nothing is in flight or waiting on the node, nor one of its replies being handled (the
// reply lives in its connection's memory): it can be retired.
bool rl_node_idle(const rl_redis_node_t* node) noexcept;
// Drops an idle node: its connection closed and what it holds freed. The entry stays where it
// is (so a pointer to it kept anywhere stays valid: it takes nothing, and later serves another
// node) until rl_node_add reuses it.
void rl_node_retire(rl_redis_node_t* node) noexcept;
// The connection failed (after its owner failed what it had queued).
void rl_node_failed(rl_redis_node_t* node) noexcept;
// How the node runs the Lua, as its handshake found out.
inline rl::CommandScript rl_node_script(const rl_redis_node_t* node) {
    return node->scripts ? rl::CommandScript::evalsha : rl::CommandScript::fcall;
}
// Whether the node takes `more` commands now: its connection is up or coming up, and what it
// has in flight and queued stays within max_pending (counted and logged when it does not).
bool rl_node_can_take(rl_redis_node_t* node, ngx_uint_t more) noexcept;
// Sends a command carrying `weight` requests, after ASKING when `asking` (ASKING applies to the
// next command on the connection: room for both, or neither goes). nullptr if not sent.
rl_conn_op_t* rl_node_send(rl_redis_node_t* node, const u_char* cmd, size_t len, rl_conn_reply_pt done, void* data,
                           ngx_uint_t weight, bool asking = false) noexcept;
// Scratch memory of a ratelimit_redis for building commands and decoding replies: reused, so
// the request path does not allocate per call; valid until the next call.
void* rl_redis_scratch(rl_redis_t* redis, size_t bytes) noexcept;
bool rl_redis_error_is(const redisReply* reply, const char* prefix) noexcept;
// Loads the Lua again after NOSCRIPT or a missing function, unless a load is in flight.
void rl_node_reload_code(rl_redis_node_t* node) noexcept;
// Logs an error reply, or a reply of a type nothing expects, with Redis's bytes made safe.
void rl_node_log_reply(rl_redis_node_t* node, const char* what, const redisReply* reply) noexcept;

// What a script call's reply means (rl_node_reply).
enum rl_reply_e {
    RL_REPLY_TAKE = 0,  // a reply for the caller to read
    RL_REPLY_RETRY,     // nothing ran: send the same call to retry->node (after ASKING if retry->ask)
    RL_REPLY_SPLIT,     // TRYAGAIN (a slot in migration): a call of several requests goes again
                        // one request per call; a call that cannot be split failed
    RL_REPLY_FAILED,    // no reply, or no retry left
};

// Where a call goes again after RL_REPLY_RETRY.
struct rl_retry_t {
    rl_redis_node_t* node;
    bool ask;
};

// Reads a script call's reply for what Redis can fix at once: NOSCRIPT or a missing function
// (the code is loaded again), MOVED / ASK (the cluster's map learns it), TRYAGAIN.
rl_reply_e rl_node_reply(rl_redis_node_t* node, const redisReply* reply, rl_retry_t* retry) noexcept;
// Counts one more retry of a call (its own counter): false once it has had kRlMaxRetries.
constexpr uint8_t kRlMaxRetries = 5;
inline bool rl_node_retry_left(uint8_t* tries) { return ++*tries <= kRlMaxRetries; }
// A script call's reply the caller could not use: counted, logged (rate limited), and a
// cluster's map asked for again soon (CLUSTERDOWN, TRYAGAIN...).
void rl_node_reply_failed(rl_redis_node_t* node, const char* what, const redisReply* reply) noexcept;
