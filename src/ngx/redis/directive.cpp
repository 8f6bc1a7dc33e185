// ratelimit_redis: parsing, and each worker's start: the handshake it writes on every
// connection, the check of its replies, and the connections themselves. The master never
// talks to Redis.
#include "ngx/redis/redis.h"

#include "core/text/log_text.h"
#include "core/text/rate.h"
#include "core/wire/redis_info.h"
#include "core/wire/redis_script.h"
#include "ngx/redis/cluster.h"
#include "ngx/stores/redis_held.h"
#include "ngx/redis/node.h"
#include "ngx/stores/redis_request.h"
#include "ngx/redis/resolve.h"
#include "ngx/redis/sentinel.h"
#include "ngx/redis/tls.h"

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
    u.no_resolve = 1;  // first the parts; a name is resolved below unless the worker does it
    if (ngx_parse_url(cf->pool, &u) != NGX_OK) {
        if (u.err) rl_conf_error(cf, "%s in redis address \"%V\"", u.err, &text);
        return false;
    }
    auto* a = static_cast<rl_redis_addr_t*>(ngx_array_push(redis->addrs));
    if (a == nullptr) return false;
    ngx_memzero(a, sizeof(*a));
    a->host = u.host;
    if (a->host.len > 2 && a->host.data[0] == '[') a->host = {a->host.len - 2, a->host.data + 1};
    a->port = u.port;
    ngx_addr_t probe;
    a->literal = u.naddrs > 0 || ngx_parse_addr(cf->pool, &probe, a->host.data, a->host.len) == NGX_OK;
    if (redis->resolve && !a->literal) {
        a->addr.name = text;  // resolved in the worker (resolve.cpp)
        return true;
    }
    if (u.naddrs == 0) {
        ngx_memzero(&u, sizeof(u));
        u.url = text;
        u.default_port = 6379;
        if (ngx_parse_url(cf->pool, &u) != NGX_OK) {
            if (u.err) rl_conf_error(cf, "%s in redis address \"%V\"", u.err, &text);
            return false;
        }
    }
    if (u.naddrs == 0) {
        rl_conf_error(cf, "no address for redis \"%V\"", &text);
        return false;
    }
    a->addr = u.addrs[0];
    return true;
}

// A file parameter: relative to the configuration prefix, as nginx's own *_certificate.
bool file_param(ngx_conf_t* cf, const ngx_str_t& arg, ngx_str_t value, ngx_str_t* out) {
    if (value.len == 0) {
        rl_conf_error(cf, "invalid parameter \"%V\": the file is missing", &arg);
        return false;
    }
    if (ngx_conf_full_name(cf->cycle, &value, 1) != NGX_OK) return false;
    *out = value;
    return true;
}

bool build_handshake(ngx_pool_t* pool, rl_redis_t* redis) {
    ngx_str_t out = ngx_null_string;
    ngx_uint_t replies = 0;
    if (redis->password.len) {
        if (!rl_redis_append_auth(pool, out, redis->username, redis->password)) return false;
        replies++;
    }
    if (redis->database) {
        u_char db[NGX_INT_T_LEN];
        size_t n = static_cast<size_t>(ngx_sprintf(db, "%i", redis->database) - db);
        const char* argv[2] = {"SELECT", reinterpret_cast<const char*>(db)};
        size_t lens[2] = {6, n};
        if (!rl_redis_append_command(pool, out, 2, argv, lens)) return false;
        replies++;
    }
    // Cluster, standalone or Sentinel: told by the server on each connection, so that the
    // master never waits on the network (nginx -t and reloads do not depend on Redis).
    // INFO's default sections: redis_mode (server) and, for servers that leave it out,
    // cluster_enabled (cluster).
    const char* info[1] = {"INFO"};
    size_t info_lens[1] = {4};
    if (!rl_redis_append_command(pool, out, 1, info, info_lens)) return false;
    redis->mode_check = replies++;
    if (redis->sentinel.len) {
        // What a Sentinel named may since have become a replica: its ROLE says.
        const char* role[1] = {"ROLE"};
        size_t role_lens[1] = {4};
        if (!rl_redis_append_command(pool, out, 1, role, role_lens)) return false;
        redis->role_check = replies++;
    }
    // The checks run as a Function (FCALL: its Lua is compiled once, at load), or on servers
    // without Functions (before Redis 7) as a script (EVALSHA): both are loaded, the replies tell.
    std::string_view library = rl::function_library_text();
    const char* fn_argv[4] = {"FUNCTION", "LOAD", "REPLACE", library.data()};
    size_t fn_lens[4] = {8, 4, 7, library.size()};
    size_t fn_at = out.len;
    if (!rl_redis_append_command(pool, out, 4, fn_argv, fn_lens)) return false;
    redis->function_check = replies++;
    std::string_view script = rl::script_text(false);
    const char* argv[3] = {"SCRIPT", "LOAD", script.data()};
    size_t lens[3] = {6, 4, script.size()};
    size_t script_at = out.len;
    if (!rl_redis_append_command(pool, out, 3, argv, lens)) return false;
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
    if (index == redis->role_check && redis->sentinel.len) {
        bool master = reply->type == REDIS_REPLY_ARRAY && reply->elements > 0 &&
                      reply->element[0]->type == REDIS_REPLY_STRING && reply->element[0]->len == 6 &&
                      ngx_strncmp(reply->element[0]->str, "master", 6) == 0;
        if (master) return true;
        rl_redis_log_error(&redis->conn, 0, "ratelimit redis \"%V\" at %V is a replica, not the master \"%V\": "
                           "asking the Sentinels again", &redis->name, &conn->addr.name, &redis->sentinel);
        return false;
    }
    if (index != redis->mode_check || reply->type != REDIS_REPLY_STRING) return true;
    std::string_view mode = rl::info_field({reply->str, reply->len}, "redis_mode");
    if (mode == "sentinel") {
        rl_redis_log_error(&redis->conn, 0, "ratelimit_redis \"%V\": %V is a Sentinel: use \"sentinel=MASTER_NAME\" "
                           "and the Sentinels' addresses in %s:%ui", &redis->name, &conn->addr.name, redis->file,
                           redis->line);
        return false;
    }
    bool cluster = mode == "cluster" || rl::info_field({reply->str, reply->len}, "cluster_enabled") == "1";
    if (cluster == redis->cluster) return true;
    rl_redis_log_error(&redis->conn, 0,
                       redis->cluster ? "ratelimit_redis \"%V\" is configured as a cluster, but %V is a standalone "
                                        "Redis (cluster mode is disabled) in %s:%ui"
                                      : "ratelimit_redis \"%V\" is configured as a standalone server, but %V is a "
                                        "Redis Cluster node: add \"cluster\" in %s:%ui",
                       &redis->name, &conn->addr.name, redis->file, redis->line);
    return false;
}

