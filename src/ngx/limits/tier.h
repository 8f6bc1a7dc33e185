// Tiers (tier.cpp): rate=$variable and burst=$variable (and concurrency=$variable), a policy
// per request, from the values the front end evaluates.
#pragma once

#include "ngx/limits/context.h"

// ratelimit_zone's checks of rate=$variable, default_rate= (`dflt`, or nullptr) and
// burst=$variable, after parsing; a variable rate's policy becomes the default rate.
bool rl_tier_check_zone(ngx_conf_t* cf, rl_zone_t* zone, const rl::Policy* dflt) noexcept;
// At merge: whether a limit's policy comes per request (the log algorithm refuses a variable
// rate: rl_zone_check_log).
void rl_tier_check_applied(rl_applied_t* applied) noexcept;
// The policy of a tiered limit for what ctx limits, finished, in `out`; or the applied one
// (default_rate, burst 0) for values that are invalid (logged) or empty.
const rl::Policy* rl_tier_policy(rl_ctx_t* ctx, const rl_applied_t& applied, rl::Policy* out) noexcept;
