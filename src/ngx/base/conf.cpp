// Configuration errors that name the directive, file and line; duplicate parameters.
#include "ngx/base/conf.h"

#include <cstdarg>

namespace {

void conf_verror(ngx_conf_t* cf, const char* directive, const u_char* file, ngx_uint_t line, const char* fmt,
                 va_list args) {
    u_char msg[NGX_MAX_CONF_ERRSTR];
    u_char* p = ngx_vslprintf(msg, msg + sizeof(msg), fmt, args);
    auto len = static_cast<size_t>(p - msg);
    if (directive == nullptr) {
        auto* name = static_cast<ngx_str_t*>(cf->args->elts);
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0, "%*s in \"%V\" directive", len, msg, &name[0]);
    } else {
        ngx_log_error(NGX_LOG_EMERG, cf->log, 0, "%*s in \"%s\" directive in %s:%ui", len, msg, directive, file, line);
    }
}

}  // namespace

char* rl_conf_error(ngx_conf_t* cf, const char* fmt, ...) noexcept {
    va_list args;
    va_start(args, fmt);
    conf_verror(cf, nullptr, nullptr, 0, fmt, args);
    va_end(args);
    return static_cast<char*>(NGX_CONF_ERROR);
}

rl_param_e rl_param_error(ngx_conf_t* cf, const char* fmt, ...) noexcept {
    va_list args;
    va_start(args, fmt);
    conf_verror(cf, nullptr, nullptr, 0, fmt, args);
    va_end(args);
    return RL_PARAM_ERROR;
}

void rl_conf_error_at(ngx_conf_t* cf, const char* directive, const u_char* file, ngx_uint_t line, const char* fmt,
                      ...) noexcept {
    va_list args;
    va_start(args, fmt);
    conf_verror(cf, directive, file, line, fmt, args);
    va_end(args);
}

bool rl_no_duplicate_params(ngx_conf_t* cf, ngx_uint_t first) noexcept {
    auto* args = static_cast<ngx_str_t*>(cf->args->elts);
    for (ngx_uint_t i = first; i < cf->args->nelts; i++) {
        u_char* eq = ngx_strlchr(args[i].data, args[i].data + args[i].len, '=');
        if (eq == nullptr || ngx_strncmp(args[i].data, "unix:", 5) == 0) continue;  // not name=value
        size_t n = static_cast<size_t>(eq - args[i].data) + 1;  // the name and its '='
        for (ngx_uint_t j = first; j < i; j++) {
            if (args[j].len >= n && ngx_strncmp(args[j].data, args[i].data, n) == 0) {
                // The name only: the values may be secrets (password=).
                rl_conf_error(cf, "duplicate parameter \"%*s\"", n, args[i].data);
                return false;
            }
        }
    }
    return true;
}
