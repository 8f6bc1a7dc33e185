// Sentinel: one connection per configured Sentinel (its own handshake: AUTH with the Sentinel's
// credentials, INFO to check it is one), asked in turn; the master node of the ratelimit_redis
// follows their answer.
#include "ngx/redis/sentinel.h"

#include "core/text/log_text.h"
#include "core/wire/redis_info.h"
#include "ngx/redis/resolve.h"
#include "ngx/base/timer.h"

namespace {

constexpr ngx_msec_t kAskEvery = 1000;
constexpr ngx_msec_t kAskSoon = 100;  // after the master failed, not more often

struct rl_sentinel_t {
    rl_redis_t* redis;
    rl_conn_shared_t shared;  // what the Sentinels' connections share (copied into `each`)
    rl_conn_shared_t* each;   // one per Sentinel: its own error log's rate limit, so that every
                              // unreachable Sentinel is named within a second or two
    rl_conn_t* conns;
    ngx_uint_t nconns;
    ngx_uint_t current;       // the Sentinel asked
    ngx_uint_t mode_check;    // the handshake's INFO
    ngx_str_t ask_cmd;        // SENTINEL get-master-addr-by-name MASTER
    ngx_event_t timer;
    ngx_msec_t asked_at;
    ngx_uint_t failed;        // asks in a row no Sentinel answered
    u_char master_host[NGX_SOCKADDR_STRLEN];
    unsigned asking:1;
};

rl_sentinel_t* state_of(rl_redis_t* redis) { return static_cast<rl_sentinel_t*>(redis->sentinel_state); }

void ask(rl_sentinel_t* st);

void next_sentinel(rl_sentinel_t* st) { st->current = (st->current + 1) % st->nconns; }

// An ask no Sentinel answered (`tried` of them down, backing off or failing): once each has
// had its chance, the log says that no Sentinel answers, and what that leaves.
void unanswered(rl_sentinel_t* st, ngx_uint_t tried) {
    rl_redis_t* redis = st->redis;
    st->failed += tried;
    if (st->failed < st->nconns) return;
    st->failed = 0;
    rl_redis_node_t* master = redis->nodes.elts[0];
    if (master->conn.addr.sockaddr == nullptr) {
        rl_redis_log_error(&redis->conn, 0, "ratelimit redis \"%V\": no Sentinel answered (%ui configured): the "
                           "master \"%V\" is not known yet, on_error applies", &redis->name, st->nconns,
                           &redis->sentinel);
    } else {
        rl_redis_log_error(&redis->conn, 0, "ratelimit redis \"%V\": no Sentinel answered (%ui configured): the "
                           "master \"%V\" is still taken to be at %V", &redis->name, st->nconns, &redis->sentinel,
                           &master->conn.addr.name);
    }
}

// [ip, port], or nil when the Sentinel does not know the master.
void on_master(rl_conn_op_t* op, redisReply* reply) noexcept {
    auto* st = static_cast<rl_sentinel_t*>(op->data);
    rl_redis_t* redis = st->redis;
    st->asking = 0;
    if (reply == nullptr) {  // that Sentinel is gone: the next one, soon
        next_sentinel(st);
        unanswered(st, 1);
        return;
    }
    st->failed = 0;
    const ngx_str_t& at = op->conn->addr.name;
    if (reply->type == REDIS_REPLY_NIL || (reply->type == REDIS_REPLY_ARRAY && reply->elements == 0)) {
        rl_redis_log_error(&redis->conn, 0, "ratelimit redis \"%V\": sentinel at %V knows no master \"%V\"",
                           &redis->name, &at, &redis->sentinel);
        next_sentinel(st);
        return;
    }
    bool ok = reply->type == REDIS_REPLY_ARRAY && reply->elements == 2 &&
              reply->element[0]->type == REDIS_REPLY_STRING && reply->element[1]->type == REDIS_REPLY_STRING &&
              reply->element[0]->len < sizeof(st->master_host);
    ngx_sockaddr_t sa;
    ngx_memzero(&sa, sizeof(sa));
    socklen_t len = 0;
    uint16_t port = ok ? rl::parse_port({reply->element[1]->str, reply->element[1]->len}) : 0;
    char host[NGX_SOCKADDR_STRLEN];
    if (ok) {
        ngx_memcpy(host, reply->element[0]->str, reply->element[0]->len);
        host[reply->element[0]->len] = '\0';
        if (port != 0 && inet_pton(AF_INET, host, &sa.sockaddr_in.sin_addr) == 1) {
            sa.sockaddr_in.sin_family = AF_INET;
            len = sizeof(sa.sockaddr_in);
#if (NGX_HAVE_INET6)
        } else if (port != 0 && inet_pton(AF_INET6, host, &sa.sockaddr_in6.sin6_addr) == 1) {
            sa.sockaddr_in6.sin6_family = AF_INET6;
            len = sizeof(sa.sockaddr_in6);
#endif
        }
    }
    if (len == 0) {
        // What it said: an error, or the host and port it gave (the Sentinel's bytes, escaped).
        bool pair = reply->type == REDIS_REPLY_ARRAY && reply->elements == 2 &&
                    reply->element[0]->type == REDIS_REPLY_STRING && reply->element[1]->type == REDIS_REPLY_STRING;
        std::string_view said = reply->type == REDIS_REPLY_ERROR || reply->type == REDIS_REPLY_STRING
                                    ? std::string_view(reply->str, reply->len)
                                : pair ? std::string_view(reply->element[0]->str, reply->element[0]->len)
                                       : std::string_view();
        rl::LogText text(said);
        rl::LogText port_text(pair ? std::string_view(reply->element[1]->str, reply->element[1]->len) : std::string_view());
        rl_redis_log_error(&redis->conn, 0, "ratelimit redis \"%V\": sentinel at %V gave no usable address for "
                           "master \"%V\" (reply type %d): %s%*s%s%*s%s", &redis->name, &at, &redis->sentinel,
                           reply->type, pair ? "host \"" : "", text.len, text.text, pair ? "\" port \"" : "",
                           port_text.len, port_text.text, pair ? "\"" : "");
        next_sentinel(st);
        return;
    }
    ngx_inet_set_port(&sa.sockaddr, port);
    rl_redis_node_t* master = redis->nodes.elts[0];
    if (!rl_conn_set_addr(&master->conn, &sa.sockaddr, len)) return;
    if (redis->ssl_name.len == 0) {
        ngx_memcpy(st->master_host, host, ngx_strlen(host));
        master->conn.tls_name = {ngx_strlen(host), st->master_host};
    }
    ngx_log_error(NGX_LOG_NOTICE, redis->conn.log, 0, "ratelimit redis \"%V\": master \"%V\" is at %V (sentinel at %V)",
                  &redis->name, &redis->sentinel, &master->conn.addr.name, &at);
    rl_conn_usable(&master->conn);  // connect now
}

void ask(rl_sentinel_t* st) {
    if (st->asking || st->nconns == 0) return;
    st->asked_at = ngx_current_msec;
    for (ngx_uint_t tried = 0; tried < st->nconns; tried++) {
        rl_conn_t* conn = &st->conns[st->current];
        if (rl_conn_send(conn, st->ask_cmd.data, st->ask_cmd.len, on_master, st, 0) != nullptr) {
            st->asking = 1;
            return;
        }
        next_sentinel(st);  // down or backing off: the next one
    }
    unanswered(st, st->nconns);
}

void on_timer(ngx_event_t* ev) noexcept {
    auto* st = static_cast<rl_sentinel_t*>(ev->data);
    if (rl_worker_stopping()) return;
    ask(st);
    ngx_add_timer(ev, kAskEvery);
}

bool check_handshake(rl_conn_t* conn, ngx_uint_t index, const redisReply* reply) noexcept {
    auto* st = static_cast<rl_sentinel_t*>(conn->data);
    rl_redis_t* redis = st->redis;
    if (reply->type == REDIS_REPLY_ERROR) {
        char text[rl::kLogTextCap];
        size_t n = rl::log_text(reply->str, reply->len, text, sizeof(text));
        rl_redis_log_error(conn->shared, 0, "ratelimit redis \"%V\": sentinel at %V: handshake failed: %*s",
                           &redis->name, &conn->addr.name, n, text);
        return false;
    }
    if (index != st->mode_check || reply->type != REDIS_REPLY_STRING) return true;
    std::string_view mode = rl::info_field({reply->str, reply->len}, "redis_mode");
    if (mode == "sentinel") return true;
    char text[rl::kLogTextCap];
    size_t n = rl::log_text(mode.data(), mode.size(), text, sizeof(text));
    rl_redis_log_error(conn->shared, 0, "ratelimit_redis \"%V\": %V is not a Sentinel (redis_mode: %*s): "
                       "\"sentinel=%V\" needs the Sentinels' addresses in %s:%ui", &redis->name, &conn->addr.name,
                       n, text, &redis->sentinel, redis->file, redis->line);
    return false;
}

void fill_nothing(rl_conn_t*) noexcept {}

void sentinel_failed(rl_conn_t* conn) noexcept {
    auto* st = static_cast<rl_sentinel_t*>(conn->data);
    if (st->redis->resolve) rl_resolve_soon(st->redis, conn);
}

bool build_handshake(rl_sentinel_t* st, ngx_pool_t* pool) {
    rl_redis_t* redis = st->redis;
    ngx_str_t out = ngx_null_string;
    ngx_uint_t replies = 0;
    if (redis->sentinel_password.len) {
        if (!rl_redis_append_auth(pool, out, redis->sentinel_username, redis->sentinel_password)) return false;
        replies++;
    }
    const char* info[2] = {"INFO", "server"};
    size_t info_lens[2] = {4, 6};
    if (!rl_redis_append_command(pool, out, 2, info, info_lens)) return false;
    st->mode_check = replies++;
    st->shared.handshake = out.data;
    st->shared.handshake_len = out.len;
    st->shared.handshake_replies = replies;
    ngx_str_t cmd = ngx_null_string;
    const char* ask_argv[3] = {"SENTINEL", "get-master-addr-by-name", reinterpret_cast<const char*>(redis->sentinel.data)};
    size_t ask_lens[3] = {8, 23, redis->sentinel.len};
    if (!rl_redis_append_command(pool, cmd, 3, ask_argv, ask_lens)) return false;
    st->ask_cmd = cmd;
    return true;
}

}  // namespace

