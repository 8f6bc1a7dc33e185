// A zone's table in its shared memory (table.cpp): laid out once, found again after a reload,
// its block starting with its store's own area when the store has one (sync zones).
#pragma once

#include "ngx/limits/zone.h"

// The zone's shared memory is ready (ngx_shm_zone_t::init): its table is laid out, or the
// one a reload found is kept when its layout is the same.
ngx_int_t rl_zone_table_init(ngx_shm_zone_t* shm_zone, void* data) noexcept;
