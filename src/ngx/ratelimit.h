// Types shared by the module's nginx-facing files.
#pragma once

#include "ngx_include.h"

#include "core/decide.h"
#include "core/headers.h"
#include "core/key_hash.h"
#include "core/redis_command.h"
#include "core/slot_table.h"
#include "metrics.h"
#include "redis.h"

extern "C" ngx_module_t ngx_http_ratelimit_module;

inline std::string_view rl_sv(const ngx_str_t& s) { return {reinterpret_cast<const char*>(s.data), s.len}; }

// module.cpp: a configuration error that names the directive being read, as nginx's own do:
// "<message> in "<directive>" directive in <file>:<line>".
void rl_conf_error(ngx_conf_t* cf, const char* fmt, ...) noexcept;
// Refuses a name=value parameter given twice in the directive being read (from argument
// `first` on): one of the values would otherwise be dropped silently.
bool rl_no_duplicate_params(ngx_conf_t* cf, ngx_uint_t first) noexcept;

// A "name=value" directive argument: true, with `value` set, when `arg` starts with `prefix`.
inline bool rl_arg(const ngx_str_t& arg, const char* prefix, ngx_str_t& value) {
    size_t n = ngx_strlen(prefix);
    if (arg.len < n || ngx_strncmp(arg.data, prefix, n) != 0) return false;
    value.data = arg.data + n;
    value.len = arg.len - n;
    return true;
}

// One ratelimit_zone: its policy and its shared-memory table (shm_zone->data).
struct rl_zone_t {
    ngx_str_t name;
    ngx_http_complex_value_t key;
    rl::Policy policy;           // as declared; policy.algo is meaningful only when algo_set
    bool algo_set;
    bool burst_set;
    bool uses_log;               // some location applies this zone with the log algorithm
    ngx_str_t redis_name;        // redis=NAME: the state lives in Redis
    rl_redis_t* redis;
    u_char* file;                // where the zone is declared, for errors found later
    ngx_uint_t line;
    ngx_shm_zone_t* shm_zone;    // always there: with redis=, it serves ratelimit_on_error local
    ngx_slab_pool_t* shpool;     // its mutex serialises every access to the table
    void* block;                 // the table's memory inside the zone
    size_t block_bytes;
    rl::TableHeader* table;
    time_t quantity_warned;      // an invalid quantity is logged once a second (per worker)
    // Tiers (tier.cpp): rate=$variable and burst=$variable, evaluated per request; with a
    // variable rate, policy holds default_rate=.
    ngx_http_complex_value_t* rate_cv;
    ngx_http_complex_value_t* burst_cv;
    time_t tier_warned;          // an invalid rate or burst value, as quantity_warned
    rl_metrics_zone_t* metrics;  // its counters (metrics.cpp), or nullptr
    // sync=TIME (sync.h): decided in shared memory, reconciled with Redis every sync_us
    int64_t sync_us;             // 0: no sync (with redis=, a round trip per request)
    uint8_t sync_mode;           // rl_sync_mode_e
    ngx_array_t* sync_policies;  // of rl::Policy: every policy it is applied with (the engine's)
    struct rl_sync_shm_t* sync_shm;  // in the zone's block, before the table
    struct rl_sync_zone_t* sync;     // the worker's engine state (sync.cpp)
};

// One `ratelimit` line as written.
struct rl_limit_t {
    ngx_shm_zone_t* shm_zone;
    int64_t burst;
    bool burst_set;
    int64_t quantity;                       // used when quantity_cv is null
    ngx_http_complex_value_t* quantity_cv;  // quantity=$variable
    int64_t delay;                          // delay=N, or rl::kNoDelay (nodelay, the default)
    int64_t max_delay_us;                   // max_delay=TIME, 0 when none
    u_char* file;                           // where the line is, for errors found at merge
    ngx_uint_t line;
};

// A `ratelimit` line as it applies at one level: the zone's policy under that level's
// algorithm and the line's burst, finished once at configuration time.
struct rl_applied_t {
    rl_zone_t* zone;
    const rl_limit_t* limit;
    rl::Policy policy;  // with a variable rate or burst: what applies when their values do not
    bool tiered;        // its rate or burst comes from a variable: a policy per request (tier.cpp)
};

struct rl_loc_conf_t {
    ngx_array_t* limits;   // of rl_limit_t, as written (inherited like limit_req's)
    ngx_array_t* applied;  // of rl_applied_t, built at merge; null when no limit applies
    ngx_uint_t algo;       // rl::Algo
    ngx_uint_t status;
    ngx_uint_t headers;    // RL_HEADERS_*
    ngx_flag_t dry_run;
    ngx_uint_t log_level;
    ngx_uint_t on_error;   // RL_ON_ERROR_*
    ngx_str_t policy;      // RateLimit-Policy when every applied limit decides: the same for
                           // every request, so formatted once, at merge
    bool tiered;           // some applied limit is tiered: RateLimit-Policy is formatted per request
};

