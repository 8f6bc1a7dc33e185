// A snapshot of the counters: zones' under their locks (the table's fields change together
// with its slots), Redis servers' as they are.
#include "ngx/engine/snapshot.h"

#include "ngx/limits/zone.h"
#include "ngx/metrics/table.h"
#include "ngx/redis/redis.h"
#include "ngx/sync/layout.h"

namespace {

uint64_t load(const ngx_atomic_t& counter) { return static_cast<uint64_t>(counter); }

void read_redis(rl_redis_snapshot_t& d, const ngx_str_t& name, const rl_metrics_redis_t& m) {
    d.name = rl_sv(name);
    d.calls = load(m.calls);
    d.checks = load(m.checks);
    for (ngx_uint_t k = 0; k < RL_REDIS_ERR_N; k++) d.errors[k] = load(m.errors[k]);
    d.reconnects = load(m.reconnects);
    d.moved = load(m.moved);
    d.ask = load(m.ask);
    d.in_flight = static_cast<int64_t>(load(m.in_flight));
    for (ngx_uint_t k = 0; k <= kRlRoundTripBuckets; k++) d.round_trip[k] = load(m.round_trip[k]);
    d.round_trip_s = static_cast<double>(load(m.round_trip_ns)) / 1e9;
}

// Another front end's entries, counted, then copied (rl_snapshot_add).
struct foreign_t {
    rl_snapshot_t* s;
    std::string_view subsystem;
    ngx_uint_t zones, redis;          // counted in the first pass
    ngx_uint_t zones_cap, redis_cap;  // room in the snapshot for the second
    bool copy;
};

void foreign_zone(void* data, const ngx_str_t& name, const rl_metrics_zone_t& c) {
    auto* f = static_cast<foreign_t*>(data);
    if (!f->copy) {
        f->zones++;
        return;
    }
    if (f->s->nzones >= f->zones_cap) return;
    rl_zone_snapshot_t& z = f->s->zones[f->s->nzones++];
    z = rl_zone_snapshot_t{};
    z.name = rl_sv(name);
    z.subsystem = f->subsystem;
    z.counted = true;
    for (ngx_uint_t k = 0; k < RL_RESULT_N; k++) z.requests[k] = load(c.requests[k]);
    for (ngx_uint_t k = 0; k < RL_RESULT_N; k++) z.datagrams[k] = load(c.datagrams[k]);
    uint64_t kind = load(c.kind);
    z.concurrency = kind & RL_MZ_CONCURRENCY;
    z.in_flight = static_cast<int64_t>(load(c.in_flight));
    z.redis = kind & RL_MZ_REDIS;
    z.settle_failures = load(c.settle_failures);
}

void foreign_redis(void* data, const ngx_str_t& name, const rl_metrics_redis_t& c) {
    auto* f = static_cast<foreign_t*>(data);
    if (!f->copy) {
        f->redis++;
        return;
    }
    if (f->s->nredis >= f->redis_cap) return;
    rl_redis_snapshot_t& d = f->s->redis[f->s->nredis++];
    read_redis(d, name, c);
    d.subsystem = f->subsystem;
}

template <typename T>
T* grow(ngx_pool_t* pool, T* old, ngx_uint_t n, ngx_uint_t more) {
    auto* mem = static_cast<T*>(ngx_pcalloc(pool, (n + more + 1) * sizeof(T)));
    if (mem != nullptr && n > 0) ngx_memcpy(mem, old, n * sizeof(T));
    return mem;
}

}  // namespace

bool rl_snapshot_take(ngx_pool_t* pool, const rl_engine_conf_t* ecf, rl_snapshot_t* s) noexcept {
    s->zones = static_cast<rl_zone_snapshot_t*>(ngx_pcalloc(pool, (ecf->zones.nelts + 1) * sizeof(rl_zone_snapshot_t)));
    s->redis = static_cast<rl_redis_snapshot_t*>(ngx_pcalloc(pool, (ecf->redis.nelts + 1) * sizeof(rl_redis_snapshot_t)));
    if (s->zones == nullptr || s->redis == nullptr) return false;
    s->nzones = s->nredis = 0;
    auto** zones = static_cast<rl_zone_t**>(ecf->zones.elts);
    for (ngx_uint_t i = 0; i < ecf->zones.nelts; i++) {
        if (zones[i]->metrics != nullptr) rl_snapshot_zone(zones[i], &s->zones[s->nzones++]);
    }
    auto** all = static_cast<rl_redis_t**>(ecf->redis.elts);
    for (ngx_uint_t i = 0; i < ecf->redis.nelts; i++) {
        if (rl_snapshot_redis(all[i], &s->redis[s->nredis])) s->nredis++;
    }
    return true;
}

void rl_snapshot_zone(const rl_zone_t* zone, rl_zone_snapshot_t* z) noexcept {
    *z = rl_zone_snapshot_t{};
    z->name = rl_sv(zone->name);
    z->concurrency = zone->concurrency;
    z->redis = zone->redis != nullptr && zone->sync_shm == nullptr && !zone->concurrency;
    if (const rl_metrics_zone_t* m = zone->metrics) {
        z->counted = true;
        for (ngx_uint_t k = 0; k < RL_RESULT_N; k++) z->requests[k] = load(m->requests[k]);
        for (ngx_uint_t k = 0; k < RL_RESULT_N; k++) z->datagrams[k] = load(m->datagrams[k]);
        z->in_flight = static_cast<int64_t>(load(m->in_flight));
        z->settle_failures = load(m->settle_failures);
    }
    if (zone->table == nullptr) return;
    z->table = true;
    // Under the zone's lock: the table's fields change together with its slots.
    ngx_shmtx_lock(&zone->shpool->mutex);
    z->keys = zone->table->used;
    z->capacity = zone->table->nslots;
    z->evictions = zone->table->evictions;
    if (const rl_sync_shm_t* h = zone->sync_shm) {
        z->sync = true;
        z->sync_rounds = h->rounds;
        z->sync_keys = h->keys_sent;
        z->sync_failures = h->failures;
        z->sync_hosts = h->hosts;
        z->sync_last_ok = h->last_ok;
    }
    ngx_shmtx_unlock(&zone->shpool->mutex);
}

bool rl_snapshot_redis(const rl_redis_t* redis, rl_redis_snapshot_t* d) noexcept {
    const rl_metrics_redis_t* m = redis->conn.metrics;
    if (m == nullptr) return false;
    *d = rl_redis_snapshot_t{};
    read_redis(*d, redis->name, *m);
    return true;
}

bool rl_snapshot_add(ngx_pool_t* pool, ngx_cycle_t* cycle, const ngx_str_t& name, std::string_view subsystem,
                     rl_snapshot_t* s) noexcept {
    const rl_metrics_shm_t* shm = rl_metrics_table_find(cycle, name);
    if (shm == nullptr) return true;
    foreign_t f{s, subsystem, 0, 0, 0, 0, false};
    rl_metrics_table_each(shm, foreign_zone, foreign_redis, &f);  // counts
    s->zones = grow(pool, s->zones, s->nzones, f.zones);
    s->redis = grow(pool, s->redis, s->nredis, f.redis);
    if (s->zones == nullptr || s->redis == nullptr) return false;
    // Copies at most what was counted (a configuration loaded meanwhile may name more).
    f.zones_cap = s->nzones + f.zones;
    f.redis_cap = s->nredis + f.redis;
    f.copy = true;
    rl_metrics_table_each(shm, foreign_zone, foreign_redis, &f);
    return true;
}
