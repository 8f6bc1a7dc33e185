// The in-flight store (conc.cpp): concurrency=N zones' slots in shared memory.
#pragma once

#include "ngx/stores/store.h"

extern const rl_store_t rl_conc_store;

// The request is over: the in-flight slots it holds in shared memory go back (the engine calls
// it only where a concurrency zone applies: rl_ctx_t::slots).
void rl_conc_release(rl_ctx_t* ctx) noexcept;
