// ratelimit_redis: its parameters read, then checked together; its addresses; its TLS context.
#include "ngx/redis/redis.h"

#include "core/text/rate.h"
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

// What the parameters said beyond what goes into the ratelimit_redis itself.
struct redis_args_t {
    ngx_array_t* texts;          // the addresses, as written
    bool connect_timeout_set;
    const ngx_str_t* ssl_param;  // an ssl_* parameter, which needs "ssl"
};

// The TLS parameters.
rl_param_e read_ssl_param(ngx_conf_t* cf, rl_redis_t* redis, redis_args_t& r, ngx_str_t& a) {
    ngx_str_t v;
    if (rl_word(a, "ssl")) {
        redis->ssl = true;
        return RL_PARAM_READ;
    }
    if (rl_arg(a, "ssl_verify=", v)) {
        bool on = rl_sv(v) == "on";
        if (!on && rl_sv(v) != "off") return rl_param_error(cf, "invalid ssl_verify \"%V\": on or off", &a);
        redis->ssl_verify = on;
    } else if (rl_arg(a, "ssl_name=", v)) {
        if (v.len == 0 || v.len > 253) return rl_param_error(cf, "invalid ssl_name \"%V\"", &a);
        redis->ssl_name = v;
    } else if (rl_arg(a, "ssl_trusted_certificate=", v)) {
        if (!file_param(cf, a, v, &redis->ssl_trusted_certificate)) return RL_PARAM_ERROR;
    } else if (rl_arg(a, "ssl_certificate=", v)) {
        if (!file_param(cf, a, v, &redis->ssl_certificate)) return RL_PARAM_ERROR;
    } else if (rl_arg(a, "ssl_certificate_key=", v)) {
        if (!file_param(cf, a, v, &redis->ssl_certificate_key)) return RL_PARAM_ERROR;
    } else {
        return RL_PARAM_OTHER;
    }
    r.ssl_param = &a;
    return RL_PARAM_READ;
}

// The parameter `a` (argument i): into the ratelimit_redis, or an address into r.texts.
rl_param_e read_param(ngx_conf_t* cf, rl_redis_t* redis, redis_args_t& r, ngx_uint_t i, ngx_str_t& a) {
    ngx_str_t v;
    if (i == 2 && rl_word(a, "cluster")) {
        redis->cluster = true;
    } else if (i == 2 && rl_arg(a, "sentinel=", v)) {
        if (v.len == 0) return rl_param_error(cf, "invalid parameter \"%V\": the master's name is missing", &a);
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
            return rl_param_error(cf, "invalid database \"%V\"", &a);
        }
    } else if (rl_arg(a, "timeout=", v)) {
        if (!parse_msec(v, redis->timeout) || redis->timeout == 0) return rl_param_error(cf, "invalid timeout \"%V\"", &a);
    } else if (rl_arg(a, "connect_timeout=", v)) {
        if (!parse_msec(v, redis->connect_timeout) || redis->connect_timeout == 0) {
            return rl_param_error(cf, "invalid connect_timeout \"%V\"", &a);
        }
        r.connect_timeout_set = true;
    } else if (rl_arg(a, "prefix=", v)) {
        // Keys are laid out as prefix{zone:hash}: a brace in the prefix would move the hash tag.
        if (ngx_strlchr(v.data, v.data + v.len, '{') || ngx_strlchr(v.data, v.data + v.len, '}')) {
            return rl_param_error(cf, "invalid prefix \"%V\": braces are not allowed", &v);
        }
        redis->prefix = v;
    } else if (rl_arg(a, "max_pending=", v)) {
        ngx_int_t n = ngx_atoi(v.data, v.len);
        if (n == NGX_ERROR || n < 1) return rl_param_error(cf, "invalid max_pending \"%V\"", &a);
        redis->max_pending = static_cast<ngx_uint_t>(n);
    } else if (rl_word(a, "resolve")) {
        redis->resolve = true;
    } else if (rl_param_e rv = read_ssl_param(cf, redis, r, a); rv != RL_PARAM_OTHER) {
        return rv;
    } else if (rl_word(a, "cluster") || rl_arg(a, "sentinel=", v)) {
        return rl_param_error(cf, "\"%V\" must come right after the name, and only one of \"cluster\" and "
                                 "\"sentinel=\"", &a);
    } else if (ngx_strlchr(a.data, a.data + a.len, '=') != nullptr && ngx_strncmp(a.data, "unix:", 5) != 0) {
        return rl_param_error(cf, "invalid parameter \"%V\"", &a);
    } else {
        if (!redis->cluster && !redis->sentinel.len && r.texts->nelts == 1) {
            return rl_param_error(cf, "ratelimit_redis \"%V\" has more than one address: use \"cluster\" for seed nodes",
                                 &redis->name);
        }
        auto* t = static_cast<ngx_str_t*>(ngx_array_push(r.texts));
        if (t == nullptr) return RL_PARAM_ERROR;
        *t = a;
    }
    return RL_PARAM_READ;
}