enum {
    RL_ON_ERROR_ALLOW = 0,  // Redis did not answer: let the request through
    RL_ON_ERROR_DENY = 1,   // ... reject it with 503
    RL_ON_ERROR_LOCAL = 2,  // ... decide it in the zone's shared memory
};

enum {
    RL_HEADERS_OFF = 0,
    RL_HEADERS_ON = 1,      // RateLimit-Policy and RateLimit
    RL_HEADERS_LEGACY = 2,  // X-RateLimit-*
    RL_HEADERS_ALL = 3,
};

// Where a result was decided.
enum rl_store_e : uint8_t {
    RL_STORE_SHM = 0,   // the zone's shared memory
    RL_STORE_REDIS,     // Redis
    RL_STORE_LOCAL,     // Redis failed; decided in the zone's shared memory (on_error local)
    RL_STORE_FAILED,    // Redis failed; not decided (on_error allow or deny)
    RL_STORE_SKIPPED,   // not asked: another limit had already rejected the request
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
    uint8_t sync;        // RL_SYNC_* flags of a sync zone's result
};

enum {
    RL_SYNC_ERROR = 1,    // decided while the zone's last reconciliation failed ($ratelimit_status ERROR)
    RL_SYNC_WAIT = 2,     // lease: its budget is empty, the request waits for a grant
    RL_SYNC_WAITED = 4,   // lease: it waited once already: decided on what came
    RL_SYNC_FAILED = 8,   // lease: the grant did not come: decided on the local fallback
    RL_SYNC_LOCAL = 16,   // lease: decided on the local fallback (limit / hosts)
    RL_SYNC_WAITED2 = 32, // lease: it waited twice (others spent the first grant): no more
    RL_SYNC_NEEDED = 64,  // lease: its cost is in its ask's `need`
    RL_SYNC_GRANTED = 128, // lease: Redis granted that need: admitted as of the grant
};

struct rl_ctx_t;

// Whether a result has a decision (headers and variables show only those).
inline bool rl_decided(const rl_result_t& res) { return res.store < RL_STORE_FAILED; }

// One call to Redis: the checks of one request that live on one server (one slot of a
// cluster), decided together, all or nothing, as one group of a batch (redis_request.cpp).
struct rl_batch_t;
struct rl_call_t {
    rl_ctx_t* ctx;
    rl_redis_t* redis;
    rl_redis_node_t* node;
    ngx_uint_t* checks;       // indices into ctx->results
    ngx_uint_t nchecks;
    rl::RedisCheck* rchecks;  // the same, as the Redis command takes them (request pool)
    ngx_queue_t queue;        // in node->queued until the end of the event-loop turn
    rl_batch_t* batch;        // while in flight
    uint16_t index;           // its group in the batch
    uint16_t slot;            // cluster: the slot of its keys
    uint8_t state;            // RL_CALL_*
    uint8_t redirects;        // MOVED / ASK / reload (NOSCRIPT, function not found) retries so far
    uint8_t solo;             // cluster: sent in a batch of its own (its slot is migrating)
    int64_t at;               // Redis's time of the decision
};

enum { RL_CALL_PENDING = 0, RL_CALL_DONE, RL_CALL_FAILED };

enum rl_status_e {
    RL_STATUS_NONE = 0,  // no limit applied to the request
    RL_STATUS_PASSED,
    RL_STATUS_REJECTED,
    RL_STATUS_REJECTED_DRY_RUN,
    RL_STATUS_EXEMPT,    // every key was empty
    RL_STATUS_ERROR,     // Redis did not answer for some limit (on_error applied)
    RL_STATUS_DELAYED,   // passed after waiting for a limit's delay= (delay.cpp)
    RL_STATUS_DELAYED_DRY_RUN,  // would have waited; passed at once
};

enum rl_phase_e : uint8_t {
    RL_PHASE_WAITING = 0,  // Redis calls in flight
    RL_PHASE_DECIDED,      // decided after waiting: the access handler returns the verdict
    RL_PHASE_RETURNED,     // verdict returned; later passes (internal redirects) are not counted
    RL_PHASE_LEASED,       // a lease wait ended: the access handler decides again
    RL_PHASE_DELAYED,      // admitted, waiting for its delay (delay.cpp)
};

// What the module decided for a main request; survives internal redirects.
struct rl_ctx_t {
    rl_result_t* results;
    ngx_uint_t nresults;
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
    rl_phase_e phase;
    ngx_int_t verdict;     // what the access handler returns
    ngx_http_request_t* r;
    rl_call_t* calls;
    ngx_uint_t ncalls;
    ngx_uint_t waiting;    // calls still in flight
    ngx_event_t timer;     // the Redis timeout
    ngx_event_t wake;      // posted: resume the request's phases
    ngx_queue_t lease;     // sync.cpp: in its zone's waiting requests (lease_waits > 0)
    ngx_uint_t lease_waits;  // lease grants it waits for
    ngx_event_t poll;      // sync.cpp: beside another worker's ask, it looks again
    bool lease_poll;
};

