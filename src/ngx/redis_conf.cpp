// ratelimit_redis: parsing, and each worker's start: the handshake it writes on every
// connection and the connections themselves.
#include "redis.h"

#include "core/rate.h"
#include "core/redis_script.h"
#include "ratelimit.h"
#include "redis_cluster.h"

namespace {

constexpr ngx_msec_t kDefaultTimeout = 50;
constexpr ngx_msec_t kDefaultConnectTimeout = 100;
constexpr ngx_uint_t kDefaultMaxPending = 4096;

bool parse_msec(const ngx_str_t& v, ngx_msec_t& out) {
    int64_t us;
    if (!rl::parse_duration(rl_sv(v), us)) return false;
    if (us > 3600 * rl::kUsPerSec) return false;
    out = static_cast<ngx_msec_t>((us + 999) / 1000);
    return true;
}

bool parse_address(ngx_conf_t* cf, const ngx_str_t& text, rl_redis_t* redis) {
    ngx_url_t u;
    ngx_memzero(&u, sizeof(u));
    u.url = text;
    u.default_port = 6379;
    if (ngx_parse_url(cf->pool, &u) != NGX_OK) {
        if (u.err) ngx_conf_log_error(NGX_LOG_EMERG, cf, 0, "%s in redis address \"%V\"", u.err, &text);
        return false;
    }
    if (u.naddrs == 0) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0, "no address for redis \"%V\"", &text);
        return false;
    }
    auto* a = static_cast<ngx_addr_t*>(ngx_array_push(redis->addrs));
    if (a == nullptr) return false;
    *a = u.addrs[0];
    return true;
}

// Appends one command in RESP to `out` (in `pool`).
bool append_command(ngx_pool_t* pool, ngx_str_t& out, int argc, const char** argv, const size_t* lens) {
    char* cmd = nullptr;
    int len = redisFormatCommandArgv(&cmd, argc, argv, lens);
    if (len < 0 || cmd == nullptr) return false;
    auto* buf = static_cast<u_char*>(ngx_pnalloc(pool, out.len + static_cast<size_t>(len)));
    if (buf != nullptr) {
        if (out.len) ngx_memcpy(buf, out.data, out.len);
        ngx_memcpy(buf + out.len, cmd, static_cast<size_t>(len));
        out.data = buf;
        out.len += static_cast<size_t>(len);
    }
    redisFreeCommand(cmd);
    return buf != nullptr;
}

bool build_handshake(ngx_pool_t* pool, rl_redis_t* redis) {
    ngx_str_t out = ngx_null_string;
    ngx_uint_t replies = 0;
    if (redis->password.len) {
        const char* argv[3] = {"AUTH", nullptr, nullptr};
        size_t lens[3] = {4, 0, 0};
        int argc = 1;
        if (redis->username.len) {
            argv[argc] = reinterpret_cast<const char*>(redis->username.data);
            lens[argc++] = redis->username.len;
        }
        argv[argc] = reinterpret_cast<const char*>(redis->password.data);
        lens[argc++] = redis->password.len;
        if (!append_command(pool, out, argc, argv, lens)) return false;
        replies++;
    }
    if (redis->database) {
        u_char db[NGX_INT_T_LEN];
        size_t n = static_cast<size_t>(ngx_sprintf(db, "%i", redis->database) - db);
        const char* argv[2] = {"SELECT", reinterpret_cast<const char*>(db)};
        size_t lens[2] = {6, n};
        if (!append_command(pool, out, 2, argv, lens)) return false;
        replies++;
    }
    std::string_view script = rl::script_text(false);
    const char* argv[3] = {"SCRIPT", "LOAD", script.data()};
    size_t lens[3] = {6, 4, script.size()};
    size_t before = out.len;
    if (!append_command(pool, out, 3, argv, lens)) return false;
    replies++;
    redis->handshake = out.data;
    redis->handshake_len = out.len;
    redis->script_load = out.data + before;
    redis->script_load_len = out.len - before;
    redis->handshake_replies = replies;
    return true;
}