bool rl_sentinel_init(rl_redis_t* redis) noexcept {
    ngx_pool_t* pool = redis->pool;
    auto* st = static_cast<rl_sentinel_t*>(ngx_pcalloc(pool, sizeof(rl_sentinel_t)));
    if (st == nullptr) return false;
    redis->sentinel_state = st;
    st->redis = redis;
    rl_conn_shared_t& shared = st->shared;
    shared = redis->conn;  // the same name, log, timeouts, TLS and metrics
    shared.role = ": sentinel";  // its lines say whose address failed
    shared.handshake_reply = check_handshake;
    shared.fill = fill_nothing;
    shared.failed = sentinel_failed;
    ngx_queue_init(&shared.free_ops);
    shared.error_logged = 0;
    shared.errors_suppressed = 0;
    if (!build_handshake(st, pool)) return false;
    st->nconns = redis->addrs->nelts;
    st->conns = static_cast<rl_conn_t*>(ngx_pcalloc(pool, st->nconns * sizeof(rl_conn_t)));
    st->each = static_cast<rl_conn_shared_t*>(ngx_palloc(pool, st->nconns * sizeof(rl_conn_shared_t)));
    if (st->conns == nullptr || st->each == nullptr) return false;
    auto* addrs = static_cast<rl_redis_addr_t*>(redis->addrs->elts);
    for (ngx_uint_t i = 0; i < st->nconns; i++) {
        st->each[i] = st->shared;
        ngx_queue_init(&st->each[i].free_ops);
        rl_conn_init(&st->conns[i], &st->each[i], addrs[i].addr, st);
        st->conns[i].tls_name = redis->ssl_name.len ? redis->ssl_name : addrs[i].host;
        if (redis->resolve && !addrs[i].literal &&
            !rl_resolve_watch(redis, &st->conns[i], addrs[i].host, addrs[i].port)) {
            return false;
        }
    }
    st->timer.handler = on_timer;
    st->timer.data = st;
    st->timer.log = redis->conn.log;
    st->timer.cancelable = 1;
    ngx_add_timer(&st->timer, 1);  // ask as soon as the worker runs
    return true;
}

void rl_sentinel_ask_soon(rl_redis_t* redis) noexcept {
    rl_sentinel_t* st = state_of(redis);
    if (st == nullptr || rl_worker_stopping() || st->asking) return;
    rl_timer_soon(&st->timer, st->asked_at, kAskSoon);
}

void rl_sentinel_exit(rl_redis_t* redis) noexcept {
    rl_sentinel_t* st = state_of(redis);
    if (st == nullptr) return;
    if (st->timer.timer_set) ngx_del_timer(&st->timer);
    for (ngx_uint_t i = 0; i < st->nconns; i++) rl_conn_close(&st->conns[i]);
}
