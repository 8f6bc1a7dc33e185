// ratelimit_api [write=on|off]: a location that shows the zones and one key's state, and (with
// write=on) resets a key, in the zone's own store (api.cpp). Off the request path.
#pragma once

#include "ngx/limits/conf.h"

char* rl_api_directive(ngx_conf_t* cf, ngx_command_t* cmd, void* conf) noexcept;
// rl_build_applied: the zone is applied with `p` (finished): kept once per distinct policy, so
// that the API reports the zone's policies and a reset reaches every algorithm's state.
bool rl_api_note_policy(ngx_conf_t* cf, rl_zone_t* zone, const rl::Policy& p) noexcept;