// Whether the server at `addr` runs in cluster mode: 1 yes, 0 no, -1 unknown (unreachable,
// or it refused to tell). A blocking exchange, done only in the master at start or reload.
int probe_cluster_mode(rl_redis_t* redis, const ngx_addr_t& addr, ngx_log_t* log) {
    struct timeval tv;
    tv.tv_sec = static_cast<time_t>(redis->connect_timeout / 1000);
    tv.tv_usec = static_cast<suseconds_t>((redis->connect_timeout % 1000) * 1000);
    redisContext* c = nullptr;
    u_char host[NGX_SOCKADDR_STRLEN + 1];
    if (addr.sockaddr->sa_family == AF_UNIX) {
        auto* sun = reinterpret_cast<struct sockaddr_un*>(addr.sockaddr);
        c = redisConnectUnixWithTimeout(sun->sun_path, tv);
    } else {
        size_t n = ngx_sock_ntop(addr.sockaddr, addr.socklen, host, NGX_SOCKADDR_STRLEN, 0);
        host[n] = '\0';
        c = redisConnectWithTimeout(reinterpret_cast<char*>(host), static_cast<int>(ngx_inet_get_port(addr.sockaddr)), tv);
    }
    if (c == nullptr || c->err) {
        ngx_log_error(NGX_LOG_WARN, log, 0, "ratelimit redis \"%V\" at %V is not reachable at start: %s",
                      &redis->name, &addr.name, c ? c->errstr : "out of memory");
        if (c) redisFree(c);
        return -1;
    }
    redisSetTimeout(c, tv);
    int mode = -1;
    redisReply* reply = nullptr;
    if (redis->password.len) {
        reply = static_cast<redisReply*>(redis->username.len
            ? redisCommand(c, "AUTH %b %b", redis->username.data, redis->username.len, redis->password.data,
                           redis->password.len)
            : redisCommand(c, "AUTH %b", redis->password.data, redis->password.len));
        bool ok = reply != nullptr && reply->type != REDIS_REPLY_ERROR;
        if (reply) freeReplyObject(reply);
        if (!ok) {
            redisFree(c);
            return -1;  // the workers report the handshake's failure
        }
    }
    reply = static_cast<redisReply*>(redisCommand(c, "INFO cluster"));
    if (reply != nullptr && reply->type == REDIS_REPLY_STRING) {
        std::string_view info(reply->str, reply->len);
        if (info.find("cluster_enabled:1") != std::string_view::npos) mode = 1;
        else if (info.find("cluster_enabled:0") != std::string_view::npos) mode = 0;
    }
    if (reply) freeReplyObject(reply);
    redisFree(c);
    return mode;
}

}  // namespace

// A cluster configured against a standalone server, or the reverse, fails nginx's start (or
// reload) with a clear message, rather than every request later. Unreachable servers pass:
// nginx starts without Redis, and on_error applies until it is there.
ngx_int_t rl_redis_check_modes(ngx_cycle_t* cycle) noexcept {
    auto* mcf = static_cast<rl_main_conf_t*>(ngx_http_cycle_get_module_main_conf(cycle, ngx_http_ratelimit_module));
    if (mcf == nullptr) return NGX_OK;
    auto** all = static_cast<rl_redis_t**>(mcf->redis.elts);
    for (ngx_uint_t i = 0; i < mcf->redis.nelts; i++) {
        rl_redis_t* redis = all[i];
        auto* addrs = static_cast<ngx_addr_t*>(redis->addrs->elts);
        for (ngx_uint_t k = 0; k < redis->addrs->nelts; k++) {
            int mode = probe_cluster_mode(redis, addrs[k], cycle->log);
            if (mode < 0) continue;
            if (mode != (redis->cluster ? 1 : 0)) {
                ngx_log_error(NGX_LOG_EMERG, cycle->log, 0,
                              redis->cluster ? "ratelimit_redis \"%V\" is configured as a cluster, but %V is a "
                                               "standalone Redis (cluster mode is disabled) in %s:%ui"
                                             : "ratelimit_redis \"%V\" is configured as a standalone server, but %V is "
                                               "a Redis Cluster node: add \"cluster\" in %s:%ui",
                              &redis->name, &addrs[k].name, redis->file, redis->line);
                return NGX_ERROR;
            }
            break;  // one node that answers tells
        }
    }
    return NGX_OK;
}

