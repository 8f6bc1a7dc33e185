// One ratelimit_zone: its policy, its store and its shared-memory table. Read-only once the
// configuration is loaded, but for what each worker keeps at run time (marked).
#pragma once

#include "ngx/base/conf.h"
#include "ngx/limits/frontend.h"

#include "core/algo/policy.h"
#include "core/keys/slot_table.h"

struct rl_store_t;
struct rl_redis_t;
struct rl_metrics_zone_t;
struct rl_sync_shm_t;
struct rl_sync_zone_t;
namespace rl {
struct TopKeys;
}

// The kinds of store (stores/store.h): each is its bit in a request's set of stores
// (rl_ctx_t::stores) and its room in rl_ctx_t::store_data.
enum rl_store_id_e : uint8_t {
    RL_STORE_ID_SHM = 0,          // shared memory (stores/shm.cpp)
    RL_STORE_ID_REDIS,            // Redis per request (stores/redis_request.cpp)
    RL_STORE_ID_SYNC_OPTIMISTIC,  // sync=, optimistic (sync/)
    RL_STORE_ID_SYNC_LEASE,       // sync=, lease (sync/)
    RL_STORE_ID_CONC,             // in-flight slots in shared memory (stores/conc.cpp)
    RL_STORE_IDS,
};
constexpr ngx_uint_t kRlStores = RL_STORE_IDS;

// How a zone's keys read as text (the top keys, engine/top.h): decided from key= as written.
enum rl_key_kind_e : uint8_t {
    RL_KEY_TEXT = 0,    // its bytes
    RL_KEY_ADDR,        // key=$binary_remote_addr: 4 or 16 bytes, shown as the address
    RL_KEY_PREFIX,      // key=$ratelimit_client_prefix: the address cut to a prefix, shown with its length
};

enum rl_sync_mode_e : uint8_t {
    RL_SYNC_OFF = 0,
    RL_SYNC_OPTIMISTIC,
    RL_SYNC_LEASE,
};

struct rl_zone_t {
    ngx_str_t name;
    rl_value_t* key;
    rl::Policy policy;           // as declared; policy.algo is meaningful only when algo_set
    bool algo_set;
    bool burst_set;
    bool uses_log;               // some limit applies this zone with the log algorithm
    ngx_str_t redis_name;        // redis=NAME: the state lives in Redis
    rl_redis_t* redis;
    rl_store_id_e store_id;      // where its keys' state lives and how it is decided
    rl_store_id_e local_id;      // what decides in its own table: shared memory, or in-flight slots
                                 // (also when Redis fails and ratelimit_on_error local applies)
    const rl_store_t* store;     // the stores of those ids, once the configuration is read
    const rl_store_t* local;
    // concurrency=N (policy.algo concurrency, policy.requests N, policy.period_us hold=): at
    // most N requests of a key at once (stores/conc.cpp; with redis=, stores/redis_held.cpp)
    bool concurrency;
    rl_value_t* concurrency_cv;  // concurrency=$variable; policy.requests is its default
    ngx_msec_t timeout;          // the longest a request waits for its store (Redis's timeout)
    u_char* file;                // where the zone is declared, for errors found later
    ngx_uint_t line;
    ngx_shm_zone_t* shm_zone;    // always there: with redis=, it serves ratelimit_on_error local
    ngx_slab_pool_t* shpool;     // its mutex serialises every access to the table
    void* block;                 // the table's memory inside the zone
    size_t block_bytes;
    rl::TableHeader* table;
    time_t quantity_warned;      // per worker: an invalid quantity is logged once a second
    // Tiers (tier.cpp): rate=$variable and burst=$variable, evaluated per request; with a
    // variable rate, policy holds default_rate=.
    rl_value_t* rate_cv;
    rl_value_t* burst_cv;
    time_t tier_warned;          // per worker: an invalid rate or burst value, as quantity_warned
    time_t settle_warned;        // per worker: an invalid settle value, as quantity_warned
    time_t reset_logged;         // per worker: the API's resets are logged once a second
    ngx_uint_t resets_unlogged;  //   and those of that second counted
    time_t drop_logged;          // per worker: datagrams dropped (stream) are logged once a second
    ngx_uint_t drops_unlogged;   //   with the drops since the last line
    rl_metrics_zone_t* metrics;  // its counters (engine/metrics_zone.cpp), or nullptr
    // sync=TIME (sync/sync.h): decided in shared memory, reconciled with Redis every sync_us
    int64_t sync_us;             // 0: no sync (with redis=, a round trip per request)
    rl_sync_mode_e sync_mode;
    ngx_array_t* sync_policies;  // of rl::Policy: every policy it is applied with (the sync engine's)
    rl_sync_shm_t* sync_shm;     // the store's area: in the zone's block, before the table
    rl_sync_zone_t* sync;        // per worker: its sync engine (sync/round.cpp)
    ngx_array_t* policies;       // of rl::Policy: each distinct policy a `ratelimit` line applies it
                                 // with, in configuration order; nullptr if none (the API's)
    // period=day|week|month|year (policy.calendar): the windows' time zone (timezone=, from
    // rl::find_time_zone), nullptr for UTC
    const void* tz;
    // top=K (engine/top.h): the keys it rejects most, counted in its shared memory, at the end
    // of its block (stores/table.cpp)
    uint32_t top_k;              // 0: off
    rl::TopKeys* top;            // the summary, nullptr when off
    size_t top_bytes;            // the room kept for it there (a reload keeps what the running workers use)
    rl_key_kind_e key_kind;
    uint8_t prefix_v4;           // RL_KEY_PREFIX: the prefix lengths where the zone applies (the
    uint8_t prefix_v6;           // front end's, engine/top.h): 0 none seen, kRlPrefixMixed not one
};

