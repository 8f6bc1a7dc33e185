// Zones with sync=TIME: decided in the zone's shared memory, reconciled with Redis once per
// interval per host. The room's public side: its two stores (store.h), the engine's start and
// stop in each worker, and the policies it reconciles keys under.
//   layout.h/.cpp  what the shared memory keeps
//   decide.cpp     the request path (the stores' operations)
//   lease.cpp      a lease zone's asks and the requests that wait for them
//   batch.cpp      script calls and their replies
//   round.cpp      the rounds, heartbeats and ticks of each worker
#pragma once

#include "ngx/stores/store.h"

extern const rl_store_t rl_sync_optimistic_store;
extern const rl_store_t rl_sync_lease_store;

ngx_int_t rl_sync_init_process(ngx_cycle_t* cycle) noexcept;
void rl_sync_exit_process(ngx_cycle_t* cycle) noexcept;
// At merge: a policy the zone is applied with (the engine finds each key's by algorithm and burst).
bool rl_sync_add_policy(rl_zone_t* zone, const rl::Policy& p) noexcept;
