// Reading a key's state in its zone's table, and resetting it, under the zone's lock.
#include "ngx/engine/inspect.h"

#include "ngx/stores/store.h"
#include "ngx/sync/layout.h"

#include "core/algo/block.h"
#include "core/algo/decide.h"
#include "core/keys/rejected.h"

namespace {

constexpr uint8_t kAlgos = 7;  // rl::Algo values, concurrency included

int64_t now_us() {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return static_cast<int64_t>(ts.tv_sec) * 1000000 + ts.tv_nsec / 1000;
}

}  // namespace

rl::Policy rl_zone_primary_policy(const rl_zone_t* zone) noexcept {
    if (zone->policies != nullptr && zone->policies->nelts > 0) return *static_cast<rl::Policy*>(zone->policies->elts);
    rl::Policy p = zone->policy;
    if (!zone->algo_set) p.algo = rl::Algo::gcra;
    rl::finish_policy(p);
    return p;
}

void rl_inspect_figures(rl_key_state_t* s, const rl::State& state, const int64_t* ring, int64_t now) noexcept {
    s->now = rl::decide(state, s->policy, now, 0, ring);
    rl::Decision one = rl::decide(state, s->policy, now, 1, ring);
    s->retry_us = one.allowed ? 0 : one.retry_after_us;
    if (s->policy.algo == rl::Algo::concurrency) s->in_flight = state.a;
    if (s->blocked_us > 0) {
        s->now.remaining = 0;
        s->retry_us = s->blocked_us;
    }
}

bool rl_inspect_local(ngx_pool_t* pool, rl_zone_t* zone, const rl::KeyHash& hash, rl_key_state_t* s) noexcept {
    *s = rl_key_state_t{};
    s->lease_units = -1;
    s->policy = rl_zone_primary_policy(zone);
    uint64_t ring_bytes = rl::ring_bytes(s->policy);
    int64_t* ring = nullptr;
    if (ring_bytes > 0) {
        ring = static_cast<int64_t*>(ngx_pcalloc(pool, ring_bytes));
        if (ring == nullptr) return false;
    }
    rl::State state;
    auto algo = static_cast<uint8_t>(s->policy.algo);
    ngx_shmtx_lock(&zone->shpool->mutex);
    rl::TableHeader* table = zone->table;
    int64_t now = now_us();
    if (zone->store->clock) now = zone->store->clock(zone, now);
    bool usable = ring_bytes <= (table->slot_size - sizeof(rl::Slot));
    if (rl::Slot* slot = usable ? rl::table_find(table, hash, algo) : nullptr) {
        s->found = true;
        state = slot->state;
        if (ring != nullptr) ngx_memcpy(ring, rl::slot_ring(slot), ring_bytes);
        if (zone->sync_shm != nullptr && zone->sync_mode == RL_SYNC_LEASE) {
            s->lease_units = rl::lease_usable(rl_sync_key(slot)->lease, s->policy, now);
        }
    }
    if (rl::Slot* b = rl::table_find(table, hash, static_cast<uint8_t>(rl::kBlockTag | algo))) {
        if (rl::block_live(b->state.a, now)) s->blocked_us = b->state.a - now;
    }
    ngx_shmtx_unlock(&zone->shpool->mutex);
    s->at_us = now;
    rl_inspect_figures(s, state, ring, now);
    return true;
}

ngx_uint_t rl_reset_local(rl_zone_t* zone, const rl::KeyHash& hash) noexcept {
    ngx_uint_t n = 0;
    ngx_shmtx_lock(&zone->shpool->mutex);
    rl::TableHeader* table = zone->table;
    for (uint8_t a = 0; a < kAlgos; a++) {
        const uint8_t tags[] = {a, static_cast<uint8_t>(rl::kBlockTag | a)};
        for (uint8_t tag : tags) {
            rl::Slot* slot = rl::table_find(table, hash, tag);
            if (slot == nullptr) continue;
            // A zeroed slot is a fresh key for every algorithm; what follows it (a log's ring,
            // in-flight holders, a sync zone's view companions) is zeroed with it. A new life:
            // the requests running give nothing back to it, nor settle into it.
            rl::table_reset(table, slot);
            n += tag == a;
        }
    }
    if (zone->policies != nullptr) {
        auto* ps = static_cast<rl::Policy*>(zone->policies->elts);
        for (ngx_uint_t i = 0; i < zone->policies->nelts; i++) {
            auto tag = static_cast<uint8_t>(rl::kRejectedTag | static_cast<uint8_t>(ps[i].algo));
            if (rl::Slot* slot = rl::table_find(table, rl::rejection_key(hash, ps[i]), tag)) slot->state = rl::State{};
        }
    }
    ngx_shmtx_unlock(&zone->shpool->mutex);
    return n;
}
