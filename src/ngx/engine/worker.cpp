// The engine's start in a worker: each ratelimit_redis's store state, then its connections;
// then the sync zones' engines. Its stop, the other way round.
#include "ngx/engine/worker.h"

#include "ngx/limits/zone.h"
#include "ngx/redis/redis.h"
#include "ngx/stores/redis_state.h"
#include "ngx/sync/sync.h"

ngx_int_t rl_engine_start(ngx_cycle_t* cycle, rl_engine_conf_t* ecf) noexcept {
    if (ngx_process != NGX_PROCESS_WORKER && ngx_process != NGX_PROCESS_SINGLE) return NGX_OK;
    auto** redis = static_cast<rl_redis_t**>(ecf->redis.elts);
    for (ngx_uint_t i = 0; i < ecf->redis.nelts; i++) {
        if (!rl_redis_store_init(redis[i], cycle->log)) return NGX_ERROR;
    }
    auto** zones = static_cast<rl_zone_t**>(ecf->zones.elts);
    for (ngx_uint_t i = 0; i < ecf->zones.nelts; i++) {
        if (zones[i]->concurrency && zones[i]->redis != nullptr) {
            rl_redis_store_hold(zones[i]->redis, zones[i]->policy.period_us);
        }
    }
    for (ngx_uint_t i = 0; i < ecf->redis.nelts; i++) {
        if (rl_redis_start(redis[i], cycle) != NGX_OK) return NGX_ERROR;
    }
    return rl_sync_start(cycle, &ecf->zones);
}

void rl_engine_stop(rl_engine_conf_t* ecf) noexcept {
    rl_sync_stop();
    auto** redis = static_cast<rl_redis_t**>(ecf->redis.elts);
    for (ngx_uint_t i = 0; i < ecf->redis.nelts; i++) {
        rl_redis_store_exit(redis[i]);
        rl_redis_stop(redis[i]);
    }
}