// access.cpp
ngx_int_t rl_access_handler(ngx_http_request_t* r) noexcept;
rl_ctx_t* rl_get_ctx(ngx_http_request_t* r) noexcept;

// access.cpp, after Redis answered (or did not): applies on_error, all-or-nothing across
// stores, and sets the verdict.
void rl_finish(rl_ctx_t* ctx, const rl_loc_conf_t* lcf) noexcept;
// access.cpp: gives back what every store consumed for the request (shared memory at once,
// Redis by a refund call).
void rl_give_back(rl_ctx_t* ctx) noexcept;

// delay.cpp
// After rl_finish admitted a request: its delay (the longest of its limits'), status and log.
void rl_delay_decide(rl_ctx_t* ctx, const rl_loc_conf_t* lcf) noexcept;
// Makes an admitted request wait ctx->delay_ms on a timer; returns what the phase handler returns.
ngx_int_t rl_delay_start(rl_ctx_t* ctx) noexcept;
// The request ends while delayed (the client closed the connection): its units go back.
void rl_delay_abandoned(rl_ctx_t* ctx) noexcept;

// redis_request.cpp
// Sends the request's Redis checks; returns the number of calls now in flight.
ngx_uint_t rl_redis_start(rl_ctx_t* ctx) noexcept;
// Gives back what the Redis calls of a rejected request consumed.
void rl_redis_refund(rl_ctx_t* ctx) noexcept;
// Stops waiting: the request is gone or timed out; late replies are dropped. Calls still
// in flight stay known until rl_redis_forget, so that rl_redis_refund can arm a refund for
// a late admission of a request that was rejected meanwhile.
void rl_redis_abandon(rl_ctx_t* ctx) noexcept;
// The request's timeout passed: logs it (rate limited) and abandons what is pending.
void rl_redis_timed_out(rl_ctx_t* ctx) noexcept;
void rl_redis_forget(rl_ctx_t* ctx) noexcept;
// access.cpp: the last call of a waiting request has an outcome; resumes the request.
void rl_redis_finished(rl_ctx_t* ctx) noexcept;
// access.cpp: the lease grants a request waited for came (or did not): it is decided again.
void rl_lease_finished(rl_ctx_t* ctx) noexcept;
// ... or it looks again (another worker's ask was in flight): its wait's timeout keeps running.
void rl_lease_again(rl_ctx_t* ctx) noexcept;

// zone.cpp
char* rl_zone_directive(ngx_conf_t* cf, ngx_command_t* cmd, void* conf) noexcept;
// Whether a key's log ring for `policy` fits the zone; logs the error at `where` if not.
bool rl_zone_check_log_fits(ngx_conf_t* cf, rl_zone_t* zone, const rl::Policy& policy,
                            const rl_limit_t* where) noexcept;
// Decides the results under their zones' locks, on the clock read inside the locks, and
// consumes from all of them only if all of them allow the request. Returns whether they did.
// `scratch` has room for 2 * n pointers.
bool rl_decide_all(rl_result_t** results, ngx_uint_t n, void** scratch) noexcept;
// Gives back what committed shared-memory results consumed.
void rl_refund_all(rl_result_t** results, ngx_uint_t n, void** scratch) noexcept;

// response_headers.cpp
ngx_int_t rl_header_filter_init(ngx_conf_t* cf) noexcept;
// A limit as RateLimit-Policy names it: zone name, quota and window (no state).
rl::HeaderItem rl_policy_item(const rl_zone_t& zone, const rl::Policy& policy) noexcept;

// module.cpp: a compiled complex value from the configuration, or nullptr (error logged).
ngx_http_complex_value_t* rl_complex_value(ngx_conf_t* cf, ngx_str_t* value) noexcept;
// access.cpp: a value from outside (a variable) that is not valid for `what` of a zone: logged at warn
// with the value sanitized, at most once a second per `stamp` (per zone and worker).
void rl_warn_value(ngx_http_request_t* r, const rl_zone_t* zone, time_t* stamp, const char* what,
                   const ngx_str_t& value, const char* outcome) noexcept;

// tier.cpp
// Whether a zone parameter's value holds variables (then it is a tier's, per request).
bool rl_tier_is_variable(ngx_str_t* value) noexcept;
// ratelimit_zone's checks of rate=$variable, default_rate= (`dflt`, or nullptr) and
// burst=$variable, after parsing; a variable rate's policy becomes the default rate.
bool rl_tier_check_zone(ngx_conf_t* cf, rl_zone_t* zone, const rl::Policy* dflt) noexcept;
// At merge: whether a limit's policy comes per request, and whether its algorithm allows it.
bool rl_tier_check_applied(ngx_conf_t* cf, rl_applied_t* applied) noexcept;
// The policy of a tiered limit for this request, finished, in `out`; or the applied one
// (default_rate, burst 0) for values that are invalid (logged) or empty.
const rl::Policy* rl_tier_policy(ngx_http_request_t* r, const rl_applied_t& applied, rl::Policy* out) noexcept;

// variables.cpp
ngx_int_t rl_add_variables(ngx_conf_t* cf) noexcept;
