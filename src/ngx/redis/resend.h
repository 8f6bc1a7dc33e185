// A command that goes where Redis sends it (resend.cpp): kept with its bytes (its owner's)
// until its reply, and sent again after a MOVED (the slot map learns it), an ASK (after ASKING)
// or a NOSCRIPT that reloaded the code, at most kRlMaxRetries times, as every call of the
// request path is (node.h). Fire and forget for whoever sends it: nothing waits on it, and each
// try is bounded by its connection's timers (connect_timeout, the overdue watchdog), whose
// failure is its end. The settles (stores/redis_settle.cpp), refunds (stores/redis_request.cpp) and
// the in-flight slots' releases and refreshes (stores/redis_held.cpp) go through it.
#pragma once

#include "ngx/redis/node.h"

struct rl_resend_t;

// The end of a command: `taken` when `reply` is Redis's answer to it (which may still be an
// error of its own); else it failed (no reply, no retry left, or a redirect it could not
// follow: `reply` is then that error, or nullptr). `node` is the server that last had it.
typedef void (*rl_resend_done_pt)(rl_resend_t* cmd, rl_redis_node_t* node, const redisReply* reply, bool taken);

struct rl_resend_t {
    rl_resend_done_pt done;
    void* data;              // the owner's
    const u_char* bytes;     // the command (the owner's, kept until done)
    size_t len;
    ngx_uint_t weight;       // requests it carries, for max_pending (0: none waits on it)
    uint8_t tries;           // retries so far (rl_node_retry_left)
};

// The server for a key of cluster slot `slot`: its owner as the map says, or the one server
// of a ratelimit_redis that is not a cluster; nullptr when there is none.
rl_redis_node_t* rl_resend_route(rl_redis_t* redis, uint16_t slot) noexcept;
// Sends the command to `node` (after ASKING when `ask`). False if it was not taken (no node,
// its connection backing off, max_pending): `done` is not called then.
bool rl_resend_send(rl_resend_t* cmd, rl_redis_node_t* node, bool ask = false) noexcept;
// For owners that send and forget: true if the end is a failure (no reply, an error reply,
// no retry left), which is then counted (an error reply) and logged as `what`.
bool rl_resend_failed(rl_redis_node_t* node, const char* what, const redisReply* reply, bool taken) noexcept;
