// `ratelimit` lines: as written, as they apply at one level (a location, a server), and the
// level itself: what the engine reads of the front end's configuration there.
#pragma once

#include "ngx/limits/zone.h"

// One `ratelimit` line as written.
struct rl_limit_t {
    ngx_shm_zone_t* shm_zone;
    int64_t burst;
    bool burst_set;
    int64_t quantity;                       // used when quantity_cv is null
    rl_value_t* quantity_cv;                // quantity=$variable
    bool quantity_set;
    int64_t delay;                          // delay=N, or rl::kNoDelay (nodelay, the default)
    bool nodelay;                           // written out
    int64_t max_delay_us;                   // max_delay=TIME, 0 when none
    int64_t block_us;                       // block=TIME (overrides the zone's), 0 when none
    bool settle_set;                        // settle=VALUE: the real cost, at the end (http/settle.cpp)
    int64_t settle;                         //   a number, used when settle_cv is null
    rl_value_t* settle_cv;                  //   with variables
    ngx_int_t settle_var;                   //   one variable alone: its index (else NGX_ERROR)
    uint8_t at;                             // the stage it applies at: a front end's own (stream's
                                            // at=accept|preread|datagram); 0 in http
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

// A level where limits apply (an http location): the lines, what they became at merge and how
// their verdict is given. The front end's configuration of the level holds one.
struct rl_scope_t {
    uint8_t at;            // the lines it applies: those of this stage (rl_limit_t::at)
    uint8_t counts;        // the zones' counters its verdicts add to (RL_COUNT_*)
    ngx_array_t* limits;   // of rl_limit_t, as written (inherited like limit_req's)
    ngx_array_t* applied;  // of rl_applied_t, built at merge; null when no limit applies
    ngx_uint_t stores;     // the stores of its applied limits, as a set of rl_store_id_e bits
    bool slots;            // some applied zone may hold in-flight slots in shared memory (concurrency)
    bool tiered;           // some applied limit is tiered: its policy differs per request
    ngx_uint_t algo;       // rl::Algo: ratelimit_algo
    ngx_flag_t dry_run;
    ngx_uint_t log_level;
    ngx_uint_t on_error;   // RL_ON_ERROR_*
};

enum {
    RL_COUNT_REQUESTS = 0,  // requests (http), connections and sessions (stream)
    RL_COUNT_DATAGRAMS,     // datagrams of a session (stream, at=datagram)
};

enum {
    RL_ON_ERROR_ALLOW = 0,  // Redis did not answer: let the request through
    RL_ON_ERROR_DENY = 1,   // ... reject it with 503
    RL_ON_ERROR_LOCAL = 2,  // ... decide it in the zone's shared memory
};

struct rl_engine_conf_t;

// A parameter of a front end's own on a `ratelimit` line (settle= in http).
typedef rl_param_e (*rl_limit_param_pt)(ngx_conf_t* cf, rl_limit_t* limit, ngx_str_t& arg);

// ratelimit zone=NAME [burst=N] [quantity=N|$variable] [delay=N | nodelay] [max_delay=TIME]
// [block=TIME], and the front end's own parameters (`more`): the line, at the level `scope`.
char* rl_limit_parse(ngx_conf_t* cf, rl_engine_conf_t* ecf, rl_scope_t* scope, rl_limit_param_pt more) noexcept;
// A new level's settings, unset.
void rl_scope_init(rl_scope_t* scope) noexcept;
// At merge (applied.cpp): unset settings from the parent level, then the level's lines turned
// into applied limits: each zone's policy under the level's algorithm and the line's burst,
// checked and finished once, here.
bool rl_scope_merge(ngx_conf_t* cf, rl_scope_t* conf, const rl_scope_t* prev) noexcept;
