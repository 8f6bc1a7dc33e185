// The counters' table in shared memory (table.cpp): one entry per zone or ratelimit_redis name,
// found again by name at each reload, so that counters carry on. Laid out by the engine's
// metrics zone (engine/metrics_zone.cpp); the metrics are per front end.
#pragma once

#include "ngx/metrics/metrics.h"

#include "core/wire/redis_command.h"

constexpr size_t kRlMetricsNameMax = rl::kMaxZoneLen;  // a zone's longest name; nginx -t refuses a longer ratelimit_redis
// Zones and ratelimit_redis one configuration may name (nginx -t refuses more). The table holds
// twice as many: the names of the running configuration and of the one before it (whose
// workers may still be finishing requests); entries of older ones are reused.
constexpr uint32_t kRlMetricsMaxNames = 1000;

enum rl_metrics_kind_e : uint32_t { RL_METRICS_ZONE = 1, RL_METRICS_REDIS = 2 };

struct rl_metrics_shm_t;

// The bytes the table's shared memory zone needs.
size_t rl_metrics_table_size() noexcept;
// The table in a zone's memory (at each (re)configuration, in the master): found again, or laid
// out afresh when new or of another layout; the names given from now on are this
// configuration's. nullptr without memory.
rl_metrics_shm_t* rl_metrics_table(ngx_shm_zone_t* shm_zone, void* data) noexcept;
// The counters of a zone's or a Redis's `name` (zone or redis of the entry), marked as named
// by this configuration; nullptr when the table cannot hold it (logged).
rl_metrics_zone_t* rl_metrics_zone_entry(rl_metrics_shm_t* shm, const ngx_str_t& name, ngx_log_t* log) noexcept;
rl_metrics_redis_t* rl_metrics_redis_entry(rl_metrics_shm_t* shm, const ngx_str_t& name, ngx_log_t* log) noexcept;

// The table of the shared memory zone `name` in `cycle`, as another front end (another .so)
// laid it out: nullptr when there is none, or when its layout is not this build's.
const rl_metrics_shm_t* rl_metrics_table_find(ngx_cycle_t* cycle, const ngx_str_t& name) noexcept;
// Calls zone(name, counters) and redis(name, counters) for each entry the table's current
// configuration names.
void rl_metrics_table_each(const rl_metrics_shm_t* shm, void (*zone)(void* data, const ngx_str_t& name,
                                                                       const rl_metrics_zone_t& c),
                           void (*redis)(void* data, const ngx_str_t& name, const rl_metrics_redis_t& c),
                           void* data) noexcept;
