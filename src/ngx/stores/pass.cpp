// The shared-memory pass: decides every result kept in a zone's table (shared-memory and sync
// zones, in-flight slots, and Redis zones deciding locally on error), all or nothing, under the
// zones' locks, taken in one order so that two requests never wait on each other.
#include "ngx/stores/pass.h"

#include "core/algo/block.h"
#include "core/algo/decide.h"
#include "core/algo/refund.h"

namespace {

int64_t now_us() {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return static_cast<int64_t>(ts.tv_sec) * 1000000 + ts.tv_nsec / 1000;
}

// Locks each distinct zone of the results once, in address order. Returns the locks taken.
ngx_uint_t lock_zones(rl_result_t** results, ngx_uint_t n, ngx_slab_pool_t** locks) {
    ngx_uint_t nlocks = 0;
    for (ngx_uint_t i = 0; i < n; i++) {
        ngx_slab_pool_t* p = results[i]->applied->zone->shpool;
        ngx_uint_t j = 0;
        while (j < nlocks && locks[j] < p) j++;
        if (j < nlocks && locks[j] == p) continue;
        for (ngx_uint_t k = nlocks; k > j; k--) locks[k] = locks[k - 1];
        locks[j] = p;
        nlocks++;
    }
    for (ngx_uint_t i = 0; i < nlocks; i++) ngx_shmtx_lock(&locks[i]->mutex);
    return nlocks;
}

void unlock_zones(ngx_slab_pool_t** locks, ngx_uint_t nlocks) {
    for (ngx_uint_t i = nlocks; i > 0; i--) ngx_shmtx_unlock(&locks[i - 1]->mutex);
}

uint8_t block_tag(const rl_result_t& res) {
    return static_cast<uint8_t>(rl::kBlockTag | static_cast<uint8_t>(res.policy->algo));
}

// A live block of the result's key (zone locked): its decision, and true.
bool blocked(rl_result_t& res) {
    if (res.policy->block_us <= 0 || res.applied->zone->table->block_until <= res.at) return false;
    rl::Slot* slot = rl::table_find(res.applied->zone->table, res.hash, block_tag(res));
    if (slot == nullptr || !rl::block_live(slot->state.a, res.at)) return false;
    res.decision = rl::blocked_decision(*res.policy, slot->state.a, res.at);
    return true;
}

// A result that rejected by itself starts its key's block (zone locked). Last in the pass: the
// block's slot may recycle one the pass still held.
void start_block(rl_result_t& res) {
    if (!rl::starts_block(*res.policy, res.decision)) return;
    rl::Slot* slot = rl::table_acquire(res.applied->zone->table, res.hash, block_tag(res), nullptr);
    slot->state = rl::State{};
    slot->state.a = res.at + res.policy->block_us;
    res.decision.block = rl::kBlockStarted;
    // No key of the zone is blocked past this: until then a decision looks for its key's block.
    rl::TableHeader* table = res.applied->zone->table;
    if (table->block_until < slot->state.a) table->block_until = slot->state.a;
}

int64_t store_now(const rl_store_t* store, const rl_zone_t* zone, int64_t local) {
    return store->clock ? store->clock(zone, local) : local;
}

}  // namespace

namespace {

// Whether this worker may use the zone's table for the result (zone locked). An old worker
// finishing its requests during a reload may see a table laid out by the new configuration,
// and must never use more log ring, or more of a slot, than it has.
bool table_usable(const rl_result_t& res) {
    const rl_zone_t* zone = res.applied->zone;
    const rl::TableHeader* table = zone->table;
    if (res.policy->algo == rl::Algo::log && static_cast<uint64_t>(res.policy->requests) > rl::ring_capacity(table)) {
        return false;
    }
    size_t key_bytes = rl_zone_key_bytes(zone);
    return key_bytes == 0 || table->slot_size >= rl::slot_size_for(key_bytes);
}

// The slot a committed result took from, if its key still lives there the life it took from
// (zone locked); nullptr once the key was reset by the API, dropped by a full table (and maybe
// made again), or the table laid out anew by a reload: its give-back or charge is then dropped,
// as the key's new life owes nothing of the old one.
rl::Slot* taken_slot(const rl_result_t& res) {
    if (!table_usable(res)) return nullptr;
    return rl::table_find_life(res.applied->zone->table, res.hash, static_cast<uint8_t>(res.policy->algo), res.life);
}

}  // namespace

