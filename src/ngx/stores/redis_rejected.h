// The per-request Redis store's rejections, remembered in the zone's table until they expire
// (core/keys/rejected.h): a key Redis rejected is rejected here, with Redis's own answer counted
// down, without a call, until its Retry-After; then one request per host asks again. Per host,
// not per worker: every worker sees an entry run out at once, and one asker per worker would
// make as many calls per freed unit.
#pragma once

#include "ngx/limits/context.h"

// What a result about to be sent to Redis finds remembered (rl_rejected_check).
enum rl_rejected_e {
    RL_REJECTED_NONE = 0,  // nothing that holds: it asks Redis
    RL_REJECTED_HIT,       // Redis's last rejection of its key still holds: its decision is set
    RL_REJECTED_ASK,       // the rejection just ran out: it asks Redis for the host, whose other
                           // requests are rejected from it meanwhile (core/keys/rejected.h); its
                           // reply goes to rl_rejected_remember, or else rl_rejected_release
};

// *now: the clock (rl_rejected_now), or 0 until read: read only if an entry may hold, then
// left there for the next results of the request.
rl_rejected_e rl_rejected_check(rl_result_t& res, int64_t* now) noexcept;
// Redis decided the result (at local time `now`, or later): a rejection is remembered if worth
// it, and so is the one an admission leaves behind (no room for another of its cost). `asked`:
// it was RL_REJECTED_ASK; the others are answered from memory no longer.
void rl_rejected_remember(const rl_result_t& res, int64_t now, bool asked) noexcept;
// A result that was RL_REJECTED_ASK goes without Redis's answer (failed, timed out, its request
// gone or rejected here): the others ask on their own again.
void rl_rejected_release(const rl_result_t& res) noexcept;
// Units of the result's key were given back: what was remembered no longer holds.
void rl_rejected_forget(const rl_result_t& res) noexcept;
// The local clock the entries are kept on (us, monotonic).
int64_t rl_rejected_now() noexcept;