// ratelimit_redis NAME [cluster] ADDRESS [ADDRESS ...] [username=U] [password=P] [database=N]
//                 [timeout=T] [connect_timeout=T] [prefix=S] [max_pending=N];
char* rl_redis_directive(ngx_conf_t* cf, ngx_command_t*, void* conf) noexcept {
    auto* mcf = static_cast<rl_main_conf_t*>(conf);
    auto* args = static_cast<ngx_str_t*>(cf->args->elts);
    auto* redis = static_cast<rl_redis_t*>(ngx_pcalloc(cf->pool, sizeof(rl_redis_t)));
    if (redis == nullptr) return static_cast<char*>(NGX_CONF_ERROR);
    redis->name = args[1];
    redis->file = cf->conf_file->file.name.data;
    redis->line = cf->conf_file->line;
    redis->timeout = kDefaultTimeout;
    redis->connect_timeout = kDefaultConnectTimeout;
    redis->max_pending = kDefaultMaxPending;
    ngx_str_set(&redis->prefix, "rl:");
    redis->addrs = ngx_array_create(cf->pool, 1, sizeof(ngx_addr_t));
    if (redis->addrs == nullptr) return static_cast<char*>(NGX_CONF_ERROR);

    if (rl_redis_find(mcf, redis->name) != nullptr) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0, "duplicate ratelimit_redis \"%V\"", &redis->name);
        return static_cast<char*>(NGX_CONF_ERROR);
    }

    bool connect_timeout_set = false;
    for (ngx_uint_t i = 2; i < cf->args->nelts; i++) {
        ngx_str_t& a = args[i];
        ngx_str_t v;
        if (i == 2 && a.len == 7 && ngx_strncmp(a.data, "cluster", 7) == 0) {
            redis->cluster = true;
        } else if (rl_arg(a, "password=", v)) {
            redis->password = v;
        } else if (rl_arg(a, "username=", v)) {
            redis->username = v;
        } else if (rl_arg(a, "database=", v)) {
            redis->database = ngx_atoi(v.data, v.len);
            if (redis->database == NGX_ERROR || redis->database > 1000000) {
                ngx_conf_log_error(NGX_LOG_EMERG, cf, 0, "invalid database \"%V\"", &a);
                return static_cast<char*>(NGX_CONF_ERROR);
            }
        } else if (rl_arg(a, "timeout=", v)) {
            if (!parse_msec(v, redis->timeout) || redis->timeout == 0) {
                ngx_conf_log_error(NGX_LOG_EMERG, cf, 0, "invalid timeout \"%V\"", &a);
                return static_cast<char*>(NGX_CONF_ERROR);
            }
        } else if (rl_arg(a, "connect_timeout=", v)) {
            if (!parse_msec(v, redis->connect_timeout) || redis->connect_timeout == 0) {
                ngx_conf_log_error(NGX_LOG_EMERG, cf, 0, "invalid connect_timeout \"%V\"", &a);
                return static_cast<char*>(NGX_CONF_ERROR);
            }
            connect_timeout_set = true;
        } else if (rl_arg(a, "prefix=", v)) {
            // Keys are laid out as prefix{zone:hash}: a brace in the prefix would move the hash tag.
            if (ngx_strlchr(v.data, v.data + v.len, '{') || ngx_strlchr(v.data, v.data + v.len, '}')) {
                ngx_conf_log_error(NGX_LOG_EMERG, cf, 0, "invalid prefix \"%V\": braces are not allowed", &v);
                return static_cast<char*>(NGX_CONF_ERROR);
            }
            redis->prefix = v;
        } else if (rl_arg(a, "max_pending=", v)) {
            ngx_int_t n = ngx_atoi(v.data, v.len);
            if (n == NGX_ERROR || n < 1) {
                ngx_conf_log_error(NGX_LOG_EMERG, cf, 0, "invalid max_pending \"%V\"", &a);
                return static_cast<char*>(NGX_CONF_ERROR);
            }
            redis->max_pending = static_cast<ngx_uint_t>(n);
        } else if (ngx_strlchr(a.data, a.data + a.len, '=') != nullptr && ngx_strncmp(a.data, "unix:", 5) != 0) {
            ngx_conf_log_error(NGX_LOG_EMERG, cf, 0, "invalid parameter \"%V\"", &a);
            return static_cast<char*>(NGX_CONF_ERROR);
        } else {
            if (!redis->cluster && redis->addrs->nelts == 1) {
                ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                                   "ratelimit_redis \"%V\" has more than one address: use \"cluster\" for seed nodes",
                                   &redis->name);
                return static_cast<char*>(NGX_CONF_ERROR);
            }
            if (!parse_address(cf, a, redis)) return static_cast<char*>(NGX_CONF_ERROR);
        }
    }
    if (redis->addrs->nelts == 0) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0, "ratelimit_redis \"%V\" needs an address", &redis->name);
        return static_cast<char*>(NGX_CONF_ERROR);
    }
    if (redis->username.len && !redis->password.len) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0, "ratelimit_redis \"%V\": \"username\" needs \"password\"",
                           &redis->name);
        return static_cast<char*>(NGX_CONF_ERROR);
    }
    if (!connect_timeout_set && redis->connect_timeout < redis->timeout) redis->connect_timeout = redis->timeout;
    if (redis->cluster && redis->database) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0, "ratelimit_redis \"%V\": a cluster has only database 0",
                           &redis->name);
        return static_cast<char*>(NGX_CONF_ERROR);
    }

    auto** slot = static_cast<rl_redis_t**>(ngx_array_push(&mcf->redis));
    if (slot == nullptr) return static_cast<char*>(NGX_CONF_ERROR);
    *slot = redis;
    return NGX_CONF_OK;
}

