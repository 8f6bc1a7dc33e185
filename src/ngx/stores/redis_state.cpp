// The per-request Redis store's state beside each ratelimit_redis of a worker.
#include "ngx/stores/redis_state.h"

#include "ngx/stores/redis_held.h"
#include "ngx/stores/redis_request.h"

bool rl_redis_store_init(rl_redis_t* redis, ngx_log_t* log) noexcept {
    auto* st = static_cast<rl_redis_store_t*>(ngx_calloc(sizeof(rl_redis_store_t), log));
    if (st == nullptr) return false;
    st->redis = redis;
    ngx_queue_init(&st->free_batches);
    redis->store = st;
    rl_held_init(redis, log);
    redis->conn.fill = rl_redis_request_fill;
    redis->conn.failed = rl_redis_request_failed;
    return true;
}

void rl_redis_store_hold(rl_redis_t* redis, int64_t hold_us) noexcept {
    auto every = static_cast<ngx_msec_t>(hold_us / 3000);
    if (redis->store->refresh_ms == 0 || every < redis->store->refresh_ms) redis->store->refresh_ms = every;
}

void rl_redis_store_exit(rl_redis_t* redis) noexcept {
    if (redis->store != nullptr) rl_held_exit(redis);
}
