// A block's engine configuration.
#include "ngx/limits/conf.h"

#include "ngx/limits/zone.h"

bool rl_engine_conf_init(ngx_conf_t* cf, rl_engine_conf_t* ecf, const rl_frontend_t* fe) noexcept {
    ecf->fe = fe;
    return ngx_array_init(&ecf->redis, cf->pool, 2, sizeof(rl_redis_t*)) == NGX_OK &&
           ngx_array_init(&ecf->zones, cf->pool, 4, sizeof(rl_zone_t*)) == NGX_OK;
}
