// The API's Redis side (redis.cpp): for zones with redis=, a key's state and its reset ask Redis.
#pragma once

#include "ngx/http/http.h"
#include "ngx/limits/zone.h"

#include "core/keys/key_hash.h"

// GET of a key of a Redis zone (a sync zone: this host's view beside the global state).
ngx_int_t rl_api_inspect_redis(ngx_http_request_t* r, rl_zone_t* zone, const rl::KeyHash& hash) noexcept;
// DELETE of a key of a Redis zone: its Redis keys deleted, after `local` states were dropped here.
ngx_int_t rl_api_reset_redis(ngx_http_request_t* r, rl_zone_t* zone, const rl::KeyHash& hash, ngx_uint_t local) noexcept;
