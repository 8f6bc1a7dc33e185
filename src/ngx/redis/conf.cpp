// ratelimit_redis: parsing, and each worker's start: the handshake it writes on every
// connection, the check of its replies, and the connections themselves. The master never
// talks to Redis.
#include "ngx/redis/conf.h"

#include "core/log_text.h"
#include "core/rate.h"
#include "core/redis_script.h"
#include "ngx/redis/cluster.h"
#include "ngx/redis/node.h"
#include "ngx/redis/request.h"

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
        if (u.err) rl_conf_error(cf, "%s in redis address \"%V\"", u.err, &text);
        return false;
    }
    if (u.naddrs == 0) {
        rl_conf_error(cf, "no address for redis \"%V\"", &text);
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
    // Cluster or standalone: told by the server on each connection, so that the master never
    // waits on the network (nginx -t and reloads do not depend on Redis).
    const char* info[2] = {"INFO", "cluster"};
    size_t info_lens[2] = {4, 7};
    if (!append_command(pool, out, 2, info, info_lens)) return false;
    redis->mode_check = replies++;
    // The checks run as a Function (FCALL: its Lua is compiled once, at load), or on servers
    // without Functions (before Redis 7) as a script (EVALSHA): both are loaded, the replies tell.
    std::string_view library = rl::function_library_text();
    const char* fn_argv[4] = {"FUNCTION", "LOAD", "REPLACE", library.data()};
    size_t fn_lens[4] = {8, 4, 7, library.size()};
    size_t fn_at = out.len;
    if (!append_command(pool, out, 4, fn_argv, fn_lens)) return false;
    redis->function_check = replies++;
    std::string_view script = rl::script_text(false);
    const char* argv[3] = {"SCRIPT", "LOAD", script.data()};
    size_t lens[3] = {6, 4, script.size()};
    size_t script_at = out.len;
    if (!append_command(pool, out, 3, argv, lens)) return false;
    replies++;
    redis->conn.handshake = out.data;
    redis->conn.handshake_len = out.len;
    redis->conn.handshake_replies = replies;
    redis->function_load = {script_at - fn_at, out.data + fn_at};
    redis->script_load = {out.len - script_at, out.data + script_at};
    return true;
}

// A reply to the handshake: an error (WRONGPASS, NOAUTH, ERR DB index...) or a server of the
// other mode makes the connection fail, so on_error applies, and is logged (rate limited).
bool check_handshake(rl_conn_t* conn, ngx_uint_t index, const redisReply* reply) noexcept {
    auto* node = static_cast<rl_redis_node_t*>(conn->data);
    rl_redis_t* redis = node->redis;
    if (index == redis->function_check) {
        // No Functions here (an older Redis, or an ACL without FUNCTION): scripts serve.
        node->scripts = reply->type == REDIS_REPLY_ERROR;
        return true;
    }
    if (reply->type == REDIS_REPLY_ERROR) {
        // The reply names the problem, never the password.
        char text[rl::kLogTextCap];
        size_t n = rl::log_text(reply->str, reply->len, text, sizeof(text));
        rl_redis_log_error(&redis->conn, 0, "ratelimit redis \"%V\" at %V: handshake failed: %*s", &redis->name,
                           &conn->addr.name, n, text);
        return false;
    }
    if (index != redis->mode_check || reply->type != REDIS_REPLY_STRING) return true;
    std::string_view info(reply->str, reply->len);
    bool cluster = info.find("cluster_enabled:1") != std::string_view::npos;
    if (cluster == redis->cluster) return true;
    rl_redis_log_error(&redis->conn, 0,
                       redis->cluster ? "ratelimit_redis \"%V\" is configured as a cluster, but %V is a standalone "
                                        "Redis (cluster mode is disabled) in %s:%ui"
                                      : "ratelimit_redis \"%V\" is configured as a standalone server, but %V is a "
                                        "Redis Cluster node: add \"cluster\" in %s:%ui",
                       &redis->name, &conn->addr.name, redis->file, redis->line);
    return false;
}

}  // namespace

