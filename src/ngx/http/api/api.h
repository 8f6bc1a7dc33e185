// ratelimit_api [write=on|off]: a location that shows the zones and one key's state, and (with
// write=on) resets a key, in the zone's own store (api.cpp). Off the request path.
#pragma once

#include "ngx/http/conf.h"

char* rl_api_directive(ngx_conf_t* cf, ngx_command_t* cmd, void* conf) noexcept;
