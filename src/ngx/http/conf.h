// The HTTP front end's configuration (module.cpp): the engine's in http{}, and a location's
// limits with what HTTP adds to them (status, headers, the client prefix, the API).
#pragma once

#include "ngx/http/http.h"
#include "ngx/limits/conf.h"
#include "ngx/limits/limit.h"

enum {
    RL_HEADERS_OFF = 0,
    RL_HEADERS_ON = 1,      // RateLimit-Policy and RateLimit
    RL_HEADERS_LEGACY = 2,  // X-RateLimit-*
    RL_HEADERS_ALL = 3,
};

struct rl_loc_conf_t {
    rl_scope_t scope;      // its limits, as the engine reads them
    ngx_uint_t status;     // ratelimit_status
    ngx_uint_t headers;    // RL_HEADERS_*
    ngx_str_t policy;      // RateLimit-Policy when every applied limit decides: the same for
                           // every request, so formatted once, at merge
    ngx_uint_t prefix_v4;  // ratelimit_client_prefix: $ratelimit_client_prefix's lengths, in bits
    ngx_uint_t prefix_v6;  // (set together: prefix_v4 unset means the directive is not here)
    ngx_flag_t api_write;  // ratelimit_api write=on: DELETE is allowed there (api.cpp)
};

struct rl_main_conf_t {
    rl_engine_conf_t engine;  // the zones and ratelimit_redis of http{}
    bool settles;             // some `ratelimit` line has settle=: the log phase has work (settle.cpp)
};

// The front end's values: a complex value compiled (rl_value_t is an ngx_http_complex_value_t).
rl_value_t* rl_http_compile(ngx_conf_t* cf, ngx_str_t* text) noexcept;
inline ngx_http_complex_value_t* rl_http_cv(const rl_value_t* v) {
    return reinterpret_cast<ngx_http_complex_value_t*>(const_cast<rl_value_t*>(v));
}
