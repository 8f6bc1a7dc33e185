// Tiers (tier.cpp): rate=$variable and burst=$variable, a policy per request.
#pragma once

#include "ngx/limits/conf.h"

// Whether a zone parameter's value holds variables (then it is a tier's, per request).
bool rl_tier_is_variable(ngx_str_t* value) noexcept;
// ratelimit_zone's checks of rate=$variable, default_rate= (`dflt`, or nullptr) and
// burst=$variable, after parsing; a variable rate's policy becomes the default rate.
bool rl_tier_check_zone(ngx_conf_t* cf, rl_zone_t* zone, const rl::Policy* dflt) noexcept;
// At merge: whether a limit's policy comes per request (the log algorithm refuses a variable
// rate: rl_zone_check_log).
void rl_tier_check_applied(rl_applied_t* applied) noexcept;
// The policy of a tiered limit for this request, finished, in `out`; or the applied one
// (default_rate, burst 0) for values that are invalid (logged) or empty.
const rl::Policy* rl_tier_policy(ngx_http_request_t* r, const rl_applied_t& applied, rl::Policy* out) noexcept;
