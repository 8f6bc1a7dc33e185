// A zone's table in shared memory: one allocation as large as the zone allows, laid out once
// and reused across reloads; a sync zone's block starts with its store's area (the view, the
// unsent deltas, the leases) before the table; the top keys' summary (top=K) ends it.
#include "ngx/stores/table.h"

#include "ngx/stores/store.h"

#include "core/algo/decide.h"
#include "core/keys/top_keys.h"

#include <sys/random.h>

namespace {

uint32_t zone_slot_size(const rl_zone_t* zone) {
    if (size_t bytes = rl_zone_key_bytes(zone)) return rl::slot_size_for(bytes);  // never the log
    rl::Policy p = zone->policy;
    p.algo = rl::Algo::log;
    return rl::slot_size_for(zone->uses_log ? rl::ring_bytes(p) : 0);
}

// The secret that places keys in the table's buckets: random, so that no client can choose
// keys that share one; made once, when the table is laid out, and kept with it across reloads.
uint64_t table_secret(ngx_log_t* log) {
    uint64_t secret = 0;
    if (getrandom(&secret, sizeof(secret), GRND_NONBLOCK) != static_cast<ssize_t>(sizeof(secret))) {
        // Only at very early boot, before the kernel's pool is ready: less secret, still not public.
        ngx_log_error(NGX_LOG_WARN, log, ngx_errno, "ratelimit: getrandom() failed, the zone's secret is weaker");
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        secret = (static_cast<uint64_t>(ts.tv_nsec) << 32) ^ static_cast<uint64_t>(ts.tv_sec) ^
                 (static_cast<uint64_t>(ngx_pid) << 16) ^ reinterpret_cast<uintptr_t>(&secret);
        secret *= 0x9e3779b97f4a7c15ULL;
    }
    return secret;
}

// A block starts with its store's area (a sync zone's header and lists), sized for every slot
// the whole block could hold; the table takes the rest.
size_t store_area(const rl_zone_t* zone, size_t block_bytes, uint32_t slot_size, uint32_t* cap) {
    *cap = 0;
    if (zone->store->area_bytes == nullptr) return 0;
    *cap = rl::table_capacity(block_bytes, slot_size);
    size_t area = zone->store->area_bytes(*cap);
    return area < block_bytes ? area : block_bytes;
}

// Whether what a reload found can be kept (at the same place, with an area or not): the same layout.
bool zone_compatible(const rl_zone_t* zone, const rl_zone_t* old, uint32_t slot_size, uint32_t cap) {
    if (!rl::table_compatible(old->table, slot_size)) return false;
    if (zone->store->area_bytes == nullptr) return true;
    return old->sync_shm == zone->block && zone->store->area_compatible(old->sync_shm, cap) &&
           old->table->nslots <= cap;
}

// The top keys' summary at the end of the block, in the room kept for it (zone->top_bytes):
// fresh memory gets what top=K needs; a reload keeps the room of the running workers, who write
// their summary there until they exit, so that neither the table nor the summary moves. The
// summary found there is kept when it has this K, laid out afresh otherwise (those workers read
// its header, under the lock, at each call).
bool top_init(rl_zone_t* zone, const rl_zone_t* old, ngx_log_t* log) {
    zone->top = nullptr;
    if (zone->top_k == 0) return true;
    size_t need = rl::top_keys_bytes(zone->top_k);
    if (need > zone->top_bytes) {
        ngx_log_error(NGX_LOG_EMERG, log, 0,
                      "ratelimit zone \"%V\": top=%uD needs %uz bytes, more than the %uz its summary has in the "
                      "memory the running workers use: give the zone another name or size, or restart nginx",
                      &zone->name, zone->top_k, need, zone->top_bytes);
        return false;
    }
    auto* at = static_cast<u_char*>(zone->block) + zone->block_bytes - zone->top_bytes;
    auto* found = reinterpret_cast<rl::TopKeys*>(at);
    if (old != nullptr && rl::top_keys_compatible(found, zone->top_k, rl::kTopWindowUs)) {
        zone->top = found;  // its counts carry on
        return true;
    }
    uint64_t secret = table_secret(log);
    ngx_shmtx_lock(&zone->shpool->mutex);
    zone->top = rl::top_keys_format(at, zone->top_bytes, zone->top_k, rl::kTopWindowUs, secret);
    ngx_shmtx_unlock(&zone->shpool->mutex);
    return zone->top != nullptr;
}

void log_layout(const rl_zone_t* zone, ngx_log_t* log, uint32_t slot_size) {
    if (zone->top == nullptr) {
        ngx_log_error(NGX_LOG_INFO, log, 0, "ratelimit zone \"%V\": %uD keys of %uD bytes, %uD buckets; top off",
                      &zone->name, zone->table->nslots, slot_size, zone->table->nbuckets);
        return;
    }
    ngx_log_error(NGX_LOG_INFO, log, 0,
                  "ratelimit zone \"%V\": %uD keys of %uD bytes, %uD buckets; top %uD keys in %uz bytes (two "
                  "one-minute summaries of %uD entries of %uz bytes and %uD cells of %uz bytes)",
                  &zone->name, zone->table->nslots, slot_size, zone->table->nbuckets, zone->top_k,
                  rl::top_keys_bytes(zone->top_k), zone->top_k, sizeof(rl::TopEntry), rl::top_keys_cells(zone->top_k),
                  sizeof(rl::TopCell));
}

}  // namespace

