// The per-request Redis store (redis_request.cpp): a zone with redis= and no sync= decides each
// request in Redis, its checks batched per server (per slot of a cluster) and loop turn.
#pragma once

#include "ngx/redis/conn.h"
#include "ngx/stores/store.h"

extern const rl_store_t rl_redis_store;

// The connections' callbacks (set by redis_state.cpp): the end of a loop turn sends the calls queued on
// the node as batches; a failed connection fails them.
void rl_redis_request_fill(rl_conn_t* conn) noexcept;
void rl_redis_request_failed(rl_conn_t* conn) noexcept;
// The cluster slot of a result's Redis key.
uint16_t rl_redis_slot_of(const rl_result_t& res) noexcept;
