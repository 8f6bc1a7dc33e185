// A worker's connection to one Redis server, driven by nginx's event loop: the commands of a
// loop turn are appended to one output buffer and written together; their replies come back in
// order and go to the ops of the in-flight queue. A connection that fails, or whose oldest
// command is long overdue, is closed: its ops fail at once (the owner applies on_error) and it
// is opened again after a short backoff.
#include "ngx/redis/conn.h"

#include "core/text/log_text.h"
#include "core/wire/resp_ints.h"
#include "ngx/metrics/metrics.h"
#include "ngx/redis/tls.h"

#include <cstdarg>
#include <cstdio>

namespace {

constexpr ngx_msec_t kBackoffMin = 50;
constexpr ngx_msec_t kBackoffMax = 400;  // limiting resumes well within a second of Redis coming back
constexpr size_t kReadChunk = 16384;
constexpr ngx_msec_t kDeadAfter = 1000;  // or the timeout if longer: see on_watchdog

// What one reply may take. Far above anything asked for (a batch's reply is a few thousand
// integers, CLUSTER SLOTS of a large cluster some hundred KB): a server announcing more is
// broken or hostile, and the connection is dropped rather than the worker growing.
constexpr size_t kMaxReplyBytes = 16 * 1024 * 1024;   // the parsed reply, all elements
constexpr size_t kMaxPendingBytes = 1024 * 1024;      // one element still being received
constexpr long long kMaxReplyElements = 1 << 20;      // one array's announced length

// Replies are parsed into an arena of the connection instead of one malloc per element (a
// batch's reply has hundreds): reset after each reply is handled, freed on failure.
struct rl_arena_chunk_t {
    rl_arena_chunk_t* next;
    size_t size;
    size_t used;
    // data follows
};

constexpr size_t kArenaChunk = 16384;

void* arena_alloc(rl_conn_t* conn, size_t n) {
    n = (n + 15) & ~size_t{15};
    if (conn->arena_bytes + n > kMaxReplyBytes) {
        conn->too_large = 1;
        return nullptr;
    }
    auto* c = static_cast<rl_arena_chunk_t*>(conn->arena);
    if (c == nullptr || c->used + n > c->size) {
        size_t size = n > kArenaChunk ? n : kArenaChunk;
        auto* fresh = static_cast<rl_arena_chunk_t*>(ngx_alloc(sizeof(rl_arena_chunk_t) + size, ngx_cycle->log));
        if (fresh == nullptr) return nullptr;
        fresh->next = c;
        fresh->size = size;
        fresh->used = 0;
        conn->arena = c = fresh;
    }
    void* p = reinterpret_cast<u_char*>(c + 1) + c->used;
    c->used += n;
    conn->arena_bytes += n;
    ngx_memzero(p, n);
    return p;
}

// Keeps the newest chunk for the next reply (unless `all`), frees the others.
void arena_reset(rl_conn_t* conn, bool all) {
    auto* c = static_cast<rl_arena_chunk_t*>(conn->arena);
    conn->arena_bytes = 0;
    if (c == nullptr) return;
    rl_arena_chunk_t* rest = all ? c : c->next;
    if (all) {
        conn->arena = nullptr;
    } else {
        c->next = nullptr;
        c->used = 0;
    }
    while (rest != nullptr) {
        rl_arena_chunk_t* next = rest->next;
        ngx_free(rest);
        rest = next;
    }
}

// hiredis's reply builders, on the arena (the reader's privdata is the connection).
redisReply* reply_object(const redisReadTask* task, int type) {
    auto* r = static_cast<redisReply*>(arena_alloc(static_cast<rl_conn_t*>(task->privdata), sizeof(redisReply)));
    if (r == nullptr) return nullptr;
    r->type = type;
    if (task->parent != nullptr) {
        auto* parent = static_cast<redisReply*>(task->parent->obj);
        parent->element[task->idx] = r;
    }
    return r;
}

void* create_string(const redisReadTask* task, char* str, size_t len) {
    redisReply* r = reply_object(task, task->type);
    if (r == nullptr) return nullptr;
    auto* copy = static_cast<char*>(arena_alloc(static_cast<rl_conn_t*>(task->privdata), len + 1));
    if (copy == nullptr) return nullptr;
    if (len > 0) ngx_memcpy(copy, str, len);
    r->str = copy;
    r->len = len;
    return r;
}

void* create_array(const redisReadTask* task, int elements) {
    auto* conn = static_cast<rl_conn_t*>(task->privdata);
    if (elements > kMaxReplyElements) {  // checked before its pointers are allocated
        conn->too_large = 1;
        return nullptr;
    }
    redisReply* r = reply_object(task, REDIS_REPLY_ARRAY);
    if (r == nullptr) return nullptr;
    if (elements > 0) {
        size_t bytes = static_cast<size_t>(elements) * sizeof(redisReply*);
        r->element = static_cast<redisReply**>(arena_alloc(conn, bytes));
        if (r->element == nullptr) return nullptr;
    }
    r->elements = static_cast<size_t>(elements);
    return r;
}

void* create_integer(const redisReadTask* task, long long value) {
    redisReply* r = reply_object(task, REDIS_REPLY_INTEGER);
    if (r != nullptr) r->integer = value;
    return r;
}

void* create_nil(const redisReadTask* task) { return reply_object(task, REDIS_REPLY_NIL); }

void free_object(void*) {}  // the arena is reset as a whole

redisReplyObjectFunctions kArenaReplies = {create_string, create_array, create_integer, create_nil, free_object};

void conn_fail(rl_conn_t* conn, rl_redis_error_e reason, ngx_err_t err, const char* why) noexcept;
void io_failed(rl_conn_t* conn, rl_redis_error_e reason, ngx_err_t err, const char* what);

const char* role_of(const rl_conn_shared_t* shared) { return shared->role != nullptr ? shared->role : ""; }

// What nginx logs about the connection (a failed connect, OpenSSL's reason for a failed
// handshake, read or write) is kept, not written: conn_fail reports it, rate limited. Alerts
// (no file descriptors left, worker_connections too few) are the worker's, and written.
void keep_error(ngx_log_t* log, ngx_uint_t level, u_char* buf, size_t len) {
    auto* conn = static_cast<rl_conn_t*>(log->wdata);
    // "2026/11/25 16:00:00 [crit] 1234#0: *5 SSL_do_handshake() failed (...)": from the message on.
    u_char* end = buf + len;
    u_char* p = ngx_strlchr(buf, end, '#');
    if (p != nullptr && (p = ngx_strlchr(p, end, ':')) != nullptr) {
        p += 2;
        if (p < end && *p == '*') {
            while (p < end && *p != ' ') p++;
            p++;
        }
    }
    if (p == nullptr || p >= end) p = buf;
    while (end > p && (end[-1] == '\n' || end[-1] == ' ')) end--;
    conn->last_error_len = rl::log_text(reinterpret_cast<char*>(p), static_cast<size_t>(end - p),
                                        reinterpret_cast<char*>(conn->last_error), sizeof(conn->last_error));
    if (level <= NGX_LOG_ALERT) {
        ngx_log_error(level, conn->shared->log, 0, "ratelimit redis \"%V\"%s at %V: %*s", &conn->shared->name,
                      role_of(conn->shared), &conn->addr.name, conn->last_error_len, conn->last_error);
    }
}

// Closes the socket (and its TLS state and pool) of a connection.
void close_socket(rl_conn_t* conn) {
    ngx_connection_t* c = conn->c;
    if (c == nullptr) return;
    conn->c = nullptr;
    rl_tls_close(c);
    ngx_pool_t* pool = c->pool;
    ngx_close_connection(c);
    if (pool != nullptr) ngx_destroy_pool(pool);
}

rl_conn_op_t* op_alloc(rl_conn_shared_t* shared) {
    if (!ngx_queue_empty(&shared->free_ops)) {
        ngx_queue_t* q = ngx_queue_head(&shared->free_ops);
        ngx_queue_remove(q);
        return ngx_queue_data(q, rl_conn_op_t, queue);
    }
    return static_cast<rl_conn_op_t*>(ngx_alloc(sizeof(rl_conn_op_t), shared->log));
}

void op_free(rl_conn_shared_t* shared, rl_conn_op_t* op) { ngx_queue_insert_head(&shared->free_ops, &op->queue); }

// A connection lost before it was up was refused (a refusal may show as a failed read first).
rl_redis_error_e lost(const rl_conn_t* conn) {
    return conn->state == RL_CONN_CONNECTING ? RL_REDIS_ERR_REFUSED : RL_REDIS_ERR_RESET;
}

bool out_reserve(rl_conn_t* conn, size_t more) {
    if (conn->out_sent > 0 && conn->out_sent == conn->out_len) conn->out_sent = conn->out_len = 0;
    if (conn->out_len + more <= conn->out_cap) return true;
    if (conn->out_sent > 0) {  // reclaim what was written before growing
        ngx_memmove(conn->out, conn->out + conn->out_sent, conn->out_len - conn->out_sent);
        conn->out_len -= conn->out_sent;
        conn->out_sent = 0;
        if (conn->out_len + more <= conn->out_cap) return true;
    }
    size_t cap = conn->out_cap ? conn->out_cap : 16384;
    while (cap < conn->out_len + more) cap *= 2;
    auto* buf = static_cast<u_char*>(ngx_alloc(cap, conn->shared->log));
    if (buf == nullptr) return false;
    if (conn->out_len) ngx_memcpy(buf, conn->out, conn->out_len);
    ngx_free(conn->out);
    conn->out = buf;
    conn->out_cap = cap;
    return true;
}

ngx_msec_t dead_after(const rl_conn_t* conn) {
    return conn->shared->timeout > kDeadAfter ? conn->shared->timeout : kDeadAfter;
}

void arm_watchdog(rl_conn_t* conn) {
    if (conn->state == RL_CONN_READY && !conn->watchdog.timer_set) ngx_add_timer(&conn->watchdog, dead_after(conn));
}

rl_conn_op_t* enqueue(rl_conn_t* conn, const u_char* cmd, size_t len, rl_conn_reply_pt done, void* data,
                      uintptr_t tag, ngx_uint_t weight) {
    rl_conn_op_t* op = op_alloc(conn->shared);
    if (op == nullptr || !out_reserve(conn, len)) {
        if (op) op_free(conn->shared, op);
        return nullptr;
    }
    if (len > 0) ngx_memcpy(conn->out + conn->out_len, cmd, len);
    conn->out_len += len;
    op->done = done;
    op->data = data;
    op->tag = tag;
    op->conn = conn;
    op->weight = weight;
    op->queued_at = ngx_current_msec;
    op->sent_ns = conn->flushing ? rl_metrics_now_ns(conn->shared->metrics) : 0;  // a batch, written right now
    op->ints = nullptr;
    ngx_queue_insert_tail(&conn->inflight, &op->queue);
    conn->ninflight += weight;
    rl_metrics_in_flight(conn->shared->metrics, static_cast<ngx_int_t>(weight));
    arm_watchdog(conn);
    rl_conn_schedule_flush(conn);
    return op;
}

void handshake_done(rl_conn_op_t* op, redisReply* reply) noexcept {
    auto* conn = static_cast<rl_conn_t*>(op->data);
    if (reply == nullptr) return;  // the connection failed: conn_fail handles it
    conn->handshake--;
    if (!conn->shared->handshake_reply(conn, op->tag, reply)) {
        conn_fail(conn, RL_REDIS_ERR_ERROR_REPLY, 0, nullptr);  // the owner said why
        return;
    }
    if (conn->handshake == 0) {
        conn->backoff = kBackoffMin;  // a healthy connection again
        ngx_log_debug2(NGX_LOG_DEBUG_HTTP, conn->shared->log, 0, "ratelimit redis \"%V\" at %V: handshake done",
                       &conn->shared->name, &conn->addr.name);
        rl_conn_schedule_flush(conn);  // what waited for it goes out now
    }
}

// Writes buf[*sent, len) as far as the socket takes it; false if the connection failed.
bool write_some(rl_conn_t* conn, const u_char* buf, size_t* sent, size_t len) {
    ngx_connection_t* c = conn->c;
    while (*sent < len) {
        ssize_t n = c->send(c, const_cast<u_char*>(buf) + *sent, len - *sent);
        if (n == NGX_AGAIN) break;
        if (n == NGX_ERROR || n <= 0) {
            io_failed(conn, lost(conn), ngx_socket_errno, "write failed");
            return false;
        }
        *sent += static_cast<size_t>(n);
    }
    return true;
}

void on_flush(ngx_event_t* ev) noexcept {
    auto* conn = static_cast<rl_conn_t*>(ev->data);
    if (conn->state != RL_CONN_READY || conn->c == nullptr) return;
    rl_conn_shared_t* shared = conn->shared;
    // The handshake goes first and alone; the rest once it is answered. A server that does not
    // answer (stalled, or the path to it dead) is then never sent checks that it could run
    // late, after their requests were answered with on_error.
    if (!write_some(conn, shared->handshake, &conn->handshake_sent, shared->handshake_len)) return;
    if (conn->handshake == 0) {
        conn->flushing = 1;  // what the owner adds now is written just below
        shared->fill(conn);
        conn->flushing = 0;
        if (conn->c == nullptr) return;
        [[maybe_unused]] size_t before = conn->out_sent;  // for the debug log only
        if (!write_some(conn, conn->out, &conn->out_sent, conn->out_len)) return;
        ngx_log_debug4(NGX_LOG_DEBUG_HTTP, shared->log, 0, "ratelimit redis \"%V\" at %V: sent %uz bytes, %uz left",
                       &shared->name, &conn->addr.name, conn->out_sent - before, conn->out_len - conn->out_sent);
        if (conn->out_sent == conn->out_len) conn->out_sent = conn->out_len = 0;
    }
    if (ngx_handle_write_event(conn->c->write, 0) != NGX_OK) conn_fail(conn, RL_REDIS_ERR_RESET, 0, "write event failed");
}

void on_read(ngx_event_t* rev) noexcept;
void on_write(ngx_event_t* wev) noexcept;

// The connection is up (TCP, then TLS if any): the handshake's commands go out.
void ready(rl_conn_t* conn) {
    conn->state = RL_CONN_READY;
    conn->ready_at = ngx_current_msec;
    arm_watchdog(conn);
    ngx_log_debug2(NGX_LOG_DEBUG_HTTP, conn->shared->log, 0, "ratelimit redis \"%V\" at %V: connected",
                   &conn->shared->name, &conn->addr.name);
    rl_conn_schedule_flush(conn);
}

// The TLS handshake ended (or timed out: the connect timer is on the write event).
void on_tls_done(ngx_connection_t* c) noexcept {
    auto* conn = static_cast<rl_conn_t*>(c->data);
    if (c->write->timer_set) ngx_del_timer(c->write);
    char why[sizeof(conn->last_error) + 2 * rl::kLogTextCap + 64];  // (rl_tls_check names two names)
    if (!rl_tls_handshaked(c)) {
        bool timed_out = c->read->timedout || c->write->timedout;
        if (timed_out) {
            snprintf(why, sizeof(why), "TLS handshake timed out");
        } else {
            snprintf(why, sizeof(why), "TLS handshake failed: %.*s", static_cast<int>(conn->last_error_len),
                     conn->last_error_len ? reinterpret_cast<char*>(conn->last_error) : "closed by the server");
        }
        conn_fail(conn, timed_out ? RL_REDIS_ERR_TIMEOUT : RL_REDIS_ERR_TLS, 0, why);
        return;
    }
    if (!rl_tls_check(conn, why, sizeof(why))) {
        conn_fail(conn, RL_REDIS_ERR_TLS, 0, why);
        return;
    }
    c->read->handler = on_read;
    c->write->handler = on_write;
    ngx_log_debug3(NGX_LOG_DEBUG_HTTP, conn->shared->log, 0, "ratelimit redis \"%V\" at %V: TLS up (%s)",
                   &conn->shared->name, &conn->addr.name, rl_tls_reused(c) ? "session reused" : "new session");
    ready(conn);
}

void connected(rl_conn_t* conn) {
    if (conn->shared->ssl == nullptr) {
        ready(conn);
        return;
    }
    conn->last_error_len = 0;
    ngx_int_t rc = rl_tls_connect(conn, on_tls_done);
    if (rc == NGX_AGAIN) {
        ngx_add_timer(conn->c->write, conn->shared->connect_timeout);
        return;
    }
    if (rc == NGX_OK) {
        on_tls_done(conn->c);
        return;
    }
    char why[sizeof(conn->last_error) + 32];
    snprintf(why, sizeof(why), "TLS handshake failed: %.*s", static_cast<int>(conn->last_error_len),
             reinterpret_cast<char*>(conn->last_error));
    conn_fail(conn, RL_REDIS_ERR_TLS, 0, why);
}

void on_write(ngx_event_t* wev) noexcept {
    auto* c = static_cast<ngx_connection_t*>(wev->data);
    auto* conn = static_cast<rl_conn_t*>(c->data);
    if (conn->state == RL_CONN_CONNECTING) {
        if (wev->timedout) {
            conn_fail(conn, RL_REDIS_ERR_TIMEOUT, NGX_ETIMEDOUT, "connect timed out");
            return;
        }
        if (wev->timer_set) {
            ngx_del_timer(wev);
        }
        int err = 0;
        socklen_t len = sizeof(err);
        if (getsockopt(c->fd, SOL_SOCKET, SO_ERROR, reinterpret_cast<char*>(&err), &len) == -1) err = ngx_socket_errno;
        if (err) {
            conn_fail(conn, RL_REDIS_ERR_REFUSED, err, "connect failed");
            return;
        }
        connected(conn);
        return;
    }
    on_flush(&conn->flush);
}

// The op whose reply came: out of the in-flight queue, its weight and round trip counted.
rl_conn_op_t* op_replied(rl_conn_t* conn) {
    ngx_queue_t* q = ngx_queue_head(&conn->inflight);
    ngx_queue_remove(q);
    auto* op = ngx_queue_data(q, rl_conn_op_t, queue);
    conn->ninflight -= op->weight;
    rl_metrics_in_flight(conn->shared->metrics, -static_cast<ngx_int_t>(op->weight));
    rl_metrics_round_trip(conn->shared->metrics, op->sent_ns);
    return op;
}

// Hands `reply` to `op` (already out of the queue). False if the connection failed meanwhile.
bool deliver(rl_conn_t* conn, ngx_connection_t* c, rl_conn_op_t* op, redisReply* reply) {
    ngx_log_debug4(NGX_LOG_DEBUG_HTTP, conn->shared->log, 0, "ratelimit redis \"%V\" at %V: reply type %d%s",
                   &conn->shared->name, &conn->addr.name, reply->type, op->data ? "" : " (abandoned)");
    conn->delivering = 1;
    if (op->data != nullptr) op->done(op, reply);
    conn->delivering = 0;
    op_free(conn->shared, op);
    if (conn->c != c) return false;  // the handshake's check failed the connection
    arena_reset(conn, false);
    return true;
}

void reader_failed(rl_conn_t* conn) {
    if (conn->too_large) {
        conn_fail(conn, RL_REDIS_ERR_PROTOCOL, 0, "protocol error: reply too large");
        return;
    }
    char text[rl::kLogTextCap];
    size_t n = rl::log_text(conn->reader->errstr, ngx_strlen(conn->reader->errstr), text, sizeof(text));
    u_char why[sizeof(text) + 32];
    *ngx_snprintf(why, sizeof(why) - 1, "protocol error: %*s", n, text) = '\0';
    conn_fail(conn, RL_REDIS_ERR_PROTOCOL, 0, reinterpret_cast<char*>(why));
}

// Hands each complete reply hiredis read to its op. False if the connection failed meanwhile.
// hiredis between two replies, with bytes left whose next reply an op expects as integers:
// those bytes are the integer path's again (take_bytes), not hiredis's.
bool next_is_ints(const rl_conn_t* conn) {
    const redisReader* r = conn->reader;
    if (r->ridx != -1 || r->pos >= r->len || r->buf[r->pos] != '*' || ngx_queue_empty(&conn->inflight)) return false;
    const rl_conn_op_t* op = ngx_queue_data(ngx_queue_head(&conn->inflight), rl_conn_op_t, queue);
    return op->ints != nullptr;
}

bool take_replies(rl_conn_t* conn, ngx_connection_t* c) {
    // The first reply is hiredis's whatever it is: the integer path may have refused it.
    for (bool first = true;; first = false) {
        if (!first && next_is_ints(conn)) return true;
        void* obj = nullptr;
        if (redisReaderGetReply(conn->reader, &obj) != REDIS_OK) {
            reader_failed(conn);
            return false;
        }
        if (obj == nullptr) break;
        if (ngx_queue_empty(&conn->inflight)) {
            conn_fail(conn, RL_REDIS_ERR_PROTOCOL, 0, "protocol error: a reply nothing was asked for");
            return false;
        }
        if (!deliver(conn, c, op_replied(conn), static_cast<redisReply*>(obj))) return false;
    }
    // What is left is one element still arriving: a server announcing a huge one is cut off
    // here rather than buffered.
    if (conn->reader->len - conn->reader->pos > kMaxPendingBytes) {
        conn_fail(conn, RL_REDIS_ERR_PROTOCOL, 0, "protocol error: reply too large");
        return false;
    }
    return true;
}

bool feed_reader(rl_conn_t* conn, ngx_connection_t* c, const u_char* p, size_t len) {
    if (redisReaderFeed(conn->reader, reinterpret_cast<const char*>(p), len) != REDIS_OK) {
        conn_fail(conn, RL_REDIS_ERR_NONE, 0, "out of memory");
        return false;
    }
    return take_replies(conn, c);
}

// Grows a buffer of the connection to hold `n` bytes (what it held is lost).
bool room(void** buf, size_t* cap, size_t n, ngx_log_t* log) {
    if (n <= *cap) return true;
    size_t size = *cap ? *cap : 1024;
    while (size < n) size *= 2;
    void* mem = ngx_alloc(size, log);
    if (mem == nullptr) return false;
    ngx_free(*buf);
    *buf = mem;
    *cap = size;
    return true;
}

// Keeps p[0, len), the start of an integer reply, until more of it comes: p lies in the read's
// buffer, or in conn->in (which then holds it already, or further on).
bool keep_start(rl_conn_t* conn, const u_char* p, size_t len) {
    if (p == conn->in) return true;
    if (conn->in_len == 0 && !room(reinterpret_cast<void**>(&conn->in), &conn->in_cap, len, conn->shared->log)) {
        return false;
    }
    ngx_memmove(conn->in, p, len);
    conn->in_len = len;
    return true;
}

// hiredis reads nothing now: no reply begun, nothing buffered.
bool reader_idle(const rl_conn_t* conn) { return conn->reader->ridx == -1 && conn->reader->pos == conn->reader->len; }

// Moves the bytes hiredis holds past its last reply into conn->in (empty while hiredis reads),
// when the next reply is one for the integer path (next_is_ints). False if not (or no memory:
// hiredis keeps them, and reads them as ever).
bool hand_back(rl_conn_t* conn) {
    if (!next_is_ints(conn)) return false;
    redisReader* r = conn->reader;
    size_t rest = r->len - r->pos;
    if (!room(reinterpret_cast<void**>(&conn->in), &conn->in_cap, rest, conn->shared->log)) return false;
    ngx_memcpy(conn->in, r->buf + r->pos, rest);
    conn->in_len = rest;
    r->pos = r->len;  // consumed: hiredis drops it at its next read
    return true;
}

// The integer path: data[0, n) after what conn->in holds (a reply's start kept from the last
// read, or bytes hiredis handed back). Replies are read straight as integers while the op they
// answer expects them; the first that is not, and all after it, go to hiredis.
bool take_ints(rl_conn_t* conn, ngx_connection_t* c, const u_char* data, size_t n) {
    const u_char* p = data;
    size_t len = n;
    if (conn->in_len > 0) {  // a reply's start came with the last read, or hiredis handed bytes back
        size_t want = conn->in_len + n;
        if (want > conn->in_cap) {
            void* mem = nullptr;
            size_t cap = 0;
            if (!room(&mem, &cap, want, conn->shared->log)) {
                conn_fail(conn, RL_REDIS_ERR_NONE, 0, "out of memory");
                return false;
            }
            ngx_memcpy(mem, conn->in, conn->in_len);
            ngx_free(conn->in);
            conn->in = static_cast<u_char*>(mem);
            conn->in_cap = cap;
        }
        if (n > 0) ngx_memcpy(conn->in + conn->in_len, data, n);
        p = conn->in;
        len = conn->in_len += n;
    }
    while (len > 0 && !ngx_queue_empty(&conn->inflight)) {
        auto* op = ngx_queue_data(ngx_queue_head(&conn->inflight), rl_conn_op_t, queue);
        if (op->ints == nullptr || p[0] != '*') break;
        if (!room(reinterpret_cast<void**>(&conn->ints), &conn->ints_cap, op->nints * sizeof(int64_t),
                  conn->shared->log)) {
            conn_fail(conn, RL_REDIS_ERR_NONE, 0, "out of memory");
            return false;
        }
        size_t used = 0;
        rl::RespInts r = rl::parse_int_array(reinterpret_cast<const char*>(p), len, op->nints, conn->ints, &used);
        if (r == rl::RespInts::kOther) break;
        if (r == rl::RespInts::kMore) {
            if (!keep_start(conn, p, len)) {
                conn_fail(conn, RL_REDIS_ERR_NONE, 0, "out of memory");
                return false;
            }
            return true;
        }
        op = op_replied(conn);
        ngx_log_debug4(NGX_LOG_DEBUG_HTTP, conn->shared->log, 0, "ratelimit redis \"%V\" at %V: %uz integers%s",
                       &conn->shared->name, &conn->addr.name, op->nints, op->data ? "" : " (abandoned)");
        conn->delivering = 1;
        bool taken = op->data == nullptr || op->ints(op, conn->ints, op->nints);
        conn->delivering = 0;
        if (taken) {
            op_free(conn->shared, op);
            if (conn->c != c) return false;
        } else {
            // The owner will not take them (they do not decode): `done` gets the reply as
            // hiredis reads the same bytes, and says why as it always has.
            void* obj = nullptr;
            if (redisReaderFeed(conn->reader, reinterpret_cast<const char*>(p), used) != REDIS_OK ||
                redisReaderGetReply(conn->reader, &obj) != REDIS_OK || obj == nullptr) {
                op_free(conn->shared, op);
                conn_fail(conn, RL_REDIS_ERR_PROTOCOL, 0, "protocol error: an integer reply hiredis does not read");
                return false;
            }
            if (!deliver(conn, c, op, static_cast<redisReply*>(obj))) return false;
        }
        p += used;
        len -= used;
    }
    conn->in_len = 0;
    return len == 0 || feed_reader(conn, c, p, len);
}

// Bytes from the socket. The replies of ops that expect integers (rl_conn_expect_ints) are read
// straight from them; every other reply, and one such an op gets in another shape (an error, a
// redirect, anything malformed or hostile), goes through hiredis's reader as ever, and so do the
// bytes after it until hiredis is between replies with an integer reply next (hand_back).
// False if the connection failed meanwhile.
bool take_bytes(rl_conn_t* conn, ngx_connection_t* c, const u_char* data, size_t n) {
    if (!reader_idle(conn)) {
        if (!feed_reader(conn, c, data, n)) return false;
        if (!hand_back(conn)) return true;
        n = 0;  // what is left is in conn->in
    }
    for (;;) {
        if (!take_ints(conn, c, data, n)) return false;
        if (!hand_back(conn)) return true;
        n = 0;
    }
}

void on_read(ngx_event_t* rev) noexcept {
    auto* c = static_cast<ngx_connection_t*>(rev->data);
    auto* conn = static_cast<rl_conn_t*>(c->data);
    u_char buf[kReadChunk];
    // Until NGX_AGAIN: a close that comes with the last reply is seen now, not at the next send.
    for (;;) {
        ssize_t n = c->recv(c, buf, sizeof(buf));
        if (n == NGX_AGAIN) break;
        // A TLS port answers plain-text commands by closing: say so before anything was read.
        bool nothing_yet = conn->shared->ssl == nullptr && conn->state == RL_CONN_READY && conn->handshake > 0 &&
                           conn->handshake == conn->shared->handshake_replies && conn->reader->len == 0;
        if (n == 0) {
            conn_fail(conn, lost(conn), 0, nothing_yet ? "connection closed by Redis before any reply (a TLS port? "
                                                         "then add \"ssl\")" : "connection closed by Redis");
            return;
        }
        if (n == NGX_ERROR) {
            // A refused connect may show first as a failed read.
            const char* what = conn->state == RL_CONN_CONNECTING ? "connect failed"
                               : nothing_yet ? "read failed before any reply (a TLS port? then add \"ssl\")"
                                             : "read failed";
            io_failed(conn, lost(conn), ngx_socket_errno, what);
            return;
        }
        if (!take_bytes(conn, c, buf, static_cast<size_t>(n))) return;
    }
    if (ngx_handle_read_event(rev, 0) != NGX_OK) conn_fail(conn, RL_REDIS_ERR_RESET, 0, "read event failed");
}

void on_retry(ngx_event_t* ev) noexcept {
    auto* conn = static_cast<rl_conn_t*>(ev->data);
    conn->state = RL_CONN_DOWN;
    if (conn->shared->metrics) rl_metrics_add(&conn->shared->metrics->reconnects, 1);
    ngx_log_debug2(NGX_LOG_DEBUG_HTTP, conn->shared->log, 0, "ratelimit redis \"%V\" at %V: reconnecting",
                   &conn->shared->name, &conn->addr.name);
    rl_conn_usable(conn);
}

// The oldest command has waited past its request's timeout and past kDeadAfter: the server,
// or the path to it, is stuck, and a new connection may well work. Not at the timeout itself:
// a Redis that stalls for a moment (a fork, a slow command) still delivers its late replies,
// which refund what it admitted for requests already answered with on_error, and all the
// workers do not reconnect at once.
void on_watchdog(ngx_event_t* ev) noexcept {
    auto* conn = static_cast<rl_conn_t*>(ev->data);
    if (conn->state != RL_CONN_READY || ngx_queue_empty(&conn->inflight)) return;
    auto* op = ngx_queue_data(ngx_queue_head(&conn->inflight), rl_conn_op_t, queue);
    ngx_msec_t since = static_cast<ngx_msec_int_t>(op->queued_at - conn->ready_at) > 0 ? op->queued_at : conn->ready_at;
    auto waited = static_cast<ngx_msec_int_t>(ngx_current_msec - since);
    auto limit = static_cast<ngx_msec_int_t>(dead_after(conn));
    if (waited < limit) {
        ngx_add_timer(ev, static_cast<ngx_msec_t>(limit - waited));
        return;
    }
    u_char why[64];
    *ngx_snprintf(why, sizeof(why) - 1, "timed out: no reply for %M ms", static_cast<ngx_msec_t>(waited)) = '\0';
    conn_fail(conn, RL_REDIS_ERR_TIMEOUT, 0, reinterpret_cast<char*>(why));
}

void conn_fail(rl_conn_t* conn, rl_redis_error_e reason, ngx_err_t err, const char* why) noexcept {
    rl_conn_shared_t* shared = conn->shared;
    rl_metrics_redis_error(shared->metrics, reason);
    if (why != nullptr) {
        rl_redis_log_error(shared, err, "ratelimit redis \"%V\"%s at %V: %s", &shared->name, role_of(shared),
                           &conn->addr.name, why);
    }
    conn->last_error_len = 0;  // said (or not worth saying): the next failure has its own
    ngx_log_debug2(NGX_LOG_DEBUG_HTTP, shared->log, 0, "ratelimit redis \"%V\" at %V: connection closed",
                   &shared->name, &conn->addr.name);
    close_socket(conn);
    if (conn->reader != nullptr) {
        redisReaderFree(conn->reader);
        conn->reader = nullptr;
    }
    arena_reset(conn, true);
    conn->in_len = 0;
    if (conn->flush.posted) {
        ngx_delete_posted_event(&conn->flush);
    }
    if (conn->watchdog.timer_set) {
        ngx_del_timer(&conn->watchdog);
    }
    conn->out_len = conn->out_sent = 0;
    conn->handshake = 0;
    conn->flushing = 0;
    conn->too_large = 0;
    conn->state = RL_CONN_BACKOFF;  // so that nothing the ops' owners do now is taken
    // Fail what was in flight: each owner applies on_error now rather than at its timeout.
    unsigned delivering = conn->delivering;  // (a reply's callback may fail its own connection)
    conn->delivering = 1;
    while (!ngx_queue_empty(&conn->inflight)) {
        ngx_queue_t* q = ngx_queue_head(&conn->inflight);
        ngx_queue_remove(q);
        auto* op = ngx_queue_data(q, rl_conn_op_t, queue);
        if (op->data != nullptr) op->done(op, nullptr);
        op_free(shared, op);
    }
    rl_metrics_in_flight(shared->metrics, -static_cast<ngx_int_t>(conn->ninflight));
    conn->ninflight = 0;
    shared->failed(conn);
    conn->delivering = delivering;
    if (!ngx_exiting && !ngx_quit && !ngx_terminate) {
        ngx_add_timer(&conn->retry, conn->backoff);
        conn->backoff = conn->backoff * 2 > kBackoffMax ? kBackoffMax : conn->backoff * 2;
    }
}

// A read or a write failed: over TLS, OpenSSL's reason as nginx logged it, and the alert the
// server sent (such as "certificate required") if it came before the reset a write met; else
// the system's error.
void io_failed(rl_conn_t* conn, rl_redis_error_e reason, ngx_err_t err, const char* what) {
    if (conn->shared->ssl == nullptr || conn->state != RL_CONN_READY || conn->last_error_len == 0) {
        conn_fail(conn, reason, err, what);
        return;
    }
    std::string_view said(reinterpret_cast<char*>(conn->last_error), conn->last_error_len);
    char alert[96];
    size_t n = said.find("alert") == std::string_view::npos ? rl_tls_alert(conn->c, alert, sizeof(alert)) : 0;
    bool no_cert = said.find("alert certificate required") != std::string_view::npos ||
                   std::string_view(alert, n).find("alert certificate required") != std::string_view::npos;
    char why[sizeof(conn->last_error) + sizeof(alert) + 160];
    snprintf(why, sizeof(why), "%s: %.*s%s%.*s%s", what, static_cast<int>(said.size()), said.data(),
             n > 0 ? ", the server sent: " : "", static_cast<int>(n), alert,
             no_cert ? " (the server wants a client certificate: ssl_certificate= and ssl_certificate_key=)" : "");
    conn_fail(conn, reason, 0, why);
}

void conn_open(rl_conn_t* conn) {
    rl_conn_shared_t* shared = conn->shared;
    conn->reader = redisReaderCreateWithFunctions(&kArenaReplies);
    if (conn->reader == nullptr) {
        conn_fail(conn, RL_REDIS_ERR_NONE, 0, "out of memory");
        return;
    }
    conn->reader->privdata = conn;
    ngx_memzero(&conn->peer, sizeof(conn->peer));
    conn->peer.sockaddr = conn->addr.sockaddr;
    conn->peer.socklen = conn->addr.socklen;
    conn->peer.name = &conn->addr.name;
    conn->peer.get = ngx_event_get_peer;
    conn->peer.log = &conn->log;
    conn->peer.log_error = NGX_ERROR_ERR;
    conn->last_error_len = 0;
    ngx_int_t rc = ngx_event_connect_peer(&conn->peer);
    if (rc == NGX_ERROR || rc == NGX_BUSY || rc == NGX_DECLINED || conn->peer.connection == nullptr) {
        ngx_err_t err = ngx_socket_errno;
        conn->peer.connection = nullptr;
        conn_fail(conn, RL_REDIS_ERR_REFUSED, rc == NGX_DECLINED ? err : 0, "connect failed");
        return;
    }
    ngx_connection_t* c = conn->peer.connection;
    conn->c = c;
    c->data = conn;
    // nginx's own messages on the connection (a reset at info, OpenSSL's reasons at crit) are
    // kept for conn_fail, which reports them once a second.
    c->log = &conn->log;
    c->read->log = &conn->log;
    c->write->log = &conn->log;
    c->read->handler = on_read;
    c->write->handler = on_write;
    c->pool = nullptr;
    if (shared->ssl != nullptr && (c->pool = ngx_create_pool(1024, shared->log)) == nullptr) {
        conn_fail(conn, RL_REDIS_ERR_NONE, 0, "out of memory");
        return;
    }
    c->log_error = NGX_ERROR_INFO;  // resets and refusals are reported by conn_fail, rate limited
    conn->state = RL_CONN_CONNECTING;
    conn->ready_at = ngx_current_msec;
    ngx_log_debug3(NGX_LOG_DEBUG_HTTP, shared->log, 0, "ratelimit redis \"%V\" at %V: connecting (%i)",
                   &shared->name, &conn->addr.name, rc);

    // The handshake leads the pipeline: whatever is queued after it runs authenticated, on
    // the right database, with the script loaded. Its bytes are shared->handshake (see on_flush);
    // one op per reply.
    conn->handshake = shared->handshake_replies;
    conn->handshake_sent = 0;
    for (ngx_uint_t i = 0; i < shared->handshake_replies; i++) {
        if (enqueue(conn, nullptr, 0, handshake_done, conn, i, 1) == nullptr) {
            conn_fail(conn, RL_REDIS_ERR_NONE, 0, "out of memory");
            return;
        }
    }
    if (rc == NGX_AGAIN) {
        ngx_add_timer(c->write, shared->connect_timeout);
    } else {
        connected(conn);
    }
}

}  // namespace

