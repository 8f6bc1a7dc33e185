// The counters of a front end's zones and Redis servers, read at once (snapshot.cpp): what the
// metrics endpoint writes (measured, then written: both see the same numbers), and the API's.
#pragma once

#include "ngx/limits/conf.h"
#include "ngx/metrics/metrics.h"

#include <string_view>

struct rl_zone_t;
struct rl_redis_t;

// A zone's counters and table figures, read at once.
struct rl_zone_snapshot_t {
    std::string_view name;
    std::string_view subsystem;  // "" for the reader's own zones; another front end's ("stream")
    uint64_t requests[RL_RESULT_N];   // another front end's: its connections and sessions
    uint64_t datagrams[RL_RESULT_N];
    bool table;  // its table's figures are known (the reader's own zones)
    uint64_t keys, capacity, evictions;
    bool concurrency;   // concurrency=N: its in-flight gauge
    int64_t in_flight;
    bool redis;         // decided in Redis per request: its settles can fail
    uint64_t settle_failures;
    bool sync;  // sync=TIME: its reconciliation's counters (kept in the zone's sync header)
    uint64_t sync_rounds, sync_keys, sync_failures;
    int64_t sync_hosts;
    uint64_t sync_last_ok;    // ngx_current_msec of its last round that succeeded, 0 if none
    bool counted;             // it has counters (requests, in_flight, settle_failures), else they are 0
};

struct rl_redis_snapshot_t {
    std::string_view name;
    std::string_view subsystem;  // as a zone's
    uint64_t calls, checks, errors[RL_REDIS_ERR_N], reconnects, moved, ask;
    int64_t in_flight;
    uint64_t round_trip[kRlRoundTripBuckets + 1];
    double round_trip_s;
};

struct rl_snapshot_t {
    rl_zone_snapshot_t* zones;
    ngx_uint_t nzones;
    rl_redis_snapshot_t* redis;
    ngx_uint_t nredis;
};

// The snapshot of `ecf`'s zones and Redis servers that have counters, in `pool`; false without memory.
bool rl_snapshot_take(ngx_pool_t* pool, const rl_engine_conf_t* ecf, rl_snapshot_t* s) noexcept;
// Adds the counters another front end (another .so) keeps in the metrics zone `name` of
// `cycle`, as its `subsystem`: its zones (their counters only) and Redis servers. Nothing when
// there is no such zone, or it has another build's layout. False without memory.
bool rl_snapshot_add(ngx_pool_t* pool, ngx_cycle_t* cycle, const ngx_str_t& name, std::string_view subsystem,
                     rl_snapshot_t* s) noexcept;
// One zone's, counters or not (counted says), its table's figures under its lock.
void rl_snapshot_zone(const rl_zone_t* zone, rl_zone_snapshot_t* z) noexcept;
// One Redis server's; false when it has no counters.
bool rl_snapshot_redis(const rl_redis_t* redis, rl_redis_snapshot_t* d) noexcept;
