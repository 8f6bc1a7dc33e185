// Settles of per-request Redis results (redis_settle.cpp): after the response, each
// difference goes to Redis as one script call (charge or refund), fire and forget.
#pragma once

#include "ngx/limits/context.h"

// The Redis store's settle_remote (store.h): sends the settles of the request's results that
// Redis decided (res.delta != 0). A call that fails is sent once more, with the same call id (applied
// at most once), then counted (nginx_ratelimit_settle_failures_total) and logged.
void rl_redis_settle(rl_ctx_t* ctx) noexcept;