constexpr uint8_t kRlPrefixMixed = 255;

// top=: the largest K, and the default (off in zones under kRlTopDefaultMinSize: it would take
// more than 6.5% of them).
constexpr uint32_t kRlTopMaxK = 4096;
constexpr uint32_t kRlTopDefaultK = 16;
constexpr size_t kRlTopDefaultMinSize = 256 * 1024;

// Bytes of a zone's shared memory its table can use: the slab pool keeps a header and a page
// descriptor per page.
inline size_t rl_zone_usable_bytes(size_t zone_size) {
    size_t per_page = ngx_pagesize + sizeof(ngx_slab_page_t);
    size_t pages = (zone_size - sizeof(ngx_slab_pool_t)) / per_page;
    return pages > 1 ? (pages - 1) * ngx_pagesize : 0;  // one page lost to alignment at most
}

struct rl_engine_conf_t;
struct rl_limit_t;

// ratelimit_zone (zone.cpp), in the block of `ecf`: the zone, checked, among ecf's zones.
char* rl_zone_parse(ngx_conf_t* cf, rl_engine_conf_t* ecf) noexcept;
// block=TIME of a zone or a `ratelimit` line: from 1s to 1 year (rl::parse_duration).
bool rl_parse_block(std::string_view v, int64_t& us) noexcept;
// Whether a zone can keep a block (refused at `where`, or at the directive when null).
bool rl_zone_check_block(ngx_conf_t* cf, const rl_zone_t* zone, const rl_limit_t* where) noexcept;
// The log algorithm for `zone` under `policy`, checked once for the zone's own algo= and for
// each `ratelimit` line that applies it (`where`): refused with sync= (hosts add counts, not
// every request's time) and with a variable rate (its memory per key depends on the rate), and
// its ring must fit the zone. Errors name the directive being read, or the line `where`.
bool rl_zone_check_log(ngx_conf_t* cf, rl_zone_t* zone, const rl::Policy& policy, const rl_limit_t* where) noexcept;
// The zone `name` of `zones` (rl_zone_t*), or nullptr.
rl_zone_t* rl_zone_find(const ngx_array_t* zones, std::string_view name) noexcept;
// Once the block is read: the zone's redis= names one of `redis` (rl_redis_t*).
bool rl_zone_resolve(ngx_conf_t* cf, rl_zone_t* zone, const ngx_array_t* redis) noexcept;