// The credentials and the database, together.
bool check_auth(ngx_conf_t* cf, rl_redis_t* redis) {
    if (redis->username.len && !redis->password.len) {
        rl_conf_error(cf, "ratelimit_redis \"%V\": \"username\" needs \"password\"", &redis->name);
        return false;
    }
    if ((redis->sentinel_username.len || redis->sentinel_password.len) && !redis->sentinel.len) {
        rl_conf_error(cf, "ratelimit_redis \"%V\": \"sentinel_username\" and \"sentinel_password\" need "
                          "\"sentinel=MASTER_NAME\"", &redis->name);
        return false;
    }
    if (redis->sentinel_username.len && !redis->sentinel_password.len) {
        rl_conf_error(cf, "ratelimit_redis \"%V\": \"sentinel_username\" needs \"sentinel_password\"", &redis->name);
        return false;
    }
    if (redis->cluster && redis->database) {
        rl_conf_error(cf, "ratelimit_redis \"%V\": a cluster has only database 0", &redis->name);
        return false;
    }
    return true;
}

// TLS, together: its parameters, the addresses it can take, and its context.
bool check_ssl(ngx_conf_t* cf, rl_redis_t* redis, const redis_args_t& r) {
    if (r.ssl_param != nullptr && !redis->ssl) {
        rl_conf_error(cf, "ratelimit_redis \"%V\": \"%V\" needs \"ssl\"", &redis->name, r.ssl_param);
        return false;
    }
    if ((redis->ssl_certificate.len != 0) != (redis->ssl_certificate_key.len != 0)) {
        rl_conf_error(cf, "ratelimit_redis \"%V\": \"ssl_certificate\" and \"ssl_certificate_key\" go together",
                      &redis->name);
        return false;
    }
    if (!redis->ssl) return true;
    auto* addrs = static_cast<rl_redis_addr_t*>(redis->addrs->elts);
    for (ngx_uint_t i = 0; i < redis->addrs->nelts; i++) {
        if (addrs[i].addr.sockaddr != nullptr && addrs[i].addr.sockaddr->sa_family == AF_UNIX) {
            rl_conf_error(cf, "ratelimit_redis \"%V\": \"ssl\" with a unix: socket (Redis speaks TLS on TCP ports "
                              "only)", &redis->name);
            return false;
        }
    }
    if (!rl_tls_available()) {
        rl_conf_error(cf, "ratelimit_redis \"%V\": \"ssl\" needs nginx built with OpenSSL (--with-http_ssl_module)",
                      &redis->name);
        return false;
    }
    rl_tls_conf_t tls{redis->ssl_verify, redis->ssl_trusted_certificate, redis->ssl_certificate,
                      redis->ssl_certificate_key};
    redis->ssl_ctx = rl_tls_create(cf, tls);
    if (redis->ssl_ctx == nullptr) {
        rl_conf_error(cf, "ratelimit_redis \"%V\": TLS settings failed (see above)", &redis->name);
        return false;
    }
    if (!redis->ssl_verify) {
        ngx_conf_log_error(NGX_LOG_WARN, cf, 0, "ratelimit_redis \"%V\": ssl_verify=off: the certificate of Redis is "
                                                "not checked", &redis->name);
    }
    return true;
}

}  // namespace

