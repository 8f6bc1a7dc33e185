// Tiers: a zone's rate= and burst= from variables (a plan's map), evaluated per request.
// A variable rate falls back to the zone's static default_rate=, a variable burst to 0; the
// policy so made is finished per request, with the bounds finish_policy keeps for static ones.
#include "ngx/limits/tier.h"

#include "core/algo/concurrency.h"
#include "core/text/rate.h"

bool rl_tier_check_zone(ngx_conf_t* cf, rl_zone_t* zone, const rl::Policy* dflt) noexcept {
    if (zone->sync_us != 0 && (zone->rate_cv != nullptr || zone->burst_cv != nullptr)) {
        // A synced key's state is reconciled under the policies the configuration lists.
        rl_conf_error(cf, "\"sync\" cannot take a variable \"rate\" or \"burst\" in ratelimit zone \"%V\"",
                      &zone->name);
        return false;
    }
    if (zone->rate_cv == nullptr) {
        if (dflt != nullptr) {
            rl_conf_error(cf, "\"default_rate\" is only for a variable \"rate\" in ratelimit zone \"%V\"", &zone->name);
            return false;
        }
        return true;
    }
    if (dflt == nullptr) {
        rl_conf_error(cf, "a variable \"rate\" requires \"default_rate\" in ratelimit zone \"%V\"", &zone->name);
        return false;
    }
    zone->policy.requests = dflt->requests;
    zone->policy.period_us = dflt->period_us;
    return true;
}

void rl_tier_check_applied(rl_applied_t* applied) noexcept {
    // A burst on the `ratelimit` line replaces the zone's, variable or not.
    const rl_zone_t* zone = applied->zone;
    applied->tiered = zone->rate_cv != nullptr || zone->concurrency_cv != nullptr ||
                      (zone->burst_cv != nullptr && !applied->limit->burst_set);
}

namespace {

// A tier's value for ctx: false when it has none (an error, or empty).
bool value_of(rl_ctx_t* ctx, const rl_value_t* cv, ngx_str_t* out) {
    return cv != nullptr && ctx->fe->evaluate(ctx, cv, out) && out->len > 0;
}

}  // namespace

const rl::Policy* rl_tier_policy(rl_ctx_t* ctx, const rl_applied_t& applied, rl::Policy* out) noexcept {
    rl_zone_t* zone = applied.zone;
    *out = applied.policy;  // default_rate, and the line's burst, the zone's, or 0 for a variable one
    ngx_str_t value = ngx_null_string;
    if (zone->concurrency_cv != nullptr) {
        if (value_of(ctx, zone->concurrency_cv, &value) &&
            !rl::parse_int(rl_sv(value), 1, rl::kMaxConcurrency, out->requests)) {
            rl_warn_value(ctx->log, zone, &zone->tier_warned, "concurrency", value, "default_concurrency applies");
            out->requests = applied.policy.requests;
        }
        return rl::finish_policy(*out) == nullptr ? out : &applied.policy;
    }
    if (value_of(ctx, zone->rate_cv, &value) &&
        !rl::parse_rate(rl_sv(value), out->requests, out->period_us)) {
        rl_warn_value(ctx->log, zone, &zone->tier_warned, "rate", value, "default_rate applies");
    }
    bool burst_var = zone->burst_cv != nullptr && !applied.limit->burst_set;
    if (burst_var && value_of(ctx, zone->burst_cv, &value) &&
        !rl::parse_int(rl_sv(value), 0, rl::kMaxRequests, out->burst)) {
        rl_warn_value(ctx->log, zone, &zone->tier_warned, "burst", value, "counted as 0");
    }
    if (rl::finish_policy(*out) == nullptr) return out;
    // Only a burst can be out of bounds for a parsed rate (finish_policy takes any rate
    // parse_rate does with burst 0): a variable one counts 0, a static one keeps default_rate.
    if (burst_var) {
        rl_warn_value(ctx->log, zone, &zone->tier_warned, "burst", value, "too large for this rate, counted as 0");
        out->burst = 0;
        if (rl::finish_policy(*out) == nullptr) return out;
    } else {
        rl_warn_value(ctx->log, zone, &zone->tier_warned, "rate", value, "too low for the burst, default_rate applies");
    }
    return &applied.policy;
}
