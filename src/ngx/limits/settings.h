// The directives every front end has for a level of limits (settings.cpp): their handlers
// and values, so that each front end takes the same words with the same errors.
#pragma once

#include "ngx/base/conf.h"

// ratelimit_on_error allow|deny|local; ratelimit_log_level info|notice|warn|error.
extern ngx_conf_enum_t rl_on_error_modes[];
extern ngx_conf_enum_t rl_log_levels[];
// ratelimit_status: from 400 to 599 (nginx's own bounds check would not name the directive).
extern ngx_conf_post_t rl_status_post;

// ngx_conf_set_enum_slot, with an error that names the directive and the values it takes.
char* rl_set_enum(ngx_conf_t* cf, ngx_command_t* cmd, void* conf) noexcept;
// ratelimit_algo NAME, into the ngx_uint_t at cmd->offset.
char* rl_set_algo(ngx_conf_t* cf, ngx_command_t* cmd, void* conf) noexcept;
