// The engine in a worker (worker.cpp): its Redis servers' connections and stores' state, its
// sync zones' engines; started at init_process, stopped at exit_process.
#pragma once

#include "ngx/limits/conf.h"

// Workers only (the cache manager and loader run init_process too, and never serve requests).
ngx_int_t rl_engine_start(ngx_cycle_t* cycle, rl_engine_conf_t* ecf) noexcept;
void rl_engine_stop(rl_engine_conf_t* ecf) noexcept;
