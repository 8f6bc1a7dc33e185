// Types shared by the module's nginx-facing files.
#pragma once

#include "ngx_include.h"

#include "core/decide.h"
#include "core/key_hash.h"
#include "core/slot_table.h"

extern "C" ngx_module_t ngx_http_ratelimit_module;

// One ratelimit_zone: its policy and its shared-memory table (shm_zone->data).
struct rl_zone_t {
    ngx_str_t name;
    ngx_http_complex_value_t key;
    rl::Policy policy;           // as declared; policy.algo is meaningful only when algo_set
    bool algo_set;
    bool burst_set;
    bool uses_log;               // some location applies this zone with the log algorithm
    ngx_shm_zone_t* shm_zone;
    ngx_slab_pool_t* shpool;     // its mutex serialises every access to the table
    void* block;                 // the table's memory inside the zone
    size_t block_bytes;
    rl::TableHeader* table;
};

// One `ratelimit` line as written.
struct rl_limit_t {
    ngx_shm_zone_t* shm_zone;
    int64_t burst;
    bool burst_set;
    int64_t quantity;                       // used when quantity_cv is null
    ngx_http_complex_value_t* quantity_cv;  // quantity=$variable
    u_char* file;                           // where the line is, for errors found at merge
    ngx_uint_t line;
};

// A `ratelimit` line as it applies at one level: the zone's policy under that level's
// algorithm and the line's burst, finished once at configuration time.
struct rl_applied_t {
    rl_zone_t* zone;
    const rl_limit_t* limit;
    rl::Policy policy;
};

struct rl_loc_conf_t {
    ngx_array_t* limits;   // of rl_limit_t, as written (inherited like limit_req's)
    ngx_array_t* applied;  // of rl_applied_t, built at merge; null when no limit applies
    ngx_uint_t algo;       // rl::Algo
    ngx_uint_t status;
    ngx_uint_t headers;    // RL_HEADERS_*
    ngx_flag_t dry_run;
    ngx_uint_t log_level;
};

enum {
    RL_HEADERS_OFF = 0,
    RL_HEADERS_ON = 1,      // RateLimit-Policy and RateLimit
    RL_HEADERS_LEGACY = 2,  // X-RateLimit-*
    RL_HEADERS_ALL = 3,
};

// The verdict of one applied limit on one request.
struct rl_result_t {
    const rl_applied_t* applied;
    rl::KeyHash hash;
    int64_t cost;
    rl::Decision decision;
};

enum rl_status_e {
    RL_STATUS_NONE = 0,  // no limit applied to the request
    RL_STATUS_PASSED,
    RL_STATUS_REJECTED,
    RL_STATUS_REJECTED_DRY_RUN,
    RL_STATUS_EXEMPT,    // every key was empty
};

// What the module decided for a main request; survives internal redirects.
struct rl_ctx_t {
    rl_result_t* results;
    ngx_uint_t nresults;
    ngx_int_t decider;     // index of the result that decided, -1 if none
    rl_status_e status;
    ngx_uint_t headers;    // RL_HEADERS_* of the location that decided
    int64_t retry_after_us;
    bool headers_done;
};

// access.cpp
ngx_int_t rl_access_handler(ngx_http_request_t* r) noexcept;
rl_ctx_t* rl_get_ctx(ngx_http_request_t* r) noexcept;

// zone.cpp
char* rl_zone_directive(ngx_conf_t* cf, ngx_command_t* cmd, void* conf) noexcept;
// Whether a key's log ring for `policy` fits the zone; logs the error at `where` if not.
bool rl_zone_check_log_fits(ngx_conf_t* cf, rl_zone_t* zone, const rl::Policy& policy,
                            const rl_limit_t* where) noexcept;
// Decides every result under its zone's lock, on the clock read inside the locks, and
// consumes from all of them only if all of them allow the request. Returns whether they did.
// `scratch` has room for 2 * n pointers.
bool rl_decide_all(rl_result_t* results, ngx_uint_t n, void** scratch) noexcept;

// response_headers.cpp
ngx_int_t rl_header_filter_init(ngx_conf_t* cf) noexcept;

// variables.cpp
ngx_int_t rl_add_variables(ngx_conf_t* cf) noexcept;