void rl_redis_log_error(rl_conn_shared_t* shared, ngx_err_t err, const char* fmt, ...) noexcept {
    time_t now = ngx_time();
    if (shared->error_logged == now) {
        shared->errors_suppressed++;
        return;
    }
    u_char msg[NGX_MAX_ERROR_STR];
    va_list args;
    va_start(args, fmt);
    u_char* p = ngx_vslprintf(msg, msg + sizeof(msg), fmt, args);
    va_end(args);
    if (shared->errors_suppressed) {
        p = ngx_slprintf(p, msg + sizeof(msg), " (%ui more errors in the last second)", shared->errors_suppressed);
    }
    ngx_log_error(NGX_LOG_ERR, shared->log, err, "%*s", static_cast<size_t>(p - msg), msg);
    shared->error_logged = now;
    shared->errors_suppressed = 0;
}

void rl_conn_init(rl_conn_t* conn, rl_conn_shared_t* shared, const ngx_addr_t& addr, void* data) noexcept {
    conn->shared = shared;
    conn->data = data;
    conn->addr = addr;
    conn->state = RL_CONN_DOWN;
    conn->backoff = kBackoffMin;
    ngx_queue_init(&conn->inflight);
    ngx_event_t* events[] = {&conn->retry, &conn->flush, &conn->watchdog};
    ngx_event_handler_pt handlers[] = {on_retry, on_flush, on_watchdog};
    for (size_t i = 0; i < 3; i++) {
        events[i]->handler = handlers[i];
        events[i]->data = conn;
        events[i]->log = shared->log;
        events[i]->cancelable = 1;  // never keeps a worker from exiting
    }
    // nginx logs a failed connect on every attempt, at "error" (refused, unreachable) or "crit"
    // (a unix socket not there): ours are reported once a second, with the reason.
    conn->log = *shared->log;
    conn->log.log_level = NGX_LOG_INFO;
    conn->log.writer = keep_error;
    conn->log.wdata = conn;
    conn->log.next = nullptr;
    conn->log.handler = nullptr;
}

