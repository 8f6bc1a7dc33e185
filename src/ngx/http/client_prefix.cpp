// ratelimit_client_prefix [ipv4=N] [ipv6=M] and $ratelimit_client_prefix.
#include "ngx/http/client_prefix.h"

#include "core/keys/client_prefix.h"
#include "core/text/rate.h"

char* rl_client_prefix_directive(ngx_conf_t* cf, ngx_command_t*, void* conf) noexcept {
    auto* lcf = static_cast<rl_loc_conf_t*>(conf);
    auto* args = static_cast<ngx_str_t*>(cf->args->elts);
    if (lcf->prefix_v4 != NGX_CONF_UNSET_UINT) return const_cast<char*>("is duplicate");
    if (!rl_no_duplicate_params(cf, 1)) return static_cast<char*>(NGX_CONF_ERROR);
    // A parameter not given takes its default, not the enclosing level's: the directive is
    // inherited (or replaced) whole, as nginx's are.
    int64_t v4 = rl::kPrefixV4Default;
    int64_t v6 = rl::kPrefixV6Default;
    for (ngx_uint_t i = 1; i < cf->args->nelts; i++) {
        ngx_str_t v;
        if (rl_arg(args[i], "ipv4=", v)) {
            if (!rl::parse_int(rl_sv(v), 1, rl::kPrefixV4Max, v4)) {
                return rl_conf_error(cf, "invalid \"%V\", it must be 1 to %ud", &args[i], rl::kPrefixV4Max);
            }
        } else if (rl_arg(args[i], "ipv6=", v)) {
            if (!rl::parse_int(rl_sv(v), 1, rl::kPrefixV6Max, v6)) {
                return rl_conf_error(cf, "invalid \"%V\", it must be 1 to %ud", &args[i], rl::kPrefixV6Max);
            }
        } else {
            return rl_conf_error(cf, "invalid parameter \"%V\"", &args[i]);
        }
    }
    lcf->prefix_v4 = static_cast<ngx_uint_t>(v4);
    lcf->prefix_v6 = static_cast<ngx_uint_t>(v6);
    return NGX_CONF_OK;
}

void rl_client_prefix_merge(rl_loc_conf_t* conf, const rl_loc_conf_t* prev) noexcept {
    if (conf->prefix_v4 != NGX_CONF_UNSET_UINT) return;
    if (prev->prefix_v4 != NGX_CONF_UNSET_UINT) {
        conf->prefix_v4 = prev->prefix_v4;
        conf->prefix_v6 = prev->prefix_v6;
    } else {
        conf->prefix_v4 = rl::kPrefixV4Default;
        conf->prefix_v6 = rl::kPrefixV6Default;
    }
}

namespace {

ngx_str_t rl_client_prefix_name = ngx_string("ratelimit_client_prefix");

// The client address after realip (r->connection->sockaddr), cut to the location's prefix:
// 4 bytes for IPv4 (and IPv4-mapped IPv6), 16 for IPv6; empty for a Unix socket, so that a
// zone keyed on it does not limit such clients.
ngx_int_t rl_client_prefix_variable(ngx_http_request_t* r, ngx_http_variable_value_t* v, uintptr_t) noexcept {
    auto* lcf = static_cast<rl_loc_conf_t*>(ngx_http_get_module_loc_conf(r, ngx_http_ratelimit_module));
    v->valid = 1;
    v->no_cacheable = 0;
    v->not_found = 0;
    v->len = 0;
    const struct sockaddr* sa = r->connection->sockaddr;
    if (sa->sa_family != AF_INET
#if (NGX_HAVE_INET6)
        && sa->sa_family != AF_INET6
#endif
    ) {
        v->data = reinterpret_cast<u_char*>(const_cast<char*>(""));
        return NGX_OK;
    }
    auto* out = static_cast<uint8_t*>(ngx_pnalloc(r->pool, rl::kClientPrefixMaxLen));
    if (out == nullptr) return NGX_ERROR;
    auto v4 = static_cast<unsigned>(lcf->prefix_v4);
    size_t len;
#if (NGX_HAVE_INET6)
    if (sa->sa_family == AF_INET6) {
        auto* sin6 = reinterpret_cast<const struct sockaddr_in6*>(sa);
        len = rl::client_prefix_v6(sin6->sin6_addr.s6_addr, v4, static_cast<unsigned>(lcf->prefix_v6), out);
    } else
#endif
    {
        auto* sin = reinterpret_cast<const struct sockaddr_in*>(sa);
        len = rl::client_prefix_v4(reinterpret_cast<const uint8_t*>(&sin->sin_addr.s_addr), v4, out);
    }
    v->data = out;
    v->len = static_cast<unsigned>(len);
    return NGX_OK;
}

}  // namespace

ngx_int_t rl_client_prefix_add_variable(ngx_conf_t* cf) noexcept {
    // Not cacheable: the prefix is the location's, and realip may change the address.
    ngx_http_variable_t* var = ngx_http_add_variable(cf, &rl_client_prefix_name, NGX_HTTP_VAR_NOCACHEABLE);
    if (var == nullptr) return NGX_ERROR;
    var->get_handler = rl_client_prefix_variable;
    return NGX_OK;
}
