// The counters' table: entries by name, laid out once, kept across reloads while the layout is
// the same (a change of layout changes entry_size: the table then starts afresh).
#include "ngx/metrics/table.h"

namespace {

constexpr uint32_t kMagic = 0x524c4d32;  // "RLM2"
constexpr uint32_t kEntries = 2 * kRlMetricsMaxNames;

}  // namespace

struct rl_metrics_entry_t {
    uint32_t kind;
    uint32_t name_len;
    uint64_t gen;  // the last configuration that named it
    u_char name[kRlMetricsNameMax];
    union {
        rl_metrics_zone_t zone;
        rl_metrics_redis_t redis;
    } c;
};

// Layout changes change entry_size: an old layout is then started afresh.
struct rl_metrics_shm_t {
    uint32_t magic;
    uint32_t entry_size;
    uint32_t n;
    uint32_t cap;
    uint64_t gen;  // configurations loaded since the table was laid out
    rl_metrics_entry_t entries[kEntries];
};

namespace {

constexpr size_t kZoneSize = (sizeof(rl_metrics_shm_t) + 16 * 4096 + 4095) & ~size_t{4095};

bool same_name(const rl_metrics_entry_t* e, uint32_t kind, const ngx_str_t& name) {
    return e->kind == kind && e->name_len == name.len && ngx_memcmp(e->name, name.data, name.len) == 0;
}

// The entry of a name, marked as named by this configuration; a new name takes a free entry, or
// the one longest unnamed among those no configuration since the one before this names.
rl_metrics_entry_t* entry_for(rl_metrics_shm_t* shm, uint32_t kind, const ngx_str_t& name, ngx_log_t* log) {
    rl_metrics_entry_t* reuse = nullptr;
    for (uint32_t i = 0; i < shm->n; i++) {
        rl_metrics_entry_t* e = &shm->entries[i];
        if (same_name(e, kind, name)) {
            e->gen = shm->gen;
            return e;
        }
        if (e->gen + 1 < shm->gen && (reuse == nullptr || e->gen < reuse->gen)) reuse = e;
    }
    if (name.len > kRlMetricsNameMax || (shm->n == shm->cap && reuse == nullptr)) {
        // nginx -t refuses both (rl_metrics_postconfiguration): a table laid out by another build
        ngx_log_error(NGX_LOG_WARN, log, 0, "ratelimit_metrics: no metrics for %s \"%V\" (%s)",
                      kind == RL_METRICS_ZONE ? "zone" : "ratelimit_redis", &name,
                      name.len > kRlMetricsNameMax ? "name too long" : "too many names");
        return nullptr;
    }
    rl_metrics_entry_t* e = reuse != nullptr ? reuse : &shm->entries[shm->n];
    e->kind = 0;  // while it changes, no scrape matches it (they read names of this configuration)
    ngx_memory_barrier();
    ngx_memzero(&e->c, sizeof(e->c));
    e->name_len = static_cast<uint32_t>(name.len);
    ngx_memcpy(e->name, name.data, name.len);
    e->gen = shm->gen;
    ngx_memory_barrier();
    e->kind = kind;
    if (reuse == nullptr) shm->n++;
    return e;
}

}  // namespace

size_t rl_metrics_table_size() noexcept { return kZoneSize; }

rl_metrics_shm_t* rl_metrics_table(ngx_shm_zone_t* shm_zone, void* data) noexcept {
    auto* shpool = reinterpret_cast<ngx_slab_pool_t*>(shm_zone->shm.addr);
    auto* shm = static_cast<rl_metrics_shm_t*>(data != nullptr || shm_zone->shm.exists ? shpool->data : nullptr);
    if (shm == nullptr) {
        shm = static_cast<rl_metrics_shm_t*>(ngx_slab_alloc(shpool, sizeof(rl_metrics_shm_t)));
        if (shm == nullptr) return nullptr;
        shpool->data = shm;
        shm->magic = 0;
    }
    if (shm->magic != kMagic || shm->entry_size != sizeof(rl_metrics_entry_t)) {
        ngx_memzero(shm, sizeof(*shm));
        shm->magic = kMagic;
        shm->entry_size = sizeof(rl_metrics_entry_t);
        shm->cap = kEntries;
    }
    shm->gen++;
    return shm;
}

rl_metrics_zone_t* rl_metrics_zone_entry(rl_metrics_shm_t* shm, const ngx_str_t& name, ngx_log_t* log) noexcept {
    rl_metrics_entry_t* e = entry_for(shm, RL_METRICS_ZONE, name, log);
    return e ? &e->c.zone : nullptr;
}

rl_metrics_redis_t* rl_metrics_redis_entry(rl_metrics_shm_t* shm, const ngx_str_t& name, ngx_log_t* log) noexcept {
    rl_metrics_entry_t* e = entry_for(shm, RL_METRICS_REDIS, name, log);
    return e ? &e->c.redis : nullptr;
}

const rl_metrics_shm_t* rl_metrics_table_find(ngx_cycle_t* cycle, const ngx_str_t& name) noexcept {
    ngx_list_part_t* part = &cycle->shared_memory.part;
    auto* zones = static_cast<ngx_shm_zone_t*>(part->elts);
    for (ngx_uint_t i = 0;; i++) {
        if (i >= part->nelts) {
            if (part->next == nullptr) return nullptr;
            part = part->next;
            zones = static_cast<ngx_shm_zone_t*>(part->elts);
            i = 0;
            if (part->nelts == 0) continue;
        }
        ngx_shm_zone_t& z = zones[i];
        if (z.shm.name.len != name.len || ngx_strncmp(z.shm.name.data, name.data, name.len) != 0) continue;
        if (z.shm.addr == nullptr || z.shm.size < sizeof(ngx_slab_pool_t)) return nullptr;
        auto* shm = static_cast<const rl_metrics_shm_t*>(reinterpret_cast<ngx_slab_pool_t*>(z.shm.addr)->data);
        if (shm == nullptr || shm->magic != kMagic || shm->entry_size != sizeof(rl_metrics_entry_t)) return nullptr;
        return shm;
    }
}

void rl_metrics_table_each(const rl_metrics_shm_t* shm, void (*zone)(void* data, const ngx_str_t& name,
                                                                       const rl_metrics_zone_t& c),
                           void (*redis)(void* data, const ngx_str_t& name, const rl_metrics_redis_t& c),
                           void* data) noexcept {
    uint32_t n = shm->n < shm->cap ? shm->n : shm->cap;
    for (uint32_t i = 0; i < n; i++) {
        const rl_metrics_entry_t& e = shm->entries[i];
        if (e.gen != shm->gen || e.name_len > kRlMetricsNameMax) continue;
        ngx_str_t name{e.name_len, const_cast<u_char*>(e.name)};
        if (e.kind == RL_METRICS_ZONE) zone(data, name, e.c.zone);
        if (e.kind == RL_METRICS_REDIS) redis(data, name, e.c.redis);
    }
}
