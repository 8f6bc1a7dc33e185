// settle= (settle.cpp): a request's real cost, settled with each limit's store when it ends.
#pragma once

#include "ngx/http/request.h"

// The log phase's handler, first of that phase (so that an access log shows
// $ratelimit_settled): evaluates the request's settle values (once, the main request only) and
// has the engine send each difference to its store.
ngx_int_t rl_settle_handler(ngx_http_request_t* r) noexcept;
// The `ratelimit` line's settle=VALUE (rl_limit_param_pt): a number, one variable (read by its
// index), or a complex value.
rl_param_e rl_settle_param(ngx_conf_t* cf, rl_limit_t* limit, ngx_str_t& arg) noexcept;
