// settle= (settle.cpp): a request's real cost, settled with each limit's store when it ends.
#pragma once

#include "ngx/limits/ctx.h"

// The log phase's handler, first of that phase (so that an access log shows
// $ratelimit_settled): evaluates the request's settle values (once, the main request only) and
// sends each difference to its store.
ngx_int_t rl_settle_handler(ngx_http_request_t* r) noexcept;
