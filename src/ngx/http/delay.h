// Shaping (delay.cpp): a request its limits admitted with a delay waits on a timer.
#pragma once

#include "ngx/limits/ctx.h"

// After the verdict admitted a request: its delay (the longest of its limits'), status and log.
void rl_delay_decide(rl_ctx_t* ctx, const rl_loc_conf_t* lcf) noexcept;
// Makes an admitted request wait ctx->delay_ms on a timer; returns what the phase handler returns.
ngx_int_t rl_delay_start(rl_ctx_t* ctx) noexcept;
