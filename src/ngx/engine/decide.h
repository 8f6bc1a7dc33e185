// Deciding what a context limits (decide.cpp): every applied limit through its zone's store, the
// shared-memory pass first, all or nothing; then, without blocking the worker, the waits some
// stores need (a lease's refill, then Redis's decisions); then the verdict: on_error, the
// decider, the status, the delay, the metrics. The front end hears of it by its callbacks
// (rl_frontend_t::decided, ::resume).
#pragma once

#include "ngx/limits/context.h"

enum rl_step_e {
    RL_STEP_DECIDED = 0,  // the verdict is in ctx (status, decider, rejected, denied, delay)
    RL_STEP_WAITING,      // a store makes it wait: fe->resume(ctx) is called when it is over
};

// A new context's waits (ctx.cpp, at creation).
void rl_engine_prepare(rl_ctx_t* ctx) noexcept;
// Decides ctx: a new context, or one a refill left in RL_PHASE_AGAIN.
rl_step_e rl_engine_decide(rl_ctx_t* ctx) noexcept;
