// The delay of an admitted request: its limits' longest, never longer than their policies allow.
#include "ngx/engine/delay.h"

#include "core/algo/delay.h"

void rl_delay_decide(rl_ctx_t* ctx) noexcept {
    rl_result_t* longest = nullptr;
    for (ngx_uint_t i = 0; i < ctx->nresults; i++) {
        rl_result_t& res = ctx->results[i];
        if (!rl_decided(res) || !res.decision.allowed || res.decision.delay_us <= 0) continue;
        // Never longer than the policy allows, whatever a Redis reply said.
        int64_t bound = rl::delay_bound(*res.policy);
        if (res.decision.delay_us > bound) res.decision.delay_us = bound;
        if (res.decision.delay_us <= 0) continue;
        if (longest == nullptr || res.decision.delay_us > longest->decision.delay_us) longest = &res;
    }
    if (longest == nullptr) return;
    ctx->delayer = longest - ctx->results;
    // The timer counts milliseconds: never shorter than the limit asked.
    ctx->delay_ms = (longest->decision.delay_us + 999) / 1000;
    ctx->status = ctx->scope->dry_run ? RL_STATUS_DELAYED_DRY_RUN : RL_STATUS_DELAYED;
}

int64_t rl_delay_excess_milli(const rl_ctx_t* ctx) noexcept {
    const rl_result_t& res = ctx->results[ctx->delayer];
    const rl::Policy& p = *res.policy;
    // The delay is rounded up by less than a microsecond.
    double excess = static_cast<double>(p.delay) +
                    static_cast<double>(res.decision.delay_us) * static_cast<double>(p.requests) /
                        static_cast<double>(p.period_us);
    return static_cast<int64_t>(excess * 1000 + 1e-6);
}
