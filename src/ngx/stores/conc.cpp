// The in-flight store: concurrency=N zones in shared memory (and Redis concurrency zones deciding
// locally when Redis fails). A slot is taken in the shared-memory pass, all or nothing with the
// request's other limits, and given back when the request ends (rl_conc_release, at the
// request's end, whatever ends it). Each key records which worker holds its slots: a
// worker that dies holding some (SIGKILL, a crash) is found out when the key is next full.
#include "ngx/stores/conc.h"

#include "ngx/stores/pass.h"

#include "core/algo/concurrency.h"
#include "core/algo/decide.h"
#include "core/algo/refund.h"
#include "ngx/metrics/metrics.h"

#include <signal.h>

namespace {

rl::Holders& holders_of(rl::Slot* slot) { return *reinterpret_cast<rl::Holders*>(slot + 1); }

bool process_alive(int32_t pid) {
    if (pid == static_cast<int32_t>(ngx_pid)) return true;
    return kill(static_cast<pid_t>(pid), 0) == 0 || ngx_errno != ESRCH;
}

void count_in_flight(const rl_result_t& res, ngx_atomic_int_t delta) {
    if (rl_metrics_zone_t* m = res.applied->zone->metrics) rl_metrics_add(&m->in_flight, delta);
}

// The slots of workers that are gone come back (zone locked). Logged under the lock: it
// happens once per worker that died holding slots of the key.
void reap(rl_result_t& res, rl::Slot* slot) {
    int64_t freed = rl::holders_reap(holders_of(slot), process_alive);
    if (freed == 0) return;
    slot->state.a = slot->state.a > freed ? slot->state.a - freed : 0;
    count_in_flight(res, -static_cast<ngx_atomic_int_t>(freed));
    ngx_log_error(NGX_LOG_WARN, ngx_cycle->log, 0,
                  "ratelimit zone \"%V\": %L in-flight slots of a worker that exited holding them are taken back",
                  &res.applied->zone->name, freed);
}

rl::Decision conc_decide(rl_result_t& res, rl::Slot* slot, int64_t now) {
    rl::Decision d = rl::decide(slot->state, *res.policy, now, res.cost);
    if (d.allowed || d.retry_after_us == rl::kNever) return d;
    reap(res, slot);
    return rl::decide(slot->state, *res.policy, now, res.cost);
}

constexpr uint8_t kUnrecorded = 128;  // rl_result_t::flags: its slots are counted, not recorded among the holders

void conc_commit(rl_result_t& res, rl::Slot* slot) {
    slot->state = res.decision.next;
    auto n = static_cast<int32_t>(res.cost);
    rl::Holders& hs = holders_of(slot);
    // With every entry held by live workers, the slot is counted but cannot be reclaimed if
    // this worker dies: only with more than rl::kHolders workers on one key at once.
    res.flags &= ~kUnrecorded;
    if (!rl::holders_add(hs, static_cast<int32_t>(ngx_pid), n)) {
        reap(res, slot);
        if (!rl::holders_add(hs, static_cast<int32_t>(ngx_pid), n)) res.flags |= kUnrecorded;
    }
    count_in_flight(res, n);
}

void conc_refund(rl_result_t& res, rl::Slot* slot, int64_t now) {
    // What this worker's entry still holds of them: the slots it no longer holds (taken back
    // by a reap) are not taken a second time from the ones others hold.
    int32_t held = rl::holders_remove(holders_of(slot), static_cast<int32_t>(ngx_pid), static_cast<int32_t>(res.cost));
    int64_t back = (res.flags & kUnrecorded) ? res.cost : held;
    rl::refund(slot->state, nullptr, *res.policy, now, res.at, back);
    count_in_flight(res, -static_cast<ngx_atomic_int_t>(res.cost));
    res.decision = rl::decide(slot->state, *res.policy, now, 0);
}

// The key's state is gone (reset, dropped): its new life holds none of the request's slots,
// but the gauge counted the request until its end.
void conc_gone(rl_result_t& res) { count_in_flight(res, -static_cast<ngx_atomic_int_t>(res.cost)); }

constexpr rl_store_t conc_store() {
    rl_store_t s{};
    s.name = "in-flight";
    s.id = RL_STORE_ID_CONC;
    s.key_bytes = sizeof(rl::Holders);
    s.decide = conc_decide;
    s.commit = conc_commit;
    s.refund = conc_refund;
    s.gone = conc_gone;
    return s;
}

}  // namespace

const rl_store_t rl_conc_store = conc_store();

void rl_conc_release(rl_ctx_t* ctx) noexcept {
    rl_result_t** list = rl_ctx_list(ctx);
    ngx_uint_t m = 0;
    for (ngx_uint_t i = 0; i < ctx->nresults; i++) {
        rl_result_t& res = ctx->results[i];
        if (res.consumed && rl_store_of(res) == &rl_conc_store && (res.store == RL_STORE_SHM || res.store == RL_STORE_LOCAL)) {
            list[m++] = &res;
        }
    }
    if (m > 0) rl_store_refund_local(list, m, rl_ctx_scratch(ctx));
}
