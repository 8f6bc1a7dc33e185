// A request's deadline for its stores' answers without a timer of its own (issue 33, step 6):
// the requests waiting with the same timeout join one first-in, first-out list per worker, in
// deadline order, under one nginx timer set to the first's deadline. Joining and leaving cost a
// list link instead of an insert and a delete in nginx's timer tree; each still times out at its
// own deadline, as its own timer would (ctx->timer's handler is called).
#pragma once

#include "ngx/limits/context.h"

// ctx's deadline is `timeout` ms from now (any deadline it had is dropped).
void rl_deadline_set(rl_ctx_t* ctx, ngx_msec_t timeout) noexcept;
// Whether ctx has a deadline (set here, or ctx->timer's).
bool rl_deadline_pending(const rl_ctx_t* ctx) noexcept;
// Drops ctx's deadline, if any (also ctx->timer, when it was set directly).
void rl_deadline_drop(rl_ctx_t* ctx) noexcept;