// ratelimit_redis NAME [cluster | sentinel=MASTER] ADDRESS [ADDRESS ...] [username=U] [password=P]
//                 [database=N] [timeout=T] [connect_timeout=T] [prefix=S] [max_pending=N] [ssl ...]
//                 [sentinel_username=U sentinel_password=P] [resolve];
char* rl_redis_parse(ngx_conf_t* cf, ngx_array_t* all) noexcept {
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
    redis_args_t r{};
    r.texts = ngx_array_create(cf->pool, 1, sizeof(ngx_str_t));
    if (redis->addrs == nullptr || r.texts == nullptr) return static_cast<char*>(NGX_CONF_ERROR);
    if (rl_redis_find(all, redis->name) != nullptr) {
        return rl_conf_error(cf, "duplicate ratelimit_redis \"%V\"", &redis->name);
    }

    for (ngx_uint_t i = 2; i < cf->args->nelts; i++) {
        if (read_param(cf, redis, r, i, args[i]) != RL_PARAM_READ) return static_cast<char*>(NGX_CONF_ERROR);
    }
    auto* text = static_cast<ngx_str_t*>(r.texts->elts);
    for (ngx_uint_t i = 0; i < r.texts->nelts; i++) {
        if (!parse_address(cf, text[i], redis)) return static_cast<char*>(NGX_CONF_ERROR);
    }
    if (redis->addrs->nelts == 0) return rl_conf_error(cf, "ratelimit_redis \"%V\" needs an address", &redis->name);
    if (!check_auth(cf, redis)) return static_cast<char*>(NGX_CONF_ERROR);
    if (!r.connect_timeout_set && redis->connect_timeout < redis->timeout) redis->connect_timeout = redis->timeout;
    if (!check_ssl(cf, redis, r)) return static_cast<char*>(NGX_CONF_ERROR);

    auto** slot = static_cast<rl_redis_t**>(ngx_array_push(all));
    if (slot == nullptr) return static_cast<char*>(NGX_CONF_ERROR);
    *slot = redis;
    return NGX_CONF_OK;
}

rl_redis_t* rl_redis_find(const ngx_array_t* all, const ngx_str_t& name) noexcept {
    auto** redis = static_cast<rl_redis_t**>(all->elts);
    for (ngx_uint_t i = 0; i < all->nelts; i++) {
        if (redis[i]->name.len == name.len && ngx_strncmp(redis[i]->name.data, name.data, name.len) == 0) return redis[i];
    }
    return nullptr;
}

ngx_int_t rl_redis_set_resolver(ngx_conf_t* cf, ngx_array_t* all, const char* block, ngx_resolver_t* resolver,
                                ngx_msec_t resolver_timeout) noexcept {
    auto** redis = static_cast<rl_redis_t**>(all->elts);
    for (ngx_uint_t i = 0; i < all->nelts; i++) {
        if (!redis[i]->resolve) continue;
        if (resolver == nullptr || resolver->connections.nelts == 0) {
            rl_conf_error_at(cf, "ratelimit_redis", redis[i]->file, redis[i]->line,
                             "ratelimit_redis \"%V\": \"resolve\" needs a \"resolver\" in %s{}", &redis[i]->name, block);
            return NGX_ERROR;
        }
        redis[i]->resolver = resolver;
        redis[i]->resolver_timeout = resolver_timeout;
    }
    return NGX_OK;
}