// A node failed or refused writes: where its address comes from may know better.
void address_stale(rl_redis_node_t* node) noexcept {
    rl_redis_t* redis = node->redis;
    if (redis->sentinel.len) {
        rl_sentinel_ask_soon(redis);
    } else if (redis->resolve) {
        rl_resolve_soon(redis, &node->conn);
    }
}

}  // namespace

// ratelimit_redis NAME [cluster | sentinel=MASTER] ADDRESS [ADDRESS ...] [username=U] [password=P]
//                 [database=N] [timeout=T] [connect_timeout=T] [prefix=S] [max_pending=N] [ssl ...]
//                 [sentinel_username=U sentinel_password=P] [resolve];
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
    redis->ssl_verify = true;
    ngx_str_set(&redis->prefix, "rl:");
    redis->addrs = ngx_array_create(cf->pool, 1, sizeof(rl_redis_addr_t));
    ngx_array_t* texts = ngx_array_create(cf->pool, 1, sizeof(ngx_str_t));
    if (redis->addrs == nullptr || texts == nullptr) return static_cast<char*>(NGX_CONF_ERROR);

    if (rl_redis_find(mcf, redis->name) != nullptr) {
        return rl_conf_error(cf, "duplicate ratelimit_redis \"%V\"", &redis->name);
    }

    bool connect_timeout_set = false;
    const ngx_str_t* ssl_param = nullptr;  // an ssl_* parameter, which needs "ssl"
    for (ngx_uint_t i = 2; i < cf->args->nelts; i++) {
        ngx_str_t& a = args[i];
        ngx_str_t v;
        if (i == 2 && a.len == 7 && ngx_strncmp(a.data, "cluster", 7) == 0) {
            redis->cluster = true;
        } else if (i == 2 && rl_arg(a, "sentinel=", v)) {
            if (v.len == 0) return rl_conf_error(cf, "invalid parameter \"%V\": the master's name is missing", &a);
            redis->sentinel = v;
        } else if (rl_arg(a, "password=", v)) {
            redis->password = v;
        } else if (rl_arg(a, "username=", v)) {
            redis->username = v;
        } else if (rl_arg(a, "sentinel_password=", v)) {
            redis->sentinel_password = v;
        } else if (rl_arg(a, "sentinel_username=", v)) {
            redis->sentinel_username = v;
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
        } else if (a.len == 3 && ngx_strncmp(a.data, "ssl", 3) == 0) {
            redis->ssl = true;
        } else if (a.len == 7 && ngx_strncmp(a.data, "resolve", 7) == 0) {
            redis->resolve = true;
        } else if (rl_arg(a, "ssl_verify=", v)) {
            bool on = v.len == 2 && ngx_strncmp(v.data, "on", 2) == 0;
            if (!on && !(v.len == 3 && ngx_strncmp(v.data, "off", 3) == 0)) {
                return rl_conf_error(cf, "invalid ssl_verify \"%V\": on or off", &a);
            }
            redis->ssl_verify = on;
            ssl_param = &a;
        } else if (rl_arg(a, "ssl_name=", v)) {
            if (v.len == 0 || v.len > 253) return rl_conf_error(cf, "invalid ssl_name \"%V\"", &a);
            redis->ssl_name = v;
            ssl_param = &a;
        } else if (rl_arg(a, "ssl_trusted_certificate=", v)) {
            if (!file_param(cf, a, v, &redis->ssl_trusted_certificate)) return static_cast<char*>(NGX_CONF_ERROR);
            ssl_param = &a;
        } else if (rl_arg(a, "ssl_certificate=", v)) {
            if (!file_param(cf, a, v, &redis->ssl_certificate)) return static_cast<char*>(NGX_CONF_ERROR);
            ssl_param = &a;
        } else if (rl_arg(a, "ssl_certificate_key=", v)) {
            if (!file_param(cf, a, v, &redis->ssl_certificate_key)) return static_cast<char*>(NGX_CONF_ERROR);
            ssl_param = &a;
        } else if ((a.len == 7 && ngx_strncmp(a.data, "cluster", 7) == 0) || rl_arg(a, "sentinel=", v)) {
            return rl_conf_error(cf, "\"%V\" must come right after the name, and only one of \"cluster\" and "
                                     "\"sentinel=\"", &a);
        } else if (ngx_strlchr(a.data, a.data + a.len, '=') != nullptr && ngx_strncmp(a.data, "unix:", 5) != 0) {
            return rl_conf_error(cf, "invalid parameter \"%V\"", &a);
        } else {
            if (!redis->cluster && !redis->sentinel.len && texts->nelts == 1) {
                return rl_conf_error(cf,
                                   "ratelimit_redis \"%V\" has more than one address: use \"cluster\" for seed nodes",
                                   &redis->name);
            }
            auto* t = static_cast<ngx_str_t*>(ngx_array_push(texts));
            if (t == nullptr) return static_cast<char*>(NGX_CONF_ERROR);
            *t = a;
        }
    }
    auto* text = static_cast<ngx_str_t*>(texts->elts);
    for (ngx_uint_t i = 0; i < texts->nelts; i++) {
        if (!parse_address(cf, text[i], redis)) return static_cast<char*>(NGX_CONF_ERROR);
    }
    if (redis->addrs->nelts == 0) {
        return rl_conf_error(cf, "ratelimit_redis \"%V\" needs an address", &redis->name);
    }
    if (redis->username.len && !redis->password.len) {
        return rl_conf_error(cf, "ratelimit_redis \"%V\": \"username\" needs \"password\"",
                           &redis->name);
    }
    if ((redis->sentinel_username.len || redis->sentinel_password.len) && !redis->sentinel.len) {
        return rl_conf_error(cf, "ratelimit_redis \"%V\": \"sentinel_username\" and \"sentinel_password\" need "
                                 "\"sentinel=MASTER_NAME\"", &redis->name);
    }
    if (redis->sentinel_username.len && !redis->sentinel_password.len) {
        return rl_conf_error(cf, "ratelimit_redis \"%V\": \"sentinel_username\" needs \"sentinel_password\"",
                           &redis->name);
    }
    if (!connect_timeout_set && redis->connect_timeout < redis->timeout) redis->connect_timeout = redis->timeout;
    if (redis->cluster && redis->database) {
        return rl_conf_error(cf, "ratelimit_redis \"%V\": a cluster has only database 0",
                           &redis->name);
    }
    if (ssl_param != nullptr && !redis->ssl) {
        return rl_conf_error(cf, "ratelimit_redis \"%V\": \"%V\" needs \"ssl\"", &redis->name, ssl_param);
    }
    if ((redis->ssl_certificate.len != 0) != (redis->ssl_certificate_key.len != 0)) {
        return rl_conf_error(cf, "ratelimit_redis \"%V\": \"ssl_certificate\" and \"ssl_certificate_key\" go "
                                 "together", &redis->name);
    }
    if (redis->ssl) {
        auto* addrs = static_cast<rl_redis_addr_t*>(redis->addrs->elts);
        for (ngx_uint_t i = 0; i < redis->addrs->nelts; i++) {
            if (addrs[i].addr.sockaddr != nullptr && addrs[i].addr.sockaddr->sa_family == AF_UNIX) {
                return rl_conf_error(cf, "ratelimit_redis \"%V\": \"ssl\" with a unix: socket (Redis speaks "
                                         "TLS on TCP ports only)", &redis->name);
            }
        }
        if (!rl_tls_available()) {
            return rl_conf_error(cf, "ratelimit_redis \"%V\": \"ssl\" needs nginx built with OpenSSL "
                                     "(--with-http_ssl_module)", &redis->name);
        }
        rl_tls_conf_t tls{redis->ssl_verify, redis->ssl_trusted_certificate, redis->ssl_certificate,
                          redis->ssl_certificate_key};
        redis->ssl_ctx = rl_tls_create(cf, tls);
        if (redis->ssl_ctx == nullptr) {
            return rl_conf_error(cf, "ratelimit_redis \"%V\": TLS settings failed (see above)", &redis->name);
        }
        if (!redis->ssl_verify) {
            ngx_conf_log_error(NGX_LOG_WARN, cf, 0, "ratelimit_redis \"%V\": ssl_verify=off: the certificate of "
                                                    "Redis is not checked", &redis->name);
        }
    }

    auto** slot = static_cast<rl_redis_t**>(ngx_array_push(&mcf->redis));
    if (slot == nullptr) return static_cast<char*>(NGX_CONF_ERROR);
    *slot = redis;
    return NGX_CONF_OK;
}

