// The shared-memory store (shm.cpp).
#pragma once

#include "ngx/stores/store.h"

extern const rl_store_t rl_shm_store;