bool rl_conn_set_addr(rl_conn_t* conn, const struct sockaddr* sa, socklen_t len) noexcept {
    if (conn->addr.sockaddr != nullptr && ngx_cmp_sockaddr(conn->addr.sockaddr, conn->addr.socklen,
                                                           const_cast<struct sockaddr*>(sa), len, 1) == NGX_OK) {
        return false;
    }
    if (len > sizeof(conn->sockaddr)) return false;
    if (conn->c != nullptr || conn->state == RL_CONN_BACKOFF) {  // the caller logs the move
        if (conn->c != nullptr) conn_fail(conn, RL_REDIS_ERR_NONE, 0, nullptr);
        if (conn->retry.timer_set) ngx_del_timer(&conn->retry);
        conn->state = RL_CONN_DOWN;
        conn->backoff = kBackoffMin;
    }
    rl_tls_forget(conn);  // another server
    ngx_memcpy(&conn->sockaddr, sa, len);
    conn->addr.sockaddr = &conn->sockaddr.sockaddr;
    conn->addr.socklen = len;
    conn->addr.name.data = conn->addr_text;
    conn->addr.name.len = ngx_sock_ntop(&conn->sockaddr.sockaddr, len, conn->addr_text, sizeof(conn->addr_text), 1);
    return true;
}

