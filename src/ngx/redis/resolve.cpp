// Addresses that move: each watched connection's host name is asked of nginx's resolver on a
// timer; the answer that still holds the current address keeps it, another one moves it.
#include "ngx/redis/resolve.h"

#include "core/text/log_text.h"
#include "ngx/base/timer.h"

namespace {

constexpr ngx_msec_t kAskEvery = 1000;
constexpr ngx_msec_t kAskSoon = 100;  // after a failure, not more often

struct rl_watch_t {
    rl_redis_t* redis;
    rl_conn_t* conn;
    ngx_str_t host;
    in_port_t port;
    ngx_event_t timer;
    ngx_resolver_ctx_t* asking;  // in flight
    ngx_msec_t asked_at;
};

struct rl_resolve_t {
    rl_array_t<rl_watch_t*> watches;
};

rl_resolve_t* state_of(rl_redis_t* redis) { return static_cast<rl_resolve_t*>(redis->resolve_state); }

void on_resolved(ngx_resolver_ctx_t* ctx) noexcept {
    auto* w = static_cast<rl_watch_t*>(ctx->data);
    w->asking = nullptr;
    rl_redis_t* redis = w->redis;
    if (ctx->state != NGX_OK || ctx->naddrs == 0) {
        rl::LogText host(w->host.data, w->host.len);
        rl_redis_log_error(&redis->conn, 0, "ratelimit redis \"%V\": could not resolve \"%*s\" (%i: %s), %s",
                           &redis->name, host.len, host.text, ctx->state, ngx_resolver_strerror(ctx->state),
                           w->conn->addr.sockaddr ? "keeping the last address" : "no address yet");
        ngx_resolve_name_done(ctx);
        return;
    }
    // The current address, if still among the answers, is kept: no reconnect for a shuffle.
    ngx_uint_t pick = 0;
    for (ngx_uint_t i = 0; i < ctx->naddrs; i++) {
        ngx_sockaddr_t sa;
        ngx_memcpy(&sa, ctx->addrs[i].sockaddr, ctx->addrs[i].socklen);
        ngx_inet_set_port(&sa.sockaddr, w->port);
        if (w->conn->addr.sockaddr != nullptr &&
            ngx_cmp_sockaddr(&sa.sockaddr, ctx->addrs[i].socklen, w->conn->addr.sockaddr, w->conn->addr.socklen, 1) ==
                NGX_OK) {
            pick = i;
            break;
        }
    }
    ngx_sockaddr_t sa;
    socklen_t len = ctx->addrs[pick].socklen;
    ngx_memcpy(&sa, ctx->addrs[pick].sockaddr, len);
    ngx_inet_set_port(&sa.sockaddr, w->port);
    ngx_resolve_name_done(ctx);
    if (rl_conn_set_addr(w->conn, &sa.sockaddr, len)) {
        rl::LogText host(w->host.data, w->host.len);
        ngx_log_error(NGX_LOG_NOTICE, redis->conn.log, 0, "ratelimit redis \"%V\": \"%*s\" is now at %V",
                      &redis->name, host.len, host.text, &w->conn->addr.name);
        rl_conn_usable(w->conn);  // connect now rather than on the first request
    }
}

void cannot_resolve(rl_watch_t* w) {
    rl::LogText host(w->host.data, w->host.len);
    rl_redis_log_error(&w->redis->conn, 0, "ratelimit redis \"%V\": cannot resolve \"%*s\"", &w->redis->name,
                       host.len, host.text);
}

void ask(rl_watch_t* w) {
    if (w->asking != nullptr) return;
    w->asked_at = ngx_current_msec;
    ngx_resolver_ctx_t* ctx = ngx_resolve_start(w->redis->resolver, nullptr);
    if (ctx == nullptr || ctx == NGX_NO_RESOLVER) {
        cannot_resolve(w);
        return;
    }
    ctx->name = w->host;
    ctx->handler = on_resolved;
    ctx->data = w;
    ctx->timeout = w->redis->resolver_timeout;
    ctx->cancelable = 1;  // a query in flight never holds up the worker's exit
    w->asking = ctx;
    if (ngx_resolve_name(ctx) != NGX_OK) {  // the context is freed by the resolver
        w->asking = nullptr;
        cannot_resolve(w);
    }
}

void on_timer(ngx_event_t* ev) noexcept {
    auto* w = static_cast<rl_watch_t*>(ev->data);
    if (rl_worker_stopping()) return;
    ask(w);
    ngx_add_timer(ev, kAskEvery);
}

}  // namespace

bool rl_resolve_init(rl_redis_t* redis) noexcept {
    auto* st = static_cast<rl_resolve_t*>(ngx_pcalloc(redis->pool, sizeof(rl_resolve_t)));
    if (st == nullptr) return false;
    redis->resolve_state = st;
    return true;
}

bool rl_resolve_watch(rl_redis_t* redis, rl_conn_t* conn, const ngx_str_t& host, in_port_t port) noexcept {
    rl_resolve_t* st = state_of(redis);
    auto* w = static_cast<rl_watch_t*>(ngx_pcalloc(redis->pool, sizeof(rl_watch_t)));
    rl_watch_t** slot = w ? st->watches.push(redis->conn.log) : nullptr;
    if (slot == nullptr) return false;
    *slot = w;
    w->redis = redis;
    w->conn = conn;
    w->host = host;
    w->port = port;
    w->timer.handler = on_timer;
    w->timer.data = w;
    w->timer.log = redis->conn.log;
    w->timer.cancelable = 1;
    ngx_add_timer(&w->timer, 1);  // the first answer, as soon as the worker runs
    return true;
}

void rl_resolve_soon(rl_redis_t* redis, rl_conn_t* conn) noexcept {
    rl_resolve_t* st = state_of(redis);
    if (st == nullptr || rl_worker_stopping()) return;
    for (ngx_uint_t i = 0; i < st->watches.n; i++) {
        rl_watch_t* w = st->watches.elts[i];
        if (w->conn != conn || w->asking != nullptr) continue;
        rl_timer_soon(&w->timer, w->asked_at, kAskSoon);
    }
}

void rl_resolve_exit(rl_redis_t* redis) noexcept {
    rl_resolve_t* st = state_of(redis);
    if (st == nullptr) return;
    for (ngx_uint_t i = 0; i < st->watches.n; i++) {
        rl_watch_t* w = st->watches.elts[i];
        if (w->timer.timer_set) ngx_del_timer(&w->timer);
        if (w->asking != nullptr) {
            ngx_resolve_name_done(w->asking);
            w->asking = nullptr;
        }
    }
}