// ratelimit_redis NAME [cluster] ADDRESS [ADDRESS ...] [username=U] [password=P] [database=N]
//                 [timeout=T] [connect_timeout=T] [prefix=S] [max_pending=N];
char* rl_redis_directive(ngx_conf_t* cf, ngx_command_t*, void* conf) noexcept {
    auto* mcf = static_cast<rl_main_conf_t*>(conf);
    auto* args = static_cast<ngx_str_t*>(cf->args->elts);
    if (!rl_no_duplicate_params(cf, 2)) return static_cast<char*>(NGX_CONF_ERROR);
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
        return rl_conf_error(cf, "duplicate ratelimit_redis \"%V\"", &redis->name);
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
                return rl_conf_error(cf, "invalid database \"%V\"", &a);
            }
        } else if (rl_arg(a, "timeout=", v)) {
            if (!parse_msec(v, redis->timeout) || redis->timeout == 0) {
                return rl_conf_error(cf, "invalid timeout \"%V\"", &a);
            }
        } else if (rl_arg(a, "connect_timeout=", v)) {
            if (!parse_msec(v, redis->connect_timeout) || redis->connect_timeout == 0) {
                return rl_conf_error(cf, "invalid connect_timeout \"%V\"", &a);
            }
            connect_timeout_set = true;
        } else if (rl_arg(a, "prefix=", v)) {
            // Keys are laid out as prefix{zone:hash}: a brace in the prefix would move the hash tag.
            if (ngx_strlchr(v.data, v.data + v.len, '{') || ngx_strlchr(v.data, v.data + v.len, '}')) {
                return rl_conf_error(cf, "invalid prefix \"%V\": braces are not allowed", &v);
            }
            redis->prefix = v;
        } else if (rl_arg(a, "max_pending=", v)) {
            ngx_int_t n = ngx_atoi(v.data, v.len);
            if (n == NGX_ERROR || n < 1) {
                return rl_conf_error(cf, "invalid max_pending \"%V\"", &a);
            }
            redis->max_pending = static_cast<ngx_uint_t>(n);
        } else if (ngx_strlchr(a.data, a.data + a.len, '=') != nullptr && ngx_strncmp(a.data, "unix:", 5) != 0) {
            return rl_conf_error(cf, "invalid parameter \"%V\"", &a);
        } else {
            if (!redis->cluster && redis->addrs->nelts == 1) {
                return rl_conf_error(cf,
                                   "ratelimit_redis \"%V\" has more than one address: use \"cluster\" for seed nodes",
                                   &redis->name);
            }
            if (!parse_address(cf, a, redis)) return static_cast<char*>(NGX_CONF_ERROR);
        }
    }
    if (redis->addrs->nelts == 0) {
        return rl_conf_error(cf, "ratelimit_redis \"%V\" needs an address", &redis->name);
    }
    if (redis->username.len && !redis->password.len) {
        return rl_conf_error(cf, "ratelimit_redis \"%V\": \"username\" needs \"password\"",
                           &redis->name);
    }
    if (!connect_timeout_set && redis->connect_timeout < redis->timeout) redis->connect_timeout = redis->timeout;
    if (redis->cluster && redis->database) {
        return rl_conf_error(cf, "ratelimit_redis \"%V\": a cluster has only database 0",
                           &redis->name);
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
    // Workers only: the cache manager and loader run init_process too, and never serve requests.
    if (ngx_process != NGX_PROCESS_WORKER && ngx_process != NGX_PROCESS_SINGLE) return NGX_OK;
    auto* mcf = static_cast<rl_main_conf_t*>(ngx_http_cycle_get_module_main_conf(cycle, ngx_http_ratelimit_module));
    if (mcf == nullptr) return NGX_OK;
    auto** all = static_cast<rl_redis_t**>(mcf->redis.elts);
    for (ngx_uint_t i = 0; i < mcf->redis.nelts; i++) {
        rl_redis_t* redis = all[i];
        rl_conn_shared_t& shared = redis->conn;
        shared.name = redis->name;
        shared.log = cycle->log;
        shared.timeout = redis->timeout;
        shared.connect_timeout = redis->connect_timeout;
        shared.handshake_reply = check_handshake;
        shared.fill = rl_redis_request_fill;
        shared.failed = rl_redis_request_failed;
        ngx_queue_init(&shared.free_ops);
        redis->pool = cycle->pool;
        ngx_queue_init(&redis->free_batches);
        if (!build_handshake(cycle->pool, redis)) return NGX_ERROR;
        auto* addrs = static_cast<ngx_addr_t*>(redis->addrs->elts);
        for (ngx_uint_t k = 0; k < redis->addrs->nelts; k++) {
            rl_redis_node_t* node = rl_node_add(redis, addrs[k]);
            if (node == nullptr) return NGX_ERROR;
            rl_conn_usable(&node->conn);  // connect now rather than on the first request
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
        for (ngx_uint_t k = 0; k < all[i]->nodes.n; k++) rl_conn_close(&all[i]->nodes.elts[k]->conn);
    }
}