rl_redis_t* rl_redis_find(rl_main_conf_t* mcf, const ngx_str_t& name) noexcept {
    auto** all = static_cast<rl_redis_t**>(mcf->redis.elts);
    for (ngx_uint_t i = 0; i < mcf->redis.nelts; i++) {
        if (all[i]->name.len == name.len && ngx_strncmp(all[i]->name.data, name.data, name.len) == 0) return all[i];
    }
    return nullptr;
}

ngx_int_t rl_redis_init_process(ngx_cycle_t* cycle) noexcept {
    auto* mcf = static_cast<rl_main_conf_t*>(ngx_http_cycle_get_module_main_conf(cycle, ngx_http_ratelimit_module));
    if (mcf == nullptr) return NGX_OK;
    auto** all = static_cast<rl_redis_t**>(mcf->redis.elts);
    for (ngx_uint_t i = 0; i < mcf->redis.nelts; i++) {
        rl_redis_t* redis = all[i];
        redis->log = cycle->log;
        redis->pool = cycle->pool;
        ngx_queue_init(&redis->free_ops);
        ngx_queue_init(&redis->free_batches);
        if (!build_handshake(cycle->pool, redis)) return NGX_ERROR;
        auto* addrs = static_cast<ngx_addr_t*>(redis->addrs->elts);
        redis->nodes_cap = redis->addrs->nelts + 8;
        redis->nodes = static_cast<rl_redis_node_t**>(ngx_calloc(redis->nodes_cap * sizeof(rl_redis_node_t*), cycle->log));
        if (redis->nodes == nullptr) return NGX_ERROR;
        for (ngx_uint_t k = 0; k < redis->addrs->nelts; k++) {
            rl_redis_node_t* node = rl_redis_node_create(redis, addrs[k]);
            if (node == nullptr) return NGX_ERROR;
            redis->nodes[redis->nnodes++] = node;
            rl_redis_node_connect(node);
        }
        if (redis->cluster && !rl_cluster_init(redis)) return NGX_ERROR;
    }
    return NGX_OK;
}

void rl_redis_exit_process(ngx_cycle_t* cycle) noexcept {
    auto* mcf = static_cast<rl_main_conf_t*>(ngx_http_cycle_get_module_main_conf(cycle, ngx_http_ratelimit_module));
    if (mcf == nullptr) return;
    auto** all = static_cast<rl_redis_t**>(mcf->redis.elts);
    for (ngx_uint_t i = 0; i < mcf->redis.nelts; i++) {
        for (ngx_uint_t k = 0; k < all[i]->nnodes; k++) rl_redis_node_close(all[i]->nodes[k]);
    }
}
