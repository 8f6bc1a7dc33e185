// Zones with sync=TIME: decided in the zone's shared memory, reconciled with Redis once per
// interval per host. The room's public side: its two stores (store.h), the engine's start and
// stop in each worker.
//   layout.h/.cpp  what the shared memory keeps
//   decide.cpp     the request path (the stores' operations)
//   lease.cpp      a lease zone's asks and the requests that wait for them
//   batch.cpp      script calls and their replies
//   round.cpp      the rounds, heartbeats and ticks of each worker
#pragma once

#include "ngx/stores/store.h"

extern const rl_store_t rl_sync_optimistic_store;
extern const rl_store_t rl_sync_lease_store;

// Worker start: an engine for each sync zone of `zones` (of rl_zone_t*); and its stop.
ngx_int_t rl_sync_start(ngx_cycle_t* cycle, const ngx_array_t* zones) noexcept;
void rl_sync_stop() noexcept;
