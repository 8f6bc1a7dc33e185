// A worker's connection to one Redis server, driven by nginx's event loop: commands of all
// requests are appended to one output buffer and written together once per loop turn; their
// replies come back in order and are matched to the ops of the in-flight queue. A failed
// connection fails its ops at once (on_error applies) and is retried with a short backoff.
#include "redis.h"
#include "redis_cluster.h"

#include <cstdarg>

namespace {

// Replies are parsed into an arena of the node instead of one malloc per element (a batch's
// reply has hundreds): reset after each reply is handled, freed with the connection.
struct rl_arena_chunk_t {
    rl_arena_chunk_t* next;
    size_t size;
    size_t used;
    // data follows
};

constexpr size_t kArenaChunk = 16384;

void* arena_alloc(rl_arena_chunk_t** head, size_t n) {
    n = (n + 15) & ~size_t{15};
    rl_arena_chunk_t* c = *head;
    if (c == nullptr || c->used + n > c->size) {
        size_t size = n > kArenaChunk ? n : kArenaChunk;
        auto* fresh = static_cast<rl_arena_chunk_t*>(ngx_alloc(sizeof(rl_arena_chunk_t) + size, ngx_cycle->log));
        if (fresh == nullptr) return nullptr;
        fresh->next = c;
        fresh->size = size;
        fresh->used = 0;
        *head = c = fresh;
    }
    void* p = reinterpret_cast<u_char*>(c + 1) + c->used;
    c->used += n;
    ngx_memzero(p, n);
    return p;
}

// Keeps the newest chunk for the next reply, frees the others.
void arena_reset(rl_arena_chunk_t** head, bool all) {
    rl_arena_chunk_t* c = *head;
    if (c == nullptr) return;
    rl_arena_chunk_t* rest = all ? c : c->next;
    if (!all) {
        c->next = nullptr;
        c->used = 0;
    } else {
        *head = nullptr;
    }
    while (rest != nullptr) {
        rl_arena_chunk_t* next = rest->next;
        ngx_free(rest);
        rest = next;
    }
}

// hiredis's reply builders, on the arena (the reader's privdata is the node's arena head).
redisReply* reply_object(const redisReadTask* task, int type) {
    auto** arena = static_cast<rl_arena_chunk_t**>(task->privdata);
    auto* r = static_cast<redisReply*>(arena_alloc(arena, sizeof(redisReply)));
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
    auto* copy = static_cast<char*>(arena_alloc(static_cast<rl_arena_chunk_t**>(task->privdata), len + 1));
    if (copy == nullptr) return nullptr;
    if (len > 0) ngx_memcpy(copy, str, len);
    r->str = copy;
    r->len = len;
    return r;
}

void* create_array(const redisReadTask* task, int elements) {
    redisReply* r = reply_object(task, REDIS_REPLY_ARRAY);
    if (r == nullptr) return nullptr;
    if (elements > 0) {
        size_t bytes = static_cast<size_t>(elements) * sizeof(redisReply*);
        r->element = static_cast<redisReply**>(arena_alloc(static_cast<rl_arena_chunk_t**>(task->privdata), bytes));
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

constexpr ngx_msec_t kBackoffMin = 50;
constexpr ngx_msec_t kBackoffMax = 400;  // limiting resumes well within a second of Redis coming back
constexpr size_t kReadChunk = 16384;

void node_fail(rl_redis_node_t* node, const char* why) noexcept;

rl_redis_op_t* op_alloc(rl_redis_t* redis) {
    if (!ngx_queue_empty(&redis->free_ops)) {
        ngx_queue_t* q = ngx_queue_head(&redis->free_ops);
        ngx_queue_remove(q);
        return ngx_queue_data(q, rl_redis_op_t, queue);
    }
    return static_cast<rl_redis_op_t*>(ngx_alloc(sizeof(rl_redis_op_t), redis->log));
}

void op_free(rl_redis_t* redis, rl_redis_op_t* op) { ngx_queue_insert_head(&redis->free_ops, &op->queue); }

bool out_reserve(rl_redis_node_t* node, size_t more) {
    if (node->out_sent > 0 && node->out_sent == node->out_len) node->out_sent = node->out_len = 0;
    if (node->out_len + more <= node->out_cap) return true;
    if (node->out_sent > 0) {  // reclaim what was written before growing
        ngx_memmove(node->out, node->out + node->out_sent, node->out_len - node->out_sent);
        node->out_len -= node->out_sent;
        node->out_sent = 0;
        if (node->out_len + more <= node->out_cap) return true;
    }
    size_t cap = node->out_cap ? node->out_cap : 16384;
    while (cap < node->out_len + more) cap *= 2;
    auto* buf = static_cast<u_char*>(ngx_alloc(cap, node->redis->log));
    if (buf == nullptr) return false;
    if (node->out_len) ngx_memcpy(buf, node->out, node->out_len);
    ngx_free(node->out);
    node->out = buf;
    node->out_cap = cap;
    return true;
}

void schedule_flush(rl_redis_node_t* node) {
    if (node->state == RL_CONN_READY && !node->flush.posted) {
        ngx_post_event(&node->flush, &ngx_posted_events);
    }
}

rl_redis_op_t* enqueue(rl_redis_node_t* node, const u_char* cmd, size_t len, rl_redis_done_pt done, void* data,
                       uintptr_t tag, ngx_uint_t weight) {
    rl_redis_op_t* op = op_alloc(node->redis);
    if (op == nullptr || !out_reserve(node, len)) {
        if (op) op_free(node->redis, op);
        return nullptr;
    }
    if (len > 0) ngx_memcpy(node->out + node->out_len, cmd, len);
    node->out_len += len;
    op->done = done;
    op->data = data;
    op->tag = tag;
    op->node = node;
    op->weight = weight;
    ngx_queue_insert_tail(&node->inflight, &op->queue);
    node->ninflight += weight;
    schedule_flush(node);
    return op;
}

void handshake_done(rl_redis_op_t* op, redisReply* reply) noexcept {
    auto* node = static_cast<rl_redis_node_t*>(op->data);
    if (node == nullptr || reply == nullptr) return;  // the connection failed: node_fail handles it
    node->handshake--;
    if (reply->type == REDIS_REPLY_ERROR) {
        // The reply names the problem (WRONGPASS, NOAUTH, ERR DB index...), never the password.
        rl_redis_error(node->redis, "ratelimit redis \"%V\" at %V: handshake failed: %*s", &node->redis->name,
                       &node->addr.name, static_cast<size_t>(reply->len), reply->str);
        node_fail(node, nullptr);
        return;
    }
    if (node->handshake == 0) node->backoff = kBackoffMin;  // a healthy connection again
}

void script_loaded(rl_redis_op_t* op, redisReply* reply) noexcept {
    auto* node = static_cast<rl_redis_node_t*>(op->data);
    node->reloading = 0;
    if (reply != nullptr && reply->type == REDIS_REPLY_ERROR) {
        rl_redis_error(node->redis, "ratelimit redis \"%V\" at %V: SCRIPT LOAD failed: %*s", &node->redis->name,
                       &node->addr.name, static_cast<size_t>(reply->len), reply->str);
    }
}

void on_flush(ngx_event_t* ev) noexcept {
    auto* node = static_cast<rl_redis_node_t*>(ev->data);
    if (node->state != RL_CONN_READY || node->c == nullptr) return;
    node->flushing = 1;  // what the batches add to the buffer is written just below
    rl_redis_flush_queued(node);  // may fail the node
    node->flushing = 0;
    if (node->c == nullptr) return;
    ngx_connection_t* c = node->c;
    while (node->out_sent < node->out_len) {
        ssize_t n = c->send(c, node->out + node->out_sent, node->out_len - node->out_sent);
        if (n == NGX_AGAIN) break;
        if (n == NGX_ERROR || n <= 0) {
            node_fail(node, "write failed");
            return;
        }
        node->out_sent += static_cast<size_t>(n);
    }
    if (node->out_sent == node->out_len) node->out_sent = node->out_len = 0;
    if (ngx_handle_write_event(c->write, 0) != NGX_OK) node_fail(node, "write event failed");
}

void on_write(ngx_event_t* wev) noexcept {
    auto* c = static_cast<ngx_connection_t*>(wev->data);
    auto* node = static_cast<rl_redis_node_t*>(c->data);
    if (node->state == RL_CONN_CONNECTING) {
        if (wev->timedout) {
            node_fail(node, "connect timed out");
            return;
        }
        if (wev->timer_set) {
            ngx_del_timer(wev);
        }
        int err = 0;
        socklen_t len = sizeof(err);
        if (getsockopt(c->fd, SOL_SOCKET, SO_ERROR, reinterpret_cast<char*>(&err), &len) == -1) err = ngx_socket_errno;
        if (err) {
            node_fail(node, strerror(err));
            return;
        }
        node->state = RL_CONN_READY;
    }
    on_flush(&node->flush);
}

void on_read(ngx_event_t* rev) noexcept {
    auto* c = static_cast<ngx_connection_t*>(rev->data);
    auto* node = static_cast<rl_redis_node_t*>(c->data);
    rl_redis_t* redis = node->redis;
    u_char buf[kReadChunk];
    for (;;) {
        ssize_t n = c->recv(c, buf, sizeof(buf));
        if (n == NGX_AGAIN) break;
        if (n == 0 || n == NGX_ERROR) {
            node_fail(node, n == 0 ? "connection closed by Redis" : "read failed");
            return;
        }
        if (redisReaderFeed(node->reader, reinterpret_cast<const char*>(buf), static_cast<size_t>(n)) != REDIS_OK) {
            node_fail(node, "out of memory");
            return;
        }
        for (;;) {
            void* obj = nullptr;
            if (redisReaderGetReply(node->reader, &obj) != REDIS_OK) {
                node_fail(node, "protocol error");
                return;
            }
            if (obj == nullptr) break;
            auto* reply = static_cast<redisReply*>(obj);
            if (ngx_queue_empty(&node->inflight)) {
                node_fail(node, "unexpected reply");
                return;
            }
            ngx_queue_t* q = ngx_queue_head(&node->inflight);
            ngx_queue_remove(q);
            auto* op = ngx_queue_data(q, rl_redis_op_t, queue);
            node->ninflight -= op->weight;
            if (op->data != nullptr) op->done(op, reply);
            op_free(redis, op);
            if (node->c != c) return;  // the handler failed the connection
            arena_reset(reinterpret_cast<rl_arena_chunk_t**>(&node->arena), false);
        }
        if (static_cast<size_t>(n) < sizeof(buf)) break;
    }
    if (ngx_handle_read_event(rev, 0) != NGX_OK) node_fail(node, "read event failed");
}

void on_retry(ngx_event_t* ev) noexcept {
    auto* node = static_cast<rl_redis_node_t*>(ev->data);
    node->state = RL_CONN_DOWN;
    rl_redis_node_connect(node);
}

void node_fail(rl_redis_node_t* node, const char* why) noexcept {
    if (why != nullptr) {
        rl_redis_error(node->redis, "ratelimit redis \"%V\" at %V: %s", &node->redis->name, &node->addr.name, why);
    }
    if (node->c != nullptr) {
        ngx_close_connection(node->c);
        node->c = nullptr;
    }
    if (node->reader != nullptr) {
        redisReaderFree(node->reader);
        node->reader = nullptr;
    }
    arena_reset(reinterpret_cast<rl_arena_chunk_t**>(&node->arena), true);
    if (node->flush.posted) {
        ngx_delete_posted_event(&node->flush);
    }
    node->out_len = node->out_sent = 0;
    node->handshake = 0;
    node->reloading = 0;
    node->flushing = 0;
    node->state = RL_CONN_BACKOFF;
    // Fail what was in flight: each owner applies on_error now rather than at its timeout.
    while (!ngx_queue_empty(&node->inflight)) {
        ngx_queue_t* q = ngx_queue_head(&node->inflight);
        ngx_queue_remove(q);
        auto* op = ngx_queue_data(q, rl_redis_op_t, queue);
        if (op->data != nullptr) op->done(op, nullptr);
        op_free(node->redis, op);
    }
    node->ninflight = 0;
    rl_redis_fail_queued(node);
    rl_cluster_node_failed(node);
    if (!ngx_exiting && !ngx_quit && !ngx_terminate) {
        ngx_add_timer(&node->retry, node->backoff);
        node->backoff = node->backoff * 2 > kBackoffMax ? kBackoffMax : node->backoff * 2;
    }
}

}  // namespace

void rl_redis_error(rl_redis_t* redis, const char* fmt, ...) noexcept {
    time_t now = ngx_time();
    if (redis->error_logged == now) {
        redis->errors_suppressed++;
        return;
    }
    u_char msg[NGX_MAX_ERROR_STR];
    va_list args;
    va_start(args, fmt);
    u_char* p = ngx_vslprintf(msg, msg + sizeof(msg), fmt, args);
    va_end(args);
    if (redis->errors_suppressed) {
        p = ngx_slprintf(p, msg + sizeof(msg), " (%ui more errors in the last second)", redis->errors_suppressed);
    }
    ngx_log_error(NGX_LOG_ERR, redis->log, 0, "%*s", static_cast<size_t>(p - msg), msg);
    redis->error_logged = now;
    redis->errors_suppressed = 0;
}

rl_redis_node_t* rl_redis_node_create(rl_redis_t* redis, const ngx_addr_t& addr) noexcept {
    auto* node = static_cast<rl_redis_node_t*>(ngx_calloc(sizeof(rl_redis_node_t), redis->log));
    if (node == nullptr) return nullptr;
    node->redis = redis;
    node->addr = addr;
    node->state = RL_CONN_DOWN;
    node->backoff = kBackoffMin;
    ngx_queue_init(&node->inflight);
    ngx_queue_init(&node->queued);
    node->retry.handler = on_retry;
    node->retry.data = node;
    node->retry.log = redis->log;
    node->retry.cancelable = 1;  // never keeps a worker from exiting
    node->flush.handler = on_flush;
    node->flush.data = node;
    node->flush.log = redis->log;
    // nginx logs a refused connect at "error" on every attempt: ours are reported once a second.
    node->log = *redis->log;
    node->log.log_level = NGX_LOG_CRIT;
    return node;
}

void rl_redis_node_connect(rl_redis_node_t* node) noexcept {
    if (node->state != RL_CONN_DOWN) return;
    rl_redis_t* redis = node->redis;
    node->reader = redisReaderCreateWithFunctions(&kArenaReplies);
    if (node->reader == nullptr) {
        node_fail(node, "out of memory");
        return;
    }
    node->reader->privdata = &node->arena;
    ngx_memzero(&node->peer, sizeof(node->peer));
    node->peer.sockaddr = node->addr.sockaddr;
    node->peer.socklen = node->addr.socklen;
    node->peer.name = &node->addr.name;
    node->peer.get = ngx_event_get_peer;
    node->peer.log = &node->log;
    node->peer.log_error = NGX_ERROR_ERR;
    ngx_int_t rc = ngx_event_connect_peer(&node->peer);
    if (rc == NGX_ERROR || rc == NGX_BUSY || rc == NGX_DECLINED || node->peer.connection == nullptr) {
        node->peer.connection = nullptr;
        node_fail(node, "connect failed");
        return;
    }
    ngx_connection_t* c = node->peer.connection;
    node->c = c;
    c->data = node;
    c->log = redis->log;
    c->read->log = redis->log;
    c->write->log = redis->log;
    c->read->handler = on_read;
    c->write->handler = on_write;
    c->pool = nullptr;
    c->log_error = NGX_ERROR_INFO;  // resets and refusals are reported by node_fail, rate limited
    node->state = rc == NGX_AGAIN ? RL_CONN_CONNECTING : RL_CONN_READY;

    // The handshake leads the pipeline: whatever is queued after it runs authenticated, on
    // the right database, with the script loaded.
    node->handshake = redis->handshake_replies;
    const u_char* p = redis->handshake;
    for (ngx_uint_t i = 0; i < redis->handshake_replies; i++) {
        if (enqueue(node, i == 0 ? p : nullptr, i == 0 ? redis->handshake_len : 0, handshake_done, node, i, 1) ==
            nullptr) {
            node_fail(node, "out of memory");
            return;
        }
    }
    if (rc == NGX_AGAIN) {
        ngx_add_timer(c->write, redis->connect_timeout);
    }
}

void rl_redis_reload_script(rl_redis_node_t* node) noexcept {
    if (node->reloading || node->state == RL_CONN_BACKOFF || node->state == RL_CONN_DOWN) return;
    rl_redis_t* redis = node->redis;
    if (enqueue(node, redis->script_load, redis->script_load_len, script_loaded, node, 0, 1) != nullptr) {
        node->reloading = 1;
    }
}

void rl_redis_node_close(rl_redis_node_t* node) noexcept {
    if (node->retry.timer_set) {
        ngx_del_timer(&node->retry);
    }
    if (node->c == nullptr) return;
    ngx_close_connection(node->c);
    node->c = nullptr;
    node->state = RL_CONN_DOWN;
}

void rl_redis_schedule_flush(rl_redis_node_t* node) noexcept {
    if (node->state == RL_CONN_READY && !node->flush.posted && !node->flushing) {
        ngx_post_event(&node->flush, &ngx_posted_events);
    }
}

bool rl_redis_can_send(rl_redis_node_t* node, ngx_uint_t more) noexcept {
    if (node->state == RL_CONN_DOWN) rl_redis_node_connect(node);
    if (node->state == RL_CONN_BACKOFF || node->state == RL_CONN_DOWN) return false;
    return node->ninflight + node->nqueued + more <= node->redis->max_pending + node->handshake;
}

rl_redis_op_t* rl_redis_send(rl_redis_node_t* node, const u_char* cmd, size_t len, rl_redis_done_pt done, void* data,
                             uintptr_t tag, ngx_uint_t weight) noexcept {
    if (!rl_redis_can_send(node, weight)) return nullptr;
    return enqueue(node, cmd, len, done, data, tag, weight);
}