ngx_int_t rl_zone_table_init(ngx_shm_zone_t* shm_zone, void* data) noexcept {
    auto* zone = static_cast<rl_zone_t*>(shm_zone->data);
    auto* old = static_cast<rl_zone_t*>(data);
    uint32_t slot_size = zone_slot_size(zone);

    if (old != nullptr) {  // reload: same name and size, so nginx kept the memory
        zone->shpool = old->shpool;
        zone->block = old->block;
        zone->block_bytes = old->block_bytes;
        zone->top_bytes = old->top_bytes;
        uint32_t cap;
        size_t area = store_area(zone, zone->block_bytes, slot_size, &cap);
        if ((old->sync_shm != nullptr) != (zone->store->area_bytes != nullptr) ||
            reinterpret_cast<u_char*>(old->table) != static_cast<u_char*>(zone->block) + area) {
            // The table would move within the memory the old workers still use until they exit.
            ngx_log_error(NGX_LOG_EMERG, shm_zone->shm.log, 0,
                          "ratelimit zone \"%V\": \"sync\" cannot be added or removed by a reload (the running "
                          "workers use the zone's memory): give the zone another name, or restart nginx",
                          &zone->name);
            return NGX_ERROR;
        }
        if (!top_init(zone, old, shm_zone->shm.log)) return NGX_ERROR;
        if (zone_compatible(zone, old, slot_size, cap)) {
            zone->table = old->table;
            zone->sync_shm = old->sync_shm;  // the view, the unsent deltas and the leases carry on
            return NGX_OK;
        }
        ngx_log_error(NGX_LOG_NOTICE, shm_zone->shm.log, 0,
                      "ratelimit zone \"%V\": its table's layout changed (sliding log use, sync, or a new version "
                      "of the module), its state is reset", &zone->name);
    } else {
        zone->shpool = reinterpret_cast<ngx_slab_pool_t*>(shm_zone->shm.addr);
        if (shm_zone->shm.exists) {
            zone->block = zone->shpool->data;
            zone->block_bytes = rl_zone_usable_bytes(shm_zone->shm.size);
        } else {
            // One allocation as large as the fresh pool allows: the table never allocates again.
            zone->shpool->log_nomem = 0;  // the tries below that do not fit are expected
            for (ngx_uint_t pages = zone->shpool->pfree; pages > 0 && zone->block == nullptr; pages--) {
                zone->block = ngx_slab_alloc(zone->shpool, pages * ngx_pagesize);
                zone->block_bytes = pages * ngx_pagesize;
            }
            if (zone->block == nullptr) {
                ngx_log_error(NGX_LOG_EMERG, shm_zone->shm.log, 0, "ratelimit zone \"%V\" has no room", &zone->name);
                return NGX_ERROR;
            }
            zone->shpool->data = zone->block;
        }
        zone->top_bytes = rl::top_keys_bytes(zone->top_k);
        if (!top_init(zone, nullptr, shm_zone->shm.log)) return NGX_ERROR;
    }

    uint64_t secret = table_secret(shm_zone->shm.log);
    uint32_t cap;
    size_t area = store_area(zone, zone->block_bytes, slot_size, &cap);
    ngx_shmtx_lock(&zone->shpool->mutex);
    zone->sync_shm = nullptr;
    size_t room = zone->block_bytes - area;
    room = room > zone->top_bytes ? room - zone->top_bytes : 0;
    zone->table = rl::table_format(static_cast<u_char*>(zone->block) + area, room, slot_size, secret);
    if (zone->table != nullptr && area > 0) {
        zone->sync_shm = static_cast<rl_sync_shm_t*>(zone->block);
        zone->store->area_format(zone->sync_shm, cap);
    }
    ngx_shmtx_unlock(&zone->shpool->mutex);
    if (zone->table == nullptr) {
        ngx_log_error(NGX_LOG_EMERG, shm_zone->shm.log, 0,
                      "ratelimit zone \"%V\" is too small for one key of %uD bytes", &zone->name, slot_size);
        return NGX_ERROR;
    }
    log_layout(zone, shm_zone->shm.log, slot_size);
    return NGX_OK;
}
