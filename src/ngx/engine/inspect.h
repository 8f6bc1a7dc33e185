// A key's state read from its zone's table without consuming anything, and its reset
// (inspect.cpp): what an operator's API shows and does.
#pragma once

#include "ngx/limits/zone.h"

#include "core/algo/decision.h"
#include "core/keys/key_hash.h"

struct rl_key_state_t {
    rl::Policy policy;
    bool found;            // the store holds state for the key (shared memory: a slot)
    rl::Decision now;      // a request of cost 0: remaining, reset
    int64_t retry_us;      // a request of cost 1: its wait (0: it would pass)
    int64_t blocked_us;    // a live block's time left, 0 if none
    int64_t in_flight;     // concurrency: slots taken
    int64_t at_us;         // the store's time of the reading (unix us, store's clock)
    int64_t lease_units;   // a sync lease zone's view: units granted to this host, usable now (-1: none)
};

// The policy a key is shown under: the first the zone is applied with; a zone no limit
// applies, its own (gcra unless algo= says otherwise).
rl::Policy rl_zone_primary_policy(const rl_zone_t* zone) noexcept;
// The key's slot in the zone's table, read under the lock (a copy: nothing is consumed,
// nothing made); a sync zone's: this host's view, on the zone's clock (lease: with the units
// it holds). False without memory (a log's ring is copied into `pool`).
bool rl_inspect_local(ngx_pool_t* pool, rl_zone_t* zone, const rl::KeyHash& hash, rl_key_state_t* s) noexcept;
// The figures of a state read at `now`: remaining, reset, a request's wait, in flight, a block.
void rl_inspect_figures(rl_key_state_t* s, const rl::State& state, const int64_t* ring, int64_t now) noexcept;
// The key's state in the zone's table goes (every algorithm's, its blocks, the rejections
// remembered for the zone's policies): the next request finds a fresh key. Returns the
// algorithms' states dropped.
ngx_uint_t rl_reset_local(rl_zone_t* zone, const rl::KeyHash& hash) noexcept;