bool rl_redis_append_command(ngx_pool_t* pool, ngx_str_t& out, int argc, const char** argv,
                             const size_t* lens) noexcept {
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

bool rl_redis_append_auth(ngx_pool_t* pool, ngx_str_t& out, const ngx_str_t& username,
                          const ngx_str_t& password) noexcept {
    const char* argv[3] = {"AUTH", nullptr, nullptr};
    size_t lens[3] = {4, 0, 0};
    int argc = 1;
    if (username.len) {
        argv[argc] = reinterpret_cast<const char*>(username.data);
        lens[argc++] = username.len;
    }
    argv[argc] = reinterpret_cast<const char*>(password.data);
    lens[argc++] = password.len;
    return rl_redis_append_command(pool, out, argc, argv, lens);
}

ngx_int_t rl_redis_postconfiguration(ngx_conf_t* cf, rl_main_conf_t* mcf) noexcept {
    auto* all = static_cast<rl_redis_t**>(mcf->redis.elts);
    auto* clcf = static_cast<ngx_http_core_loc_conf_t*>(ngx_http_conf_get_module_loc_conf(cf, ngx_http_core_module));
    for (ngx_uint_t i = 0; i < mcf->redis.nelts; i++) {
        rl_redis_t* redis = all[i];
        if (!redis->resolve) continue;
        if (clcf->resolver == nullptr || clcf->resolver->connections.nelts == 0) {
            rl_conf_error_at(cf, "ratelimit_redis", redis->file, redis->line,
                             "ratelimit_redis \"%V\": \"resolve\" needs a \"resolver\" in http{}", &redis->name);
            return NGX_ERROR;
        }
        redis->resolver = clcf->resolver;
        // http{}'s own settings are not merged: unset means nginx's default, 30 s.
        redis->resolver_timeout = clcf->resolver_timeout == NGX_CONF_UNSET_MSEC ? 30000 : clcf->resolver_timeout;
    }
    return NGX_OK;
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
        rl_held_init(redis);
        shared.ssl = redis->ssl_ctx;
        shared.ssl_verify = redis->ssl_verify;
        if (!build_handshake(cycle->pool, redis)) return NGX_ERROR;
        redis->address_stale = address_stale;
        if (redis->resolve && !rl_resolve_init(redis)) return NGX_ERROR;
        if (redis->sentinel.len) {
            // One server, the master, whose address the Sentinels give (sentinel.cpp).
            ngx_addr_t none;
            ngx_memzero(&none, sizeof(none));
            ngx_str_set(&none.name, "(master not known yet)");
            rl_redis_node_t* master = rl_node_add(redis, none);
            if (master == nullptr || !rl_sentinel_init(redis)) return NGX_ERROR;
            master->conn.tls_name = redis->ssl_name;  // else the address the Sentinels give
        } else {
            auto* addrs = static_cast<rl_redis_addr_t*>(redis->addrs->elts);
            for (ngx_uint_t k = 0; k < redis->addrs->nelts; k++) {
                rl_redis_node_t* node = rl_node_add(redis, addrs[k].addr);
                if (node == nullptr) return NGX_ERROR;
                node->conn.tls_name = redis->ssl_name.len ? redis->ssl_name : addrs[k].host;
                if (redis->resolve && !addrs[k].literal &&
                    !rl_resolve_watch(redis, &node->conn, addrs[k].host, addrs[k].port)) {
                    return NGX_ERROR;
                }
                rl_conn_usable(&node->conn);  // connect now rather than on the first request
            }
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
        rl_sentinel_exit(all[i]);
        rl_resolve_exit(all[i]);
        rl_held_exit(all[i]);
        for (ngx_uint_t k = 0; k < all[i]->nodes.n; k++) rl_conn_close(&all[i]->nodes.elts[k]->conn);
    }
}
