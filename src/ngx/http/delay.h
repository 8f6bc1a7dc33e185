// Shaping (delay.cpp): a request its limits admitted with a delay waits on a timer.
#pragma once

#include "ngx/http/request.h"

// Makes an admitted request wait ctx->delay_ms on a timer; returns what the phase handler returns.
ngx_int_t rl_delay_start(rl_ctx_t* ctx) noexcept;