rl::Slot* rl_store_slot(const rl_result_t& res) noexcept {
    if (!table_usable(res)) return nullptr;
    return rl::table_acquire(res.applied->zone->table, res.hash, static_cast<uint8_t>(res.policy->algo), nullptr);
}

bool rl_store_decide_local(rl_result_t** results, ngx_uint_t n, void** scratch) noexcept {
    auto** slots = reinterpret_cast<rl::Slot**>(scratch);
    auto** locks = reinterpret_cast<ngx_slab_pool_t**>(scratch + n);
    ngx_uint_t nlocks = lock_zones(results, n, locks);

    // The clock is read under the locks: decisions on a zone then see time in lock order.
    int64_t now = now_us();
    bool all_allowed = true;
    for (ngx_uint_t i = 0; i < n; i++) {
        rl_result_t& res = *results[i];
        const rl_store_t* store = rl_store_of(res);
        res.at = store_now(store, res.applied->zone, now);
        slots[i] = rl_store_slot(res);
        if (slots[i] != nullptr && blocked(res)) {
            // A live block decides, consuming nothing: the key's state is left as it is.
            slots[i] = nullptr;
            all_allowed = false;
            continue;
        }
        if (slots[i] == nullptr) {
            res.decision = rl::Decision{};
            res.decision.allowed = true;
            res.decision.limit = res.policy->requests;
            continue;
        }
        res.decision = store->decide(res, slots[i], res.at);
        all_allowed = all_allowed && res.decision.allowed;
    }
    for (ngx_uint_t i = 0; i < n; i++) {
        rl_result_t& res = *results[i];
        if (slots[i] == nullptr) continue;
        const rl_store_t* store = rl_store_of(res);
        if (!all_allowed) {
            if (store->release) store->release(res, slots[i]);
            // Nothing is consumed: the limits that would have allowed report their untouched state.
            if (res.decision.allowed) {
                res.decision = rl::decide(slots[i]->state, *res.policy, res.at, 0, rl_store_ring(res, slots[i]));
            }
            continue;
        }
        store->commit(res, slots[i]);
        res.consumed = res.cost > 0;
        res.life = rl::slot_life(res.applied->zone->table, slots[i]);
    }
    if (!all_allowed) {
        for (ngx_uint_t i = 0; i < n; i++) {
            if (slots[i] != nullptr) start_block(*results[i]);
        }
    }
    unlock_zones(locks, nlocks);
    return all_allowed;
}

namespace {

// Calls op(res, now) for each result under its zone's lock, on the clock read inside the locks.
template <typename Op>
void each_locked(rl_result_t** results, ngx_uint_t n, void** scratch, Op op) {
    auto** locks = reinterpret_cast<ngx_slab_pool_t**>(scratch + n);
    ngx_uint_t nlocks = lock_zones(results, n, locks);
    int64_t now = now_us();
    for (ngx_uint_t i = 0; i < n; i++) op(*results[i], now);
    unlock_zones(locks, nlocks);
}

}  // namespace

void rl_store_refund_local(rl_result_t** results, ngx_uint_t n, void** scratch) noexcept {
    each_locked(results, n, scratch, [](rl_result_t& res, int64_t now) {
        if (!res.consumed) return;
        res.consumed = false;
        const rl_store_t* store = rl_store_of(res);
        if (rl::Slot* slot = taken_slot(res)) {
            store->refund(res, slot, store_now(store, res.applied->zone, now));
        } else if (store->gone) {
            store->gone(res);
        }
    });
}

void rl_store_settle_local(rl_result_t** results, ngx_uint_t n, void** scratch) noexcept {
    each_locked(results, n, scratch, [](rl_result_t& res, int64_t now) {
        const rl_store_t* store = rl_store_of(res);
        // Charged or given back only to the life of the key it was admitted in.
        rl::Slot* slot = taken_slot(res);
        if (slot == nullptr) return;
        int64_t at = store_now(store, res.applied->zone, now);
        if (res.delta > 0) {
            store->settle(res, slot, at);
        } else {
            rl_result_t back = res;  // a refund of part of its cost (it reports into the copy)
            back.cost = -res.delta;
            store->refund(back, slot, at);
        }
    });
}
