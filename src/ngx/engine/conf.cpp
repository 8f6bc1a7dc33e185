// A block's engine configuration, finished: zones resolved and given their stores.
#include "ngx/engine/conf.h"

#include "ngx/engine/metrics_zone.h"
#include "ngx/engine/stores.h"
#include "ngx/limits/zone.h"
#include "ngx/redis/redis.h"
#include "ngx/stores/table.h"

bool rl_engine_finish(ngx_conf_t* cf, rl_engine_conf_t* ecf, ngx_resolver_t* resolver,
                      ngx_msec_t resolver_timeout) noexcept {
    for (ngx_uint_t i = 0; i < kRlStores; i++) {
        if (rl_stores[i]->id != i) {  // the list and the ids agree (engine/stores.cpp)
            ngx_log_error(NGX_LOG_EMERG, cf->log, 0, "ratelimit: store \"%s\" out of place", rl_stores[i]->name);
            return false;
        }
    }
    auto** zones = static_cast<rl_zone_t**>(ecf->zones.elts);
    for (ngx_uint_t i = 0; i < ecf->zones.nelts; i++) {
        rl_zone_t* zone = zones[i];
        if (!rl_zone_resolve(cf, zone, &ecf->redis)) return false;
        zone->store = rl_stores[zone->store_id];
        zone->local = rl_stores[zone->local_id];
        zone->shm_zone->init = rl_zone_table_init;
    }
    if (rl_metrics_zone_check(cf, ecf) != NGX_OK) return false;
    return rl_redis_set_resolver(cf, &ecf->redis, ecf->fe->name, resolver, resolver_timeout) == NGX_OK;
}
