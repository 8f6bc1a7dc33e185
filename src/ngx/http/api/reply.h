// The API's replies about zones and keys (reply.cpp).
#pragma once

#include "ngx/engine/inspect.h"
#include "ngx/http/api/json.h"
#include "ngx/limits/conf.h"

// GET .../zones: the time, whether the location writes, every zone (store, policies, keys,
// capacity, evictions, sync, its first top keys, its counters) and every ratelimit_redis's
// counters (the dashboard's API.md).
ngx_int_t rl_api_send_zones(ngx_http_request_t* r, const rl_engine_conf_t* ecf, bool write) noexcept;
// A key's state. A sync zone's reply carries the global state too (global: nullptr, and why:
// Redis could not tell it); others pass global = nullptr, why = {}.
ngx_int_t rl_api_send_state(ngx_http_request_t* r, const rl_zone_t* zone, const rl_key_state_t& s,
                            const rl_key_state_t* global = nullptr, std::string_view why = {}) noexcept;
// A key's reset: the local states dropped, and Redis's keys deleted (-1: not a Redis zone).
ngx_int_t rl_api_send_reset(ngx_http_request_t* r, const rl_zone_t* zone, ngx_uint_t local,
                            int64_t redis_keys) noexcept;
