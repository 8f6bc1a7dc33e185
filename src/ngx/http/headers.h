// RateLimit / X-RateLimit-* / Retry-After response headers (headers.cpp).
#pragma once

#include "ngx/http/http.h"
#include "ngx/limits/zone.h"

#include "core/text/headers.h"

ngx_int_t rl_header_filter_init(ngx_conf_t* cf) noexcept;
// A limit as RateLimit-Policy names it: zone name, quota and window (no state).
rl::HeaderItem rl_policy_item(const rl_zone_t& zone, const rl::Policy& policy) noexcept;
