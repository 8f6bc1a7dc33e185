// The module's configuration: what the directives build (zones, limits, locations) and the
// helpers every directive handler uses. Read-only once the configuration is loaded.
#pragma once

#include "ngx/ngx_include.h"

#include "core/algo/policy.h"
#include "core/keys/slot_table.h"

#include <string_view>

extern "C" ngx_module_t ngx_http_ratelimit_module;

struct rl_store_t;
struct rl_redis_t;
struct rl_metrics_zone_t;
struct rl_sync_shm_t;
struct rl_sync_zone_t;

inline std::string_view rl_sv(const ngx_str_t& s) { return {reinterpret_cast<const char*>(s.data), s.len}; }

// module.cpp: a configuration error that names the directive being read, as nginx's own do:
// "<message> in "<directive>" directive in <file>:<line>". Returns NGX_CONF_ERROR, so that a
// handler ends with `return rl_conf_error(...)`.
char* rl_conf_error(ngx_conf_t* cf, const char* fmt, ...) noexcept;
// The same for a line read earlier (found wrong at merge or when the http block ends): the
// message names the directive, file and line given.
void rl_conf_error_at(ngx_conf_t* cf, const char* directive, const u_char* file, ngx_uint_t line, const char* fmt,
                      ...) noexcept;
// Refuses a name=value parameter given twice in the directive being read (from argument
// `first` on): one of the values would otherwise be dropped silently.
bool rl_no_duplicate_params(ngx_conf_t* cf, ngx_uint_t first) noexcept;
// A compiled complex value from the configuration, or nullptr (error logged).
ngx_http_complex_value_t* rl_complex_value(ngx_conf_t* cf, ngx_str_t* value) noexcept;

// A "name=value" directive argument: true, with `value` set, when `arg` starts with `prefix`.
inline bool rl_arg(const ngx_str_t& arg, const char* prefix, ngx_str_t& value) {
    size_t n = ngx_strlen(prefix);
    if (arg.len < n || ngx_strncmp(arg.data, prefix, n) != 0) return false;
    value.data = arg.data + n;
    value.len = arg.len - n;
    return true;
}

enum rl_sync_mode_e : uint8_t {
    RL_SYNC_OFF = 0,
    RL_SYNC_OPTIMISTIC,
    RL_SYNC_LEASE,
};

// One ratelimit_zone: its policy, its store and its shared-memory table (shm_zone->data).
struct rl_zone_t {
    ngx_str_t name;
    ngx_http_complex_value_t key;
    rl::Policy policy;           // as declared; policy.algo is meaningful only when algo_set
    bool algo_set;
    bool burst_set;
    bool uses_log;               // some location applies this zone with the log algorithm
    ngx_str_t redis_name;        // redis=NAME: the state lives in Redis
    rl_redis_t* redis;
    const rl_store_t* store;     // where its keys' state lives and how it is decided (store.h)
    const rl_store_t* local;     // what decides in its own table: shared memory, or in-flight slots
                                 // (also when Redis fails and ratelimit_on_error local applies)
    // concurrency=N (policy.algo concurrency, policy.requests N, policy.period_us hold=): at
    // most N requests of a key at once (store_conc.cpp; with redis=, redis/held.cpp)
    bool concurrency;
    ngx_http_complex_value_t* concurrency_cv;  // concurrency=$variable; policy.requests is its default
    ngx_msec_t timeout;          // the longest a request waits for its store (Redis's timeout)
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
    time_t settle_warned;        // an invalid settle value, as quantity_warned
    rl_metrics_zone_t* metrics;  // its counters (metrics.cpp), or nullptr
    // sync=TIME (sync/sync.h): decided in shared memory, reconciled with Redis every sync_us
    int64_t sync_us;             // 0: no sync (with redis=, a round trip per request)
    rl_sync_mode_e sync_mode;
    ngx_array_t* sync_policies;  // of rl::Policy: every policy it is applied with (the engine's)
    rl_sync_shm_t* sync_shm;     // the store's area: in the zone's block, before the table
    rl_sync_zone_t* sync;        // the worker's engine state (sync/round.cpp)
    ngx_array_t* policies;       // of rl::Policy: each distinct policy a `ratelimit` line applies it
                                 // with (finished), in configuration order; nullptr if none (api.cpp)
    // period=day|week|month|year (policy.calendar): the windows' time zone (timezone=, from
    // rl::find_time_zone), nullptr for UTC
    const void* tz;
};

// One `ratelimit` line as written.
struct rl_limit_t {
    ngx_shm_zone_t* shm_zone;
    int64_t burst;
    bool burst_set;
    int64_t quantity;                       // used when quantity_cv is null
    ngx_http_complex_value_t* quantity_cv;  // quantity=$variable
    bool quantity_set;
    int64_t delay;                          // delay=N, or rl::kNoDelay (nodelay, the default)
    bool nodelay;                           // written out
    int64_t max_delay_us;                   // max_delay=TIME, 0 when none
    int64_t block_us;                       // block=TIME (overrides the zone's), 0 when none
    bool settle_set;                        // settle=VALUE: the request's real cost, at its end (settle.cpp)
    int64_t settle;                         //   a number, used when settle_cv is null
    ngx_http_complex_value_t* settle_cv;    //   with variables
    ngx_int_t settle_var;                   //   one variable alone: its index (else NGX_ERROR)
    u_char* file;                           // where the line is, for errors found at merge
    ngx_uint_t line;
};

// A `ratelimit` line as it applies at one level: the zone's policy under that level's
// algorithm and the line's burst, finished once at configuration time.
struct rl_applied_t {
    rl_zone_t* zone;
    const rl_limit_t* limit;
    rl::Policy policy;  // with a variable rate or burst: what applies when their values do not
    rl::Policy debt;    // with settle=: the policy's debt policy (core/algo/settle.h), found once
    bool tiered;        // its rate or burst comes from a variable: a policy per request (tier.cpp)
};

struct rl_loc_conf_t {
    ngx_array_t* limits;   // of rl_limit_t, as written (inherited like limit_req's)
    ngx_array_t* applied;  // of rl_applied_t, built at merge; null when no limit applies
    ngx_uint_t stores;     // the stores of its applied limits, as a set of rl_store_t::index bits
    bool slots;            // some applied zone may hold in-flight slots in shared memory (concurrency)
    ngx_uint_t algo;       // rl::Algo
    ngx_uint_t status;
    ngx_uint_t headers;    // RL_HEADERS_*
    ngx_flag_t dry_run;
    ngx_uint_t log_level;
    ngx_uint_t on_error;   // RL_ON_ERROR_*
    ngx_str_t policy;      // RateLimit-Policy when every applied limit decides: the same for
                           // every request, so formatted once, at merge
    bool tiered;           // some applied limit is tiered: RateLimit-Policy is formatted per request
    ngx_uint_t prefix_v4;  // ratelimit_client_prefix: $ratelimit_client_prefix's lengths, in bits
    ngx_uint_t prefix_v6;  // (set together: prefix_v4 unset means the directive is not here)
    ngx_flag_t api_write;  // ratelimit_api write=on: DELETE is allowed there (api.cpp)
};

struct rl_main_conf_t {
    ngx_array_t redis;  // of rl_redis_t*
    ngx_array_t zones;  // of rl_zone_t*, to resolve their redis= once the http block is read
    bool settles;       // some `ratelimit` line has settle=: the log phase has work (settle.cpp)
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
