// The engine's configuration in one front end's block (http{}): its zones and its Redis
// servers, read by the directives they share (zone.cpp, redis/directive.cpp).
#pragma once

#include "ngx/limits/frontend.h"

struct rl_engine_conf_t {
    const rl_frontend_t* fe;
    ngx_array_t redis;  // of rl_redis_t*
    ngx_array_t zones;  // of rl_zone_t*
};

// A new block's configuration, for the front end `fe`.
bool rl_engine_conf_init(ngx_conf_t* cf, rl_engine_conf_t* ecf, const rl_frontend_t* fe) noexcept;
