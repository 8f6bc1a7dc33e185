// ratelimit_zone (zone.cpp): parsing, and the zone's shared-memory table, created once and
// reused across reloads.
#pragma once

#include "ngx/conf.h"

char* rl_zone_directive(ngx_conf_t* cf, ngx_command_t* cmd, void* conf) noexcept;
// Whether a key's log ring for `policy` fits the zone; logs the error at the `ratelimit` line
// `where` (or at the directive being read when nullptr) if not.
bool rl_zone_check_log_fits(ngx_conf_t* cf, rl_zone_t* zone, const rl::Policy& policy,
                            const rl_limit_t* where) noexcept;
// Once the http block is read: each zone's redis= names a ratelimit_redis, and its store.
bool rl_zone_resolve(ngx_conf_t* cf, rl_zone_t* zone, rl_main_conf_t* mcf) noexcept;
