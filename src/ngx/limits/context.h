// What the engine keeps for one thing being limited (an HTTP request): a result per limit
// that applies to it and the state of its decision. Made by engine/ctx.cpp, decided by
// engine/decide.cpp through the stores; the front end that made it reads the verdict.
#pragma once

#include "ngx/limits/limit.h"

#include "core/algo/decision.h"
#include "core/keys/key_hash.h"
#include "core/keys/slot_table.h"

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
    rl::SlotLife life;   // the life of its key's slot it was committed in (shared memory): its
                         // give-back and settle go to that life only (stores/pass.cpp)
    int64_t delta;       // a settle: what it charges (> 0) or gives back (< 0)
    uint8_t flags;       // RL_RES_*, and its store's own
    ngx_str_t key;       // the evaluated key (the front end's memory, as long as the subject): the top keys' text
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
    RL_STATUS_DELAYED,   // passed after waiting for a limit's delay= (engine/delay.cpp)
    RL_STATUS_DELAYED_DRY_RUN,  // would have waited; passed at once
    RL_STATUS_BLOCKED,   // rejected by a live block after abuse (rl::kBlockLive; not in dry run)
};

enum rl_phase_e : uint8_t {
    RL_PHASE_WAITING = 0,  // its stores decide it away from shared memory (Redis)
    RL_PHASE_REFILLING,    // its stores get what some of its limits lack (a lease's grant)
    RL_PHASE_DECIDED,      // decided after waiting: the front end takes the verdict
    RL_PHASE_RETURNED,     // verdict taken; later passes (internal redirects) are not counted
    RL_PHASE_AGAIN,        // refilled: the front end has it decided again
    RL_PHASE_DELAYED,      // admitted, waiting for its delay (the front end's timer)
};

struct rl_ctx_t;
// A store's wait for the request is over (ended), or it asks for a new decision within the
// same deadline (stores/store.h): called once per store that waited.
typedef void (*rl_resume_pt)(rl_ctx_t* ctx, bool ended);

struct rl_ctx_t {
    rl_result_t* results;
    ngx_uint_t nresults;
    ngx_uint_t napplied;   // limits applied where it is decided (a result each, unless its key is empty)
    ngx_uint_t stores;     // the stores of its results (rl_store_id_e bits)
    bool slots;            // some result may hold in-flight slots (rl_scope_t::slots)
    const rl_scope_t* scope;
    // The verdict (engine/decide.cpp)
    rl_status_e status;
    ngx_int_t decider;     // index of the result that decided, -1 if none
    int64_t retry_after_us;
    bool rejected;         // a limit rejected it (in dry run too)
    bool denied;           // Redis failed and ratelimit_on_error deny applies
    bool admitted;         // its limits admitted it and what they took stands (not rejected, not denied)
    int64_t delay_ms;      // the longest delay of the limits that admitted it (engine/delay.cpp)
    ngx_int_t delayer;     // the result with that delay, -1 if none
    rl_phase_e phase;
    // What is being limited: the front end's
    const rl_frontend_t* fe;
    void* subject;         // the front end's own (an ngx_http_request_t)
    ngx_pool_t* pool;      // lives as long as the subject
    ngx_log_t* log;
    // The waits
    rl_resume_pt resume;   // the engine's: a store's wait is over
    ngx_uint_t waiting;    // stores whose wait is not over
    ngx_event_t timer;     // the longest the request waits for its stores (its handler, when
                           // a deadline list keeps the deadline instead: engine/deadline.h)
    ngx_queue_t deadline;  // in that list, while deadline_list is set
    void* deadline_list;
    ngx_msec_t deadline_at;
    ngx_event_t wake;      // posted: the front end resumes it
    void* store_data[kRlStores];  // what each store keeps for the request while it waits
};

// The front end's part of the context: `front_bytes` of rl_ctx_create, right after it.
inline void* rl_ctx_front(rl_ctx_t* ctx) { return ctx + 1; }
inline const void* rl_ctx_front(const rl_ctx_t* ctx) { return ctx + 1; }
// Scratch room for the shared-memory pass: 2 * napplied pointers, then a result list of as many.
inline void** rl_ctx_scratch(rl_ctx_t* ctx) { return reinterpret_cast<void**>(ctx->results + ctx->napplied); }
inline rl_result_t** rl_ctx_list(rl_ctx_t* ctx) {
    return reinterpret_cast<rl_result_t**>(rl_ctx_scratch(ctx) + 2 * ctx->napplied);
}
// A tiered scope's per-request policies, after the list.
inline rl::Policy* rl_ctx_policies(rl_ctx_t* ctx) {
    return reinterpret_cast<rl::Policy*>(rl_ctx_list(ctx) + ctx->napplied);
}

// A value from outside (a variable) that is not valid for `what` of a zone: logged at warn
// with the value sanitized, at most once a second per `stamp` (per zone and worker).
void rl_warn_value(ngx_log_t* log, const rl_zone_t* zone, time_t* stamp, const char* what, const ngx_str_t& value,
                   const char* outcome) noexcept;
