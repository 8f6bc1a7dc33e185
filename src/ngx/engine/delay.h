// Shaping (delay.cpp): of the limits that admitted a request with a delay (delay=, see
// core/algo/delay.h), the longest delay is the request's; the front end makes it wait.
#pragma once

#include "ngx/limits/context.h"

// Admitted: the longest delay of its limits (each bounded by its policy) in ctx->delay_ms, its
// result in ctx->delayer, and the status DELAYED (DELAYED_DRY_RUN); nothing when none delays.
void rl_delay_decide(rl_ctx_t* ctx) noexcept;
// limit_req's "excess" of the delaying result, in thousandths: the requests beyond the first in
// the bucket, from the delay (delay = (excess - N) / rate).
int64_t rl_delay_excess_milli(const rl_ctx_t* ctx) noexcept;
