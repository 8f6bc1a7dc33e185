// A front end's metrics zone: the counters' table (metrics/table.h) in nginx's shared memory,
// its entries given to the configuration's zones and Redis servers at each (re)configuration.
// Workers of the old configuration keep adding to the entries they know, which are the same ones.
#include "ngx/engine/metrics_zone.h"

#include "ngx/limits/zone.h"
#include "ngx/metrics/table.h"
#include "ngx/redis/redis.h"

namespace {

// The zone's tag: no ratelimit_zone or `ratelimit zone=` can name the same shared memory.
u_char rl_metrics_tag;

// In the master, at each (re)configuration.
ngx_int_t init_zone(ngx_shm_zone_t* shm_zone, void* data) noexcept {
    auto* ecf = static_cast<rl_engine_conf_t*>(shm_zone->data);
    rl_metrics_shm_t* shm = rl_metrics_table(shm_zone, data);
    if (shm == nullptr) return NGX_ERROR;
    ngx_log_t* log = shm_zone->shm.log;
    auto** zones = static_cast<rl_zone_t**>(ecf->zones.elts);
    for (ngx_uint_t i = 0; i < ecf->zones.nelts; i++) {
        rl_zone_t* zone = zones[i];
        zone->metrics = rl_metrics_zone_entry(shm, zone->name, log);
        if (zone->metrics == nullptr) continue;
        zone->metrics->kind = (zone->concurrency ? RL_MZ_CONCURRENCY : 0) |
                              (zone->store_id == RL_STORE_ID_REDIS && !zone->concurrency ? RL_MZ_REDIS : 0) |
                              (zone->sync_us != 0 ? RL_MZ_SYNC : 0);
    }
    auto** redis = static_cast<rl_redis_t**>(ecf->redis.elts);
    for (ngx_uint_t i = 0; i < ecf->redis.nelts; i++) {
        redis[i]->conn.metrics = rl_metrics_redis_entry(shm, redis[i]->name, log);
    }
    return NGX_OK;
}

}  // namespace

ngx_shm_zone_t* rl_metrics_zone_add(ngx_conf_t* cf, rl_engine_conf_t* ecf, ngx_str_t* name) noexcept {
    ngx_shm_zone_t* shm_zone = ngx_shared_memory_add(cf, name, rl_metrics_table_size(), &rl_metrics_tag);
    if (shm_zone == nullptr) return nullptr;
    if (shm_zone->data == nullptr) {
        shm_zone->init = init_zone;
        shm_zone->data = ecf;
    }
    return shm_zone;
}

// nginx -t: what cannot be exported is refused, saying why (with ratelimit_metrics only).
ngx_int_t rl_metrics_zone_check(ngx_conf_t* cf, const rl_engine_conf_t* ecf) noexcept {
    bool on = false;
    ngx_list_part_t* part = &cf->cycle->shared_memory.part;
    auto* shm = static_cast<ngx_shm_zone_t*>(part->elts);
    for (ngx_uint_t i = 0;; i++) {
        if (i >= part->nelts) {
            if (part->next == nullptr) break;
            part = part->next;
            shm = static_cast<ngx_shm_zone_t*>(part->elts);
            i = 0;
            if (part->nelts == 0) continue;
        }
        if (shm[i].tag == &rl_metrics_tag) on = true;
    }
    if (!on) return NGX_OK;
    ngx_uint_t names = ecf->zones.nelts + ecf->redis.nelts;
    if (names > kRlMetricsMaxNames) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "ratelimit_metrics exports at most %ui zones and ratelimit_redis, this configuration "
                           "names %ui", static_cast<ngx_uint_t>(kRlMetricsMaxNames), names);
        return NGX_ERROR;
    }
    auto** redis = static_cast<rl_redis_t**>(ecf->redis.elts);
    for (ngx_uint_t i = 0; i < ecf->redis.nelts; i++) {
        if (redis[i]->name.len <= kRlMetricsNameMax) continue;
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "ratelimit_metrics cannot export ratelimit_redis \"%V\": its name is longer than %uz bytes",
                           &redis[i]->name, kRlMetricsNameMax);
        return NGX_ERROR;
    }
    return NGX_OK;
}

