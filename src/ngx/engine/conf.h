// The engine's configuration once a front end's block is read (conf.cpp).
#pragma once

#include "ngx/limits/conf.h"

// Each zone's redis= resolved, its stores found by id and its shared memory's init set; each
// ratelimit_redis with `resolve` given `resolver` (the block's; nullptr if none); what the
// metrics could not export refused.
bool rl_engine_finish(ngx_conf_t* cf, rl_engine_conf_t* ecf, ngx_resolver_t* resolver,
                      ngx_msec_t resolver_timeout) noexcept;
