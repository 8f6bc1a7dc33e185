// Rejections remembered: one slot per key beside its own in the zone's table, under the zone's
// lock; the table's hints (core/keys/rejected.h), read without it, spare the lock to keys with none.
#include "ngx/stores/redis_rejected.h"

#include "core/keys/rejected.h"
#include "core/keys/slot_table.h"
#include "ngx/stores/redis_state.h"

namespace {

uint8_t tag_of(const rl_result_t& res) { return static_cast<uint8_t>(rl::kRejectedTag | static_cast<uint8_t>(res.policy->algo)); }

// An entry per key and policy (locations applying the zone with other bursts or delays, or a
// tier's other rate, get answers of their own) and per epoch of the worker's connections: after
// a connection failed, Redis may have restarted without its state, so what it said before no
// longer holds.
rl::KeyHash key_of(const rl_result_t& res) {
    return rl::rejection_key(res.hash, *res.policy, res.applied->zone->redis->store->epoch);
}

static_assert(sizeof(rl::TableHeader::hints) == rl::kRejectionHints * sizeof(int64_t), "one hint per group of keys");

// The hint covering the result's key: shared by every worker, so read atomically.
int64_t* hint_of(const rl_result_t& res) {
    return &res.applied->zone->table->hints[rl::rejection_hint(res.hash)];
}

// Whether a rejection remembered for the result's key may hold at *now (read on first need,
// then kept: 0 until then). A hint found passed is cleared, so that the next requests read no
// clock; unless raised meanwhile (the exchange then fails: the raise stands).
bool may_hold(const rl_result_t& res, int64_t* now) {
    int64_t* hint = hint_of(res);
    int64_t h = __atomic_load_n(hint, __ATOMIC_RELAXED);
    if (h == 0) return false;
    if (*now == 0) *now = rl_rejected_now();
    if (rl::hint_may_hold(h, *now)) return true;
    __atomic_compare_exchange_n(hint, &h, int64_t{0}, false, __ATOMIC_RELAXED, __ATOMIC_RELAXED);
    return false;
}

}  // namespace

int64_t rl_rejected_now() noexcept {
    // Monotonic: the same clock in every worker of the host, and it never steps.
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return static_cast<int64_t>(ts.tv_sec) * 1000000 + ts.tv_nsec / 1000;
}

rl_rejected_e rl_rejected_check(rl_result_t& res, int64_t* now) noexcept {
    const rl_zone_t* zone = res.applied->zone;
    if (res.cost <= 0 || !rl::is_rate(res.policy->algo)) return RL_REJECTED_NONE;
    if (!may_hold(res, now)) return RL_REJECTED_NONE;  // nothing remembered lately for keys like it: no lock
    rl_rejected_e found = RL_REJECTED_NONE;
    ngx_shmtx_lock(&zone->shpool->mutex);
    if (rl::Slot* slot = rl::table_find(zone->table, key_of(res), tag_of(res))) {
        if (rl::cached_rejection(slot->state, *res.policy, *now, res.cost, &res.decision)) {
            found = RL_REJECTED_HIT;
        } else if (rl::take_ask(slot->state, *res.policy, *now, res.cost, static_cast<int64_t>(zone->timeout) * 1000)) {
            found = RL_REJECTED_ASK;  // the entry answers the others until its reply, at most the timeout
        }
    }
    ngx_shmtx_unlock(&zone->shpool->mutex);
    return found;
}

void rl_rejected_remember(const rl_result_t& res, int64_t now, bool asked) noexcept {
    rl::Decision next;
    const rl::Decision* d = &res.decision;
    if (res.decision.allowed) {
        // An admission that leaves no room: the next request of its cost is rejected without
        // a call too. Only if it took its units (all its request's checks were admitted).
        d = res.consumed && rl::rejection_after_admission(res.decision, *res.policy, res.cost, &next) ? &next : nullptr;
    }
    if (d == nullptr || !rl::rejection_cacheable(*d, *res.policy, res.cost)) {
        if (asked) rl_rejected_release(res);
        return;
    }
    const rl_zone_t* zone = res.applied->zone;
    ngx_shmtx_lock(&zone->shpool->mutex);
    rl::Slot* slot = rl::table_acquire(zone->table, key_of(res), tag_of(res), nullptr);
    slot->state = rl::remember_rejection(*d, now, res.cost);
    // Raised under the lock, so raises never interleave; a reader clears only a value already
    // passed, which covers no entry that holds (this one included).
    int64_t* hint = hint_of(res);
    __atomic_store_n(hint, rl::raised_hint(__atomic_load_n(hint, __ATOMIC_RELAXED), slot->state, *res.policy),
                     __ATOMIC_RELAXED);
    ngx_shmtx_unlock(&zone->shpool->mutex);
}

void rl_rejected_release(const rl_result_t& res) noexcept {
    const rl_zone_t* zone = res.applied->zone;
    ngx_shmtx_lock(&zone->shpool->mutex);
    // Unless a reply replaced it meanwhile (what that says holds).
    rl::Slot* slot = rl::table_find(zone->table, key_of(res), tag_of(res));
    if (slot != nullptr && rl::asking(slot->state)) slot->state = rl::State{};
    ngx_shmtx_unlock(&zone->shpool->mutex);
}

void rl_rejected_forget(const rl_result_t& res) noexcept {
    const rl_zone_t* zone = res.applied->zone;
    int64_t now = 0;
    if (!may_hold(res, &now)) return;  // none that holds
    ngx_shmtx_lock(&zone->shpool->mutex);
    if (rl::Slot* slot = rl::table_find(zone->table, key_of(res), tag_of(res))) slot->state = rl::State{};
    ngx_shmtx_unlock(&zone->shpool->mutex);
}
