// The per-request Redis store's rejections, remembered in the zone's table until they expire
// (core/keys/rejected.h): a key Redis rejected is rejected here, with Redis's own answer counted
// down, without a call, until its Retry-After.
#pragma once

#include "ngx/limits/context.h"

// A result about to be sent to Redis: true, with its decision set, if Redis's last rejection
// of its key still holds for it. *now: the clock (rl_rejected_now), or 0 until read: read only
// if an entry may hold, then left there for the next results of the request.
bool rl_rejected_check(rl_result_t& res, int64_t* now) noexcept;
// Redis rejected the result (decided at local time `now`): remembered if worth it.
void rl_rejected_remember(const rl_result_t& res, int64_t now) noexcept;
// Units of the result's key were given back: what was remembered no longer holds.
void rl_rejected_forget(const rl_result_t& res) noexcept;
// The local clock the entries are kept on (us, monotonic).
int64_t rl_rejected_now() noexcept;
