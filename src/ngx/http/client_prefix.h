// ratelimit_client_prefix ipv4=N ipv6=M and $ratelimit_client_prefix (client_prefix.cpp): the
// client address, after realip, cut to the prefix in binary, for a zone's key=.
#pragma once

#include "ngx/http/conf.h"

char* rl_client_prefix_directive(ngx_conf_t* cf, ngx_command_t* cmd, void* conf) noexcept;
// At merge: a level without the directive takes its parent's, both lengths together.
void rl_client_prefix_merge(rl_loc_conf_t* conf, const rl_loc_conf_t* prev) noexcept;
ngx_int_t rl_client_prefix_add_variable(ngx_conf_t* cf) noexcept;
