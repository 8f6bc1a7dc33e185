// The metrics' shared memory of a front end's engine configuration (metrics_zone.cpp): made
// when the front end exports metrics, its entries given to the zones and Redis servers.
#pragma once

#include "ngx/limits/conf.h"

// The counters' zone of `ecf`, added once (nginx's shared memory named `name`).
ngx_shm_zone_t* rl_metrics_zone_add(ngx_conf_t* cf, rl_engine_conf_t* ecf, ngx_str_t* name) noexcept;
// Once the block is read, nginx -t refuses what the metrics could not export (when the zone was
// added): more than a thousand zones and ratelimit_redis, a ratelimit_redis name longer than a
// zone's longest.
ngx_int_t rl_metrics_zone_check(ngx_conf_t* cf, const rl_engine_conf_t* ecf) noexcept;
