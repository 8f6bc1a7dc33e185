// What the per-request Redis store keeps per ratelimit_redis in a worker (rl_redis_t::store):
// made at worker start (rl_redis_store_init, engine/worker.cpp), beside the transport.
#pragma once

#include "ngx/redis/redis.h"

struct rl_redis_store_t {
    rl_redis_t* redis;
    ngx_queue_t free_batches;   // redis_request.cpp: script runs' memory, reused
    // redis_held.cpp: in-flight slots this worker's requests hold here, refreshed every refresh_ms
    ngx_queue_t held;
    ngx_event_t held_refresh;
    ngx_queue_t releasing;      // given back in this loop turn: sent together at its end
    ngx_event_t held_release;
    ngx_msec_t refresh_ms;      // a third of the shortest hold= of its concurrency zones (0: none)
    int64_t clock_offset_us;    // Redis's clock minus ours, as the last decide reply showed it
    uint64_t epoch;             // redis_rejected.cpp: connections of this worker that failed; rejections
                                // remembered before may be of a Redis that lost its state
};

// Worker start, before the transport's (rl_redis_start): the store's state beside `redis`, and
// the transport's callbacks to the store (the end of a loop turn, a failed connection).
bool rl_redis_store_init(rl_redis_t* redis, ngx_log_t* log) noexcept;
// A concurrency zone with `hold` (us) uses `redis`: its slots are refreshed three times per
// hold, so that one lost refresh does not drop them.
void rl_redis_store_hold(rl_redis_t* redis, int64_t hold_us) noexcept;
void rl_redis_store_exit(rl_redis_t* redis) noexcept;