bool rl_conn_usable(rl_conn_t* conn) noexcept {
    if (conn->addr.sockaddr == nullptr) return false;  // not known yet
    if (conn->state == RL_CONN_DOWN) conn_open(conn);
    return conn->state == RL_CONN_CONNECTING || conn->state == RL_CONN_READY;
}

rl_conn_op_t* rl_conn_send(rl_conn_t* conn, const u_char* cmd, size_t len, rl_conn_reply_pt done, void* data,
                           uintptr_t tag, ngx_uint_t weight) noexcept {
    if (!rl_conn_usable(conn)) return nullptr;
    return enqueue(conn, cmd, len, done, data, tag, weight);
}

void rl_conn_expect_ints(rl_conn_op_t* op, rl_conn_ints_pt ints, size_t n) noexcept {
    // Bounded: a reply split between reads is kept from its start (~23 bytes an integer).
    if (n * 24 > kMaxPendingBytes) return;
    op->ints = ints;
    op->nints = n;
}

void rl_conn_schedule_flush(rl_conn_t* conn) noexcept {
    if (conn->state == RL_CONN_READY && !conn->flush.posted && !conn->flushing) {
        ngx_post_event(&conn->flush, &ngx_posted_events);
    }
}

void rl_conn_close(rl_conn_t* conn) noexcept {
    if (conn->retry.timer_set) {
        ngx_del_timer(&conn->retry);
    }
    if (conn->watchdog.timer_set) {
        ngx_del_timer(&conn->watchdog);
    }
    if (conn->flush.posted) {
        ngx_delete_posted_event(&conn->flush);
    }
    rl_metrics_in_flight(conn->shared->metrics, -static_cast<ngx_int_t>(conn->ninflight));
    conn->ninflight = 0;
    rl_tls_forget(conn);
    if (conn->c == nullptr) return;
    close_socket(conn);
    conn->state = RL_CONN_DOWN;
}

void rl_conn_free(rl_conn_t* conn) noexcept {
    rl_conn_close(conn);
    if (conn->reader != nullptr) {
        redisReaderFree(conn->reader);
        conn->reader = nullptr;
    }
    arena_reset(conn, true);
    ngx_free(conn->in);
    ngx_free(conn->ints);
    conn->in = nullptr;
    conn->ints = nullptr;
    conn->in_len = conn->in_cap = conn->ints_cap = 0;
    ngx_free(conn->out);
    conn->out = nullptr;
    conn->out_len = conn->out_sent = conn->out_cap = 0;
    conn->state = RL_CONN_DOWN;
}
