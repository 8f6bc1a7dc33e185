// ratelimit_metrics (metrics.cpp): the Prometheus endpoint.
#pragma once

#include "ngx/http/http.h"

char* rl_metrics_directive(ngx_conf_t* cf, ngx_command_t* cmd, void* conf) noexcept;
