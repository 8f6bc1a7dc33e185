// The shared-memory store: a key's state in its slot of the zone's table, decided by the core
// (core/algo/decide.h) in the shared-memory pass (pass.cpp), under the zone's lock.
#include "ngx/stores/shm.h"

#include "ngx/stores/pass.h"

#include "core/algo/decide.h"
#include "core/algo/refund.h"
#include "core/algo/settle.h"

namespace {

rl::Decision shm_decide(rl_result_t& res, rl::Slot* slot, int64_t now) {
    return rl::decide(slot->state, *res.policy, now, res.cost, rl_store_ring(res, slot));
}

void shm_commit(rl_result_t& res, rl::Slot* slot) {
    if (res.policy->algo == rl::Algo::log) rl::commit_log(res.decision, rl::slot_ring(slot), *res.policy, res.cost);
    slot->state = res.decision.next;
}

void shm_refund(rl_result_t& res, rl::Slot* slot, int64_t now) {
    rl::refund(slot->state, rl_store_ring(res, slot), *res.policy, now, res.at, res.cost);
    // Headers report the state after the refund, as when shared memory alone rejects.
    res.decision = rl::decide(slot->state, *res.policy, now, 0, rl_store_ring(res, slot));
}

void shm_settle(rl_result_t& res, rl::Slot* slot, int64_t now) {
    rl::charge(slot->state, rl_store_ring(res, slot), *res.policy, rl_debt_of(res), now, res.delta);
}

constexpr rl_store_t shm_store() {
    rl_store_t s{};
    s.name = "shared memory";
    s.id = RL_STORE_ID_SHM;
    s.decide = shm_decide;
    s.commit = shm_commit;
    s.refund = shm_refund;
    s.settle = shm_settle;
    return s;
}

}  // namespace

const rl_store_t rl_shm_store = shm_store();
