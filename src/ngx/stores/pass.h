// The shared-memory pass (pass.cpp): the results of a request whose state is kept in their
// zones' tables, decided, given back or settled together under the zones' locks.
#pragma once

#include "ngx/stores/store.h"

// The pass over `results` (their stores' `decide`): under their zones' locks, on the clock read
// inside the locks, consuming from all of them only if all of them allow the request. Returns
// whether they did. `scratch` has room for 2 * n pointers.
bool rl_store_decide_local(rl_result_t** results, ngx_uint_t n, void** scratch) noexcept;
// Gives back what committed results of the pass consumed, to the life of each key they
// consumed from (res.life): nothing to a key reset, dropped or laid out anew since (their
// stores' `gone` instead).
void rl_store_refund_local(rl_result_t** results, ngx_uint_t n, void** scratch) noexcept;
// Applies the settles (res.delta) of results kept in their zones' tables, under their locks,
// to the life of each key they were admitted in: none to a later one.
void rl_store_settle_local(rl_result_t** results, ngx_uint_t n, void** scratch) noexcept;
// The slot of a result's key in its zone's table (zone locked), made if absent; nullptr when
// the table cannot be used.
rl::Slot* rl_store_slot(const rl_result_t& res) noexcept;

// A sliding log's ring in the result's slot, or nullptr for other algorithms.
inline int64_t* rl_store_ring(const rl_result_t& res, rl::Slot* slot) {
    return res.policy->algo == rl::Algo::log ? rl::slot_ring(slot) : nullptr;
}
