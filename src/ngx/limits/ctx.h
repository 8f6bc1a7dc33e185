// What the module keeps for one main request: each applied limit's result and the request's
// context, which survives internal redirects (request.cpp).
#pragma once

#include "ngx/limits/conf.h"

#include "core/algo/decide.h"
#include "core/keys/key_hash.h"

// Where a result was decided.
enum rl_store_e : uint8_t {
    RL_STORE_SHM = 0,   // in the zone's shared memory (a shared-memory or sync zone)
    RL_STORE_REDIS,     // by Redis, per request
    RL_STORE_LOCAL,     // Redis failed; decided in the zone's shared memory (on_error local)
    RL_STORE_FAILED,    // Redis failed; not decided (on_error allow or deny)
    RL_STORE_SKIPPED,   // not asked: another limit had already rejected the request
};

// A result's flags: the two low bits mean the same in every store, the others are its store's.
enum {
    RL_RES_WAITS = 1,   // its store cannot decide it yet: the request waits for its refill (store.h)
    RL_RES_ERROR = 2,   // decided while its store's reconciliation failed ($ratelimit_status ERROR)
};

// The verdict of one applied limit on one request.
struct rl_result_t {
    const rl_applied_t* applied;
    const rl::Policy* policy;  // the policy that applied to this request: applied->policy, or a tier's
    rl::KeyHash hash;
    int64_t cost;
    int64_t at;          // when it was decided, on its store's clock: a refund needs it
    rl::Decision decision;
    rl_store_e store;
    bool consumed;       // its admission was committed: refund it if the request is rejected
    int64_t delta;       // settle.cpp: what its settle charges (> 0) or gives back (< 0)
    uint8_t flags;       // RL_RES_*, and its store's own
};

// Whether a result has a decision (headers and variables show only those).
inline bool rl_decided(const rl_result_t& res) { return res.store < RL_STORE_FAILED; }

enum rl_status_e {
    RL_STATUS_NONE = 0,  // no limit applied to the request
    RL_STATUS_PASSED,
    RL_STATUS_REJECTED,
    RL_STATUS_REJECTED_DRY_RUN,
    RL_STATUS_EXEMPT,    // every key was empty
    RL_STATUS_ERROR,     // Redis did not answer for some limit (on_error applied)
    RL_STATUS_DELAYED,   // passed after waiting for a limit's delay= (delay.cpp)
    RL_STATUS_DELAYED_DRY_RUN,  // would have waited; passed at once
    RL_STATUS_BLOCKED,   // rejected by a live block after abuse (rl::kBlockLive; not in dry run)
};

enum rl_phase_e : uint8_t {
    RL_PHASE_WAITING = 0,  // its stores decide it away from shared memory (Redis)
    RL_PHASE_REFILLING,    // its stores get what some of its limits lack (a lease's grant)
    RL_PHASE_DECIDED,      // decided after waiting: the access handler returns the verdict
    RL_PHASE_RETURNED,     // verdict returned; later passes (internal redirects) are not counted
    RL_PHASE_AGAIN,        // refilled: the access handler decides again
    RL_PHASE_DELAYED,      // admitted, waiting for its delay (delay.cpp)
};

constexpr ngx_uint_t kRlStores = 5;  // kinds of store (rl_store_t::index)

struct rl_ctx_t;
// A store's wait for the request is over (ended), or it asks for a new decision within the
// same deadline (store.h): called once per store that waited.
typedef void (*rl_resume_pt)(rl_ctx_t* ctx, bool ended);

// What the module decided for a main request; survives internal redirects.
struct rl_ctx_t {
    rl_result_t* results;
    ngx_uint_t nresults;
    ngx_uint_t stores;     // the stores of its results (rl_store_t::index bits)
    bool slots;            // some result may hold in-flight slots (rl_loc_conf_t::slots)
    ngx_int_t decider;     // index of the result that decided, -1 if none
    rl_status_e status;
    ngx_uint_t headers;    // RL_HEADERS_* of the location that decided
    const ngx_str_t* policy;  // its precomputed RateLimit-Policy (rl_loc_conf_t::policy), or
                              // nullptr when tiers make it differ per request
    ngx_uint_t napplied;   // limits applied there (a decided result each, or the policy differs)
    int64_t retry_after_us;
    int64_t delay_ms;      // the longest delay of the limits that admitted it ($ratelimit_delay)
    bool delaying;         // the request waits delay_ms before its next phase
    bool headers_done;
    bool settled;          // settle.cpp: the request's settles are done (once)
    bool admitted;         // its limits admitted it and what they took stands (not rejected, not denied)
    int64_t settle;        // $ratelimit_settled: the first settle= value taken, -1 if none
    rl_phase_e phase;
    ngx_int_t verdict;     // what the access handler returns
    ngx_http_request_t* r;
    rl_resume_pt resume;   // access.cpp's: a store's wait is over
    ngx_uint_t waiting;    // stores whose wait is not over
    ngx_event_t timer;     // the longest the request waits for its stores
    ngx_event_t wake;      // posted: resume the request's phases
    void* store_data[kRlStores];  // what each store keeps for the request while it waits
};

// request.cpp
// A new request's context, with a result per applied limit whose key is not empty (its cost and
// policy evaluated); results, scratch and tier policies in one allocation, held by a pool
// cleanup that ends every store's wait when the request goes away. nullptr on error.
rl_ctx_t* rl_ctx_create(ngx_http_request_t* r, const rl_loc_conf_t* lcf) noexcept;
// The pool cleanup that holds the context.
void rl_ctx_cleanup(void* data) noexcept;
// The main request's context, found again after an internal redirect wiped the module's.
inline rl_ctx_t* rl_get_ctx(ngx_http_request_t* r) {
    ngx_http_request_t* m = r->main;
    auto* ctx = static_cast<rl_ctx_t*>(ngx_http_get_module_ctx(m, ngx_http_ratelimit_module));
    if (ctx != nullptr) return ctx;
    for (ngx_pool_cleanup_t* cln = m->pool->cleanup; cln; cln = cln->next) {
        if (cln->handler == rl_ctx_cleanup) {
            ctx = static_cast<rl_ctx_t*>(cln->data);
            ngx_http_set_ctx(m, ctx, ngx_http_ratelimit_module);
            return ctx;
        }
    }
    return nullptr;
}
// Scratch room for the shared-memory pass: 2 * nresults pointers, then a result list of as many.
inline void** rl_ctx_scratch(rl_ctx_t* ctx) { return reinterpret_cast<void**>(ctx->results + ctx->napplied); }
inline rl_result_t** rl_ctx_list(rl_ctx_t* ctx) {
    return reinterpret_cast<rl_result_t**>(rl_ctx_scratch(ctx) + 2 * ctx->napplied);
}
// A tiered location's per-request policies, after the list.
inline rl::Policy* rl_ctx_policies(rl_ctx_t* ctx) {
    return reinterpret_cast<rl::Policy*>(rl_ctx_list(ctx) + ctx->napplied);
}
// A value from outside (a variable) that is not valid for `what` of a zone: logged at warn
// with the value sanitized, at most once a second per `stamp` (per zone and worker).
void rl_warn_value(ngx_http_request_t* r, const rl_zone_t* zone, time_t* stamp, const char* what,
                   const ngx_str_t& value, const char* outcome) noexcept;
