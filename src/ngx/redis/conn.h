// A worker's connection to one Redis server, on nginx's event loop. It knows RESP, not rate
// limiting: its owner queues commands, each with a callback that gets its reply (replies come
// back in order), and hears of the end of each loop turn and of failures through callbacks.
#pragma once

#include "ngx/ngx_include.h"

#include <hiredis/read.h>
#include <hiredis/hiredis.h>

struct rl_conn_t;
struct rl_conn_op_t;

// Called once per command: with its reply, or with nullptr when the connection failed before
// the reply came. The reply is the callee's only for the duration of the call.
typedef void (*rl_conn_reply_pt)(rl_conn_op_t* op, redisReply* reply);
// An op's reply read straight as integers (rl_conn_expect_ints): false if the callee will not
// take them (it did nothing): `done` then gets the same reply as hiredis reads it.
typedef bool (*rl_conn_ints_pt)(rl_conn_op_t* op, const int64_t* values, size_t n);
typedef void (*rl_conn_event_pt)(rl_conn_t* conn);
// Whether the reply to the handshake's command `index` lets the connection be used.
typedef bool (*rl_conn_handshake_pt)(rl_conn_t* conn, ngx_uint_t index, const redisReply* reply);

// One command in flight, owned by the connection. `done` gets its reply (or nullptr), unless
// `data` is nullptr; owners that give up on a command keep that state on their side.
struct rl_conn_op_t {
    ngx_queue_t queue;
    rl_conn_reply_pt done;
    void* data;
    uintptr_t tag;         // the owner's own index
    rl_conn_t* conn;
    ngx_uint_t weight;     // requests it carries (a batch carries many)
    ngx_msec_t queued_at;  // when it was queued: a connection whose oldest is long overdue is closed
    uint64_t sent_ns;      // a batch's write time on a monotonic clock, when metrics measure it
    rl_conn_ints_pt ints;  // or nullptr: a reply of exactly `nints` integers goes here, not to `done`
    size_t nints;
};

enum rl_conn_state_e {
    RL_CONN_DOWN = 0,    // not connected; connects when asked to send
    RL_CONN_CONNECTING,  // commands queue; they are written once connected
    RL_CONN_READY,       // connected (the handshake's commands lead the pipeline)
    RL_CONN_BACKOFF,     // failed recently: nothing is taken until the retry timer
};

// What the connections of one ratelimit_redis share in a worker: settings, the owner's
// callbacks, recycled ops and the rate limit of their error log.
struct rl_conn_shared_t {
    ngx_str_t name;              // the ratelimit_redis, for the log
    const char* role;            // what the servers are, for the log (": sentinel"), or nullptr
    ngx_log_t* log;
    ngx_msec_t timeout;          // a command unanswered for longer (and 1 s) means a dead connection
    ngx_msec_t connect_timeout;
    const u_char* handshake;     // written first on each connection
    size_t handshake_len;
    ngx_uint_t handshake_replies;
    rl_conn_handshake_pt handshake_reply;
    rl_conn_event_pt fill;       // the flush is about to write: the owner adds what it queued
    rl_conn_event_pt failed;     // the connection failed; its ops have had their nullptr reply
    ngx_queue_t free_ops;
    time_t error_logged;         // errors are logged once per second
    ngx_uint_t errors_suppressed;
    struct rl_metrics_redis_t* metrics;  // shared-memory counters (metrics/metrics.h), or nullptr
    void* ssl;                   // the ngx_ssl_t when connections speak TLS (tls.cpp), or nullptr
    bool ssl_verify;             // the certificate and its name are checked
};

struct rl_conn_t {
    rl_conn_shared_t* shared;
    void* data;                  // the owner's
    ngx_addr_t addr;
    ngx_peer_connection_t peer;
    ngx_connection_t* c;
    rl_conn_state_e state;
    redisReader* reader;
    void* arena;                 // where the reader builds replies (conn.cpp)
    size_t arena_bytes;          // taken by the reply being read: bounded
    u_char* in;                  // the start of an integer reply split between reads (rl_conn_expect_ints)
    size_t in_len;
    size_t in_cap;
    int64_t* ints;               // where such a reply's integers are read into
    size_t ints_cap;
    u_char* out;                 // commands not yet written: out[sent, len)
    size_t out_len;
    size_t out_sent;
    size_t out_cap;
    ngx_queue_t inflight;        // ops written or queued, in reply order
    ngx_uint_t ninflight;        // their weight
    ngx_uint_t handshake;        // handshake replies still expected
    size_t handshake_sent;       // bytes of shared->handshake written
    ngx_msec_t ready_at;         // when it connected: commands queued before wait from here
    ngx_msec_t backoff;
    ngx_event_t retry;           // reconnect after a failure
    ngx_event_t flush;           // posted: one write for all commands of this loop turn
    ngx_event_t watchdog;        // closes the connection when its oldest command is long overdue
    ngx_log_t log;               // what nginx logs on the connection is kept here (last_error), and
                                 // reported by us, rate limited
    u_char last_error[160];      // nginx's last message about this connection (OpenSSL's reason)
    size_t last_error_len;
    ngx_str_t tls_name;          // checked against the certificate, sent as SNI unless an address
    void* tls_session;           // the last TLS session, resumed on reconnect
    ngx_sockaddr_t sockaddr;     // the address, once rl_conn_set_addr gave one
    u_char addr_text[NGX_SOCKADDR_STRLEN];
    unsigned flushing:1;         // in the flush: what is queued now is written by it
    unsigned too_large:1;        // the reply being read went past the bounds
    unsigned delivering:1;       // handing a reply (or a failure) to its ops: not to be freed under them
};

// `addr` may have no sockaddr yet (a Sentinel's master, a name to resolve): the connection then
// takes nothing until rl_conn_set_addr gives it one.
void rl_conn_init(rl_conn_t* conn, rl_conn_shared_t* shared, const ngx_addr_t& addr, void* data) noexcept;
// Points the connection at another address (copied): an open connection to the old one is
// closed (what it had in flight fails). False if it is the same address.
bool rl_conn_set_addr(rl_conn_t* conn, const struct sockaddr* sa, socklen_t len) noexcept;
// Whether the connection takes commands now (connecting it if it is down).
bool rl_conn_usable(rl_conn_t* conn) noexcept;
// Queues a command for the end of this loop turn; nullptr if unusable or out of memory.
rl_conn_op_t* rl_conn_send(rl_conn_t* conn, const u_char* cmd, size_t len, rl_conn_reply_pt done, void* data,
                           uintptr_t tag, ngx_uint_t weight = 1) noexcept;
// The op's reply, when it is an array of exactly `n` integers, is read straight into integers
// for `ints` (no reply object per element); any other reply still goes to its `done`.
void rl_conn_expect_ints(rl_conn_op_t* op, rl_conn_ints_pt ints, size_t n) noexcept;
// Makes the connection write (and ask its owner to fill) at the end of this loop turn.
void rl_conn_schedule_flush(rl_conn_t* conn) noexcept;
// Closes it at worker exit: what is still in flight gets no reply (nor callback).
void rl_conn_close(rl_conn_t* conn) noexcept;
// Closes an idle connection for good and frees what it holds (its buffers, its reader, its TLS
// session): the struct may be initialized again (rl_conn_init).
void rl_conn_free(rl_conn_t* conn) noexcept;

// Logs a Redis error at most once per second per ratelimit_redis (and worker), with the number
// of errors not logged since. Bytes that came from Redis go through rl::log_text first.
void rl_redis_log_error(rl_conn_shared_t* shared, ngx_err_t err, const char* fmt, ...) noexcept;
