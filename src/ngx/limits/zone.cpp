// ratelimit_zone: its parameters read into a zone_args_t, then checked together, then the zone
// and its shared memory (laid out by stores/table.cpp once the configuration is read).
#include "ngx/limits/zone.h"

#include "ngx/limits/conf.h"
#include "ngx/limits/limit.h"
#include "ngx/limits/tier.h"
#include "ngx/redis/redis.h"

#include "core/algo/calendar.h"
#include "core/algo/concurrency.h"
#include "core/algo/decide.h"
#include "core/keys/top_keys.h"
#include "core/text/rate.h"
#include "core/wire/redis_command.h"

namespace {

constexpr size_t kDefaultZoneSize = 1024 * 1024;
constexpr int64_t kMinSyncUs = 10000;
// hold=: how long Redis keeps a slot its host no longer refreshes (every hold / 3).
constexpr int64_t kDefaultHoldUs = 30000000;
constexpr int64_t kMinHoldUs = 1000000;
constexpr int64_t kMaxHoldUs = 86400000000;

// What the parameters said, beyond what goes into the zone itself.
struct zone_args_t {
    bool have_key, have_rate, have_requests, have_period, have_default;
    size_t size;
    rl::Policy dflt;             // default_rate=
    ngx_str_t sync_arg;          // sync=..., as written
    ngx_str_t tz_arg;            // timezone=..., as written
    bool mode_set;               // sync_mode=
    const char* rate_param;      // a rate's parameter, refused with concurrency=
    bool have_hold;
    int64_t default_concurrency;
    int64_t hold_us;
    ngx_str_t top_arg;           // top=K, as written
};

// A number or a variable (a tier's): a variable is compiled into *cv.
enum var_or_e { RL_VAR = 0, RL_NUMBER, RL_BAD };
var_or_e var_or_int(ngx_conf_t* cf, const rl_frontend_t* fe, ngx_str_t& v, rl_value_t** cv, int64_t lo, int64_t hi,
                    int64_t& out) {
    if (rl_has_variables(v)) {
        *cv = fe->compile(cf, &v);
        return *cv != nullptr ? RL_VAR : RL_BAD;
    }
    return rl::parse_int(rl_sv(v), lo, hi, out) ? RL_NUMBER : RL_BAD;
}

// The parameters of a rate (or of a concurrency).
rl_param_e read_limit_param(ngx_conf_t* cf, const rl_frontend_t* fe, rl_zone_t* zone, zone_args_t& z, ngx_str_t& a) {
    ngx_str_t v;
    if (rl_arg(a, "concurrency=", v)) {
        zone->concurrency = true;
        if (var_or_int(cf, fe, v, &zone->concurrency_cv, 1, rl::kMaxConcurrency, zone->policy.requests) == RL_BAD) {
            if (rl_has_variables(v)) return RL_PARAM_ERROR;
            return rl_param_error(cf, "invalid concurrency \"%V\", it must be from 1 to %L", &a, rl::kMaxConcurrency);
        }
    } else if (rl_arg(a, "default_concurrency=", v)) {
        if (!rl::parse_int(rl_sv(v), 1, rl::kMaxConcurrency, z.default_concurrency)) {
            return rl_param_error(cf, "invalid default_concurrency \"%V\", it must be from 1 to %L", &a,
                                 rl::kMaxConcurrency);
        }
    } else if (rl_arg(a, "hold=", v)) {
        if (!rl::parse_duration(rl_sv(v), z.hold_us) || z.hold_us < kMinHoldUs || z.hold_us > kMaxHoldUs) {
            return rl_param_error(cf, "invalid hold \"%V\", it must be from 1s to 1d", &a);
        }
        z.have_hold = true;
    } else if (rl_arg(a, "rate=", v)) {
        z.rate_param = "rate";
        z.have_rate = true;
        if (rl_has_variables(v)) {
            zone->rate_cv = fe->compile(cf, &v);
            if (zone->rate_cv == nullptr) return RL_PARAM_ERROR;
        } else if (!rl::parse_rate(rl_sv(v), zone->policy.requests, zone->policy.period_us)) {
            return rl_param_error(cf, "invalid rate \"%V\"", &a);
        }
    } else if (rl_arg(a, "default_rate=", v)) {
        // A variable rate's fallback: the zone's policy once the checks know rate= is one.
        z.rate_param = "default_rate";
        z.have_default = true;
        if (!rl::parse_rate(rl_sv(v), z.dflt.requests, z.dflt.period_us)) {
            return rl_param_error(cf, "invalid default_rate \"%V\"", &a);
        }
    } else if (rl_arg(a, "requests=", v)) {
        z.rate_param = "requests";
        z.have_requests = true;
        if (!rl::parse_int(rl_sv(v), 1, rl::kMaxRequests, zone->policy.requests)) {
            return rl_param_error(cf, "invalid requests \"%V\"", &a);
        }
    } else if (rl_arg(a, "period=", v)) {
        z.rate_param = "period";
        z.have_period = true;
        if (rl::parse_calendar(rl_sv(v), zone->policy.calendar)) {
            zone->policy.period_us = rl::calendar_longest_us(zone->policy.calendar);
        } else if (!rl::parse_duration(rl_sv(v), zone->policy.period_us)) {
            return rl_param_error(cf, "invalid period \"%V\"", &a);
        }
    } else if (rl_arg(a, "burst=", v)) {
        z.rate_param = "burst";
        zone->burst_set = true;
        if (var_or_int(cf, fe, v, &zone->burst_cv, 0, rl::kMaxRequests, zone->policy.burst) == RL_BAD) {
            if (rl_has_variables(v)) return RL_PARAM_ERROR;
            return rl_param_error(cf, "invalid burst \"%V\"", &a);
        }
    } else if (rl_arg(a, "algo=", v)) {
        z.rate_param = "algo";
        zone->algo_set = true;
        if (!rl::parse_algo(rl_sv(v), zone->policy.algo)) return rl_param_error(cf, "invalid algorithm \"%V\"", &v);
    } else if (rl_arg(a, "block=", v)) {
        if (!rl_parse_block(rl_sv(v), zone->policy.block_us)) {
            return rl_param_error(cf, "invalid block \"%V\", it must be from 1s to 1y", &a);
        }
    } else if (rl_arg(a, "timezone=", v)) {
        z.tz_arg = a;
        // A name such as Europe/Berlin (the tz database's: no file paths, no POSIX rules).
        bool name_ok = v.len > 0 && v.data[0] != '/' && ngx_strlchr(v.data, v.data + v.len, '.') == nullptr;
        zone->tz = name_ok ? rl::find_time_zone(rl_sv(v)) : nullptr;
        if (zone->tz == nullptr) {
            return rl_param_error(cf, "unknown time zone \"%V\" in ratelimit zone \"%V\"", &v, &zone->name);
        }
    } else {
        return RL_PARAM_OTHER;
    }
    return RL_PARAM_READ;
}

// How the keys of key=`v` read: two variables hold binary addresses, known by name here (the
// key is exactly one of them).
rl_key_kind_e key_kind(const ngx_str_t& v) {
    std::string_view k = rl_sv(v);
    if (k == "$binary_remote_addr" || k == "${binary_remote_addr}") return RL_KEY_ADDR;
    if (k == "$ratelimit_client_prefix" || k == "${ratelimit_client_prefix}") return RL_KEY_PREFIX;
    return RL_KEY_TEXT;
}

// The parameters of where the state lives: key=, size=, redis=, sync=, sync_mode=, top=.
rl_param_e read_store_param(ngx_conf_t* cf, const rl_frontend_t* fe, rl_zone_t* zone, zone_args_t& z, ngx_str_t& a) {
    ngx_str_t v;
    if (rl_arg(a, "key=", v)) {
        zone->key = fe->compile(cf, &v);
        if (zone->key == nullptr) return RL_PARAM_ERROR;
        zone->key_kind = key_kind(v);
        z.have_key = true;
    } else if (rl_arg(a, "top=", v)) {
        int64_t k;
        if (!rl::parse_int(rl_sv(v), 0, kRlTopMaxK, k)) {
            return rl_param_error(cf, "invalid top \"%V\", it must be from 0 (off) to %uD", &a, kRlTopMaxK);
        }
        zone->top_k = static_cast<uint32_t>(k);
        z.top_arg = a;
    } else if (rl_arg(a, "size=", v)) {
        ssize_t n = ngx_parse_size(&v);
        if (n == NGX_ERROR) return rl_param_error(cf, "invalid size \"%V\"", &a);
        if (n < static_cast<ssize_t>(8 * ngx_pagesize)) return rl_param_error(cf, "zone \"%V\" is too small", &zone->name);
        z.size = static_cast<size_t>(n);
    } else if (rl_arg(a, "redis=", v)) {
        zone->redis_name = v;
        if (v.len == 0) return rl_param_error(cf, "invalid parameter \"%V\"", &a);
    } else if (rl_arg(a, "sync=", v)) {
        if (!rl::parse_duration(rl_sv(v), zone->sync_us) || zone->sync_us <= 0) {
            return rl_param_error(cf, "invalid sync interval \"%V\"", &a);
        }
        z.sync_arg = a;
    } else if (rl_arg(a, "sync_mode=", v)) {
        if (rl_sv(v) == "optimistic") {
            zone->sync_mode = RL_SYNC_OPTIMISTIC;
        } else if (rl_sv(v) == "lease") {
            zone->sync_mode = RL_SYNC_LEASE;
        } else {
            return rl_param_error(cf, "invalid sync_mode \"%V\", it must be \"optimistic\" or \"lease\"", &v);
        }
        z.mode_set = true;
    } else {
        return rl_param_error(cf, "invalid parameter \"%V\"", &a);
    }
    return RL_PARAM_READ;
}

// The zone's name: it appears in response headers and Redis keys, so short, in a safe alphabet.
bool check_name(ngx_conf_t* cf, const ngx_str_t& name) {
    if (name.len > rl::kMaxZoneLen) {
        rl_conf_error(cf, "zone name \"%V\" is too long (%uz bytes at most)", &name, rl::kMaxZoneLen);
        return false;
    }
    for (size_t i = 0; i < name.len; i++) {
        u_char ch = name.data[i];
        if (!(isalnum(ch) || ch == '_' || ch == '-' || ch == '.')) {
            rl_conf_error(cf, "invalid zone name \"%V\": only letters, digits, \"_\", \"-\" and \".\" are allowed", &name);
            return false;
        }
    }
    return true;
}

// sync= and sync_mode= of a zone, once its other parameters are read.
bool check_sync(ngx_conf_t* cf, rl_zone_t* zone, const zone_args_t& z) {
    if (zone->sync_us == 0) {
        if (z.mode_set) rl_conf_error(cf, "\"sync_mode\" needs \"sync\" in ratelimit zone \"%V\"", &zone->name);
        return !z.mode_set;
    }
    if (zone->redis_name.len == 0) {
        rl_conf_error(cf, "\"sync\" needs \"redis\" in ratelimit zone \"%V\": it reconciles with Redis", &zone->name);
        return false;
    }
    if (zone->sync_us < kMinSyncUs || zone->sync_us > zone->policy.period_us) {
        rl_conf_error(cf, "\"%V\" must be from 10ms to the period of ratelimit zone \"%V\" (%L ms)", &z.sync_arg,
                      &zone->name, zone->policy.period_us / 1000);
        return false;
    }
    if (!z.mode_set) zone->sync_mode = RL_SYNC_OPTIMISTIC;
    zone->sync_policies = ngx_array_create(cf->pool, 2, sizeof(rl::Policy));
    return zone->sync_policies != nullptr;
}

// top=: given, or the default for the zone's size; the summary takes at most half the zone.
bool check_top(ngx_conf_t* cf, rl_zone_t* zone, const zone_args_t& z) {
    if (z.top_arg.len == 0) zone->top_k = z.size >= kRlTopDefaultMinSize ? kRlTopDefaultK : 0;
    size_t bytes = rl::top_keys_bytes(zone->top_k);
    if (bytes <= rl_zone_usable_bytes(z.size) / 2) return true;
    rl_conf_error(cf, "zone \"%V\" is too small for \"%V\": its summary takes %uz bytes, at most half the zone",
                  &zone->name, &z.top_arg, bytes);
    return false;
}

// The zone's shared memory, and the zone among the block's.
char* add_zone(ngx_conf_t* cf, rl_engine_conf_t* ecf, rl_zone_t* zone, size_t size) {
    ngx_shm_zone_t* shm_zone = ngx_shared_memory_add(cf, &zone->name, size, ecf->fe->module);
    if (shm_zone == nullptr) return static_cast<char*>(NGX_CONF_ERROR);
    if (shm_zone->data != nullptr) return rl_conf_error(cf, "duplicate zone \"%V\"", &zone->name);
    zone->shm_zone = shm_zone;
    shm_zone->data = zone;  // (its init: the engine's, once its store is known)
    auto** all = static_cast<rl_zone_t**>(ngx_array_push(&ecf->zones));
    if (all == nullptr) return static_cast<char*>(NGX_CONF_ERROR);
    *all = zone;
    return NGX_CONF_OK;
}

// concurrency= and what may come with it, once a zone's parameters are read; then its stores.
bool check_concurrency(ngx_conf_t* cf, rl_zone_t* zone, const zone_args_t& z) {
    if (!zone->concurrency) {
        rl_conf_error(cf, "\"%s\" needs \"concurrency\" in ratelimit zone \"%V\"",
                      z.have_hold ? "hold" : "default_concurrency", &zone->name);
        return false;
    }
    if (z.rate_param != nullptr) {
        rl_conf_error(cf, "\"%s\" cannot be combined with \"concurrency\" in ratelimit zone \"%V\": a zone limits "
                      "a rate or the requests in flight", z.rate_param, &zone->name);
        return false;
    }
    if (z.sync_arg.len > 0 || z.mode_set) {
        rl_conf_error(cf, "\"sync\" cannot be used with \"concurrency\" in ratelimit zone \"%V\": a slot is held "
                      "by one request until it ends, not a count hosts can add later; use \"redis\" alone",
                      &zone->name);
        return false;
    }
    if (z.have_hold && zone->redis_name.len == 0) {
        rl_conf_error(cf, "\"hold\" needs \"redis\" in ratelimit zone \"%V\": it is how long Redis keeps the "
                      "slot of a host that stopped refreshing it", &zone->name);
        return false;
    }
    if ((zone->concurrency_cv != nullptr) != (z.default_concurrency > 0)) {
        rl_conf_error(cf, zone->concurrency_cv ? "a variable \"concurrency\" requires \"default_concurrency\" in "
                                                 "ratelimit zone \"%V\""
                                               : "\"default_concurrency\" is only for a variable \"concurrency\" in "
                                                 "ratelimit zone \"%V\"",
                      &zone->name);
        return false;
    }
    if (z.default_concurrency > 0) zone->policy.requests = z.default_concurrency;
    zone->policy.algo = rl::Algo::concurrency;
    zone->policy.period_us = z.hold_us;
    zone->algo_set = true;
    zone->local_id = RL_STORE_ID_CONC;
    zone->store_id = zone->redis_name.len > 0 ? RL_STORE_ID_REDIS : RL_STORE_ID_CONC;
    return true;
}

// A calendar zone (period=day|week|month|year [timezone=Area/City]): a window algorithm (fixed
// unless algo=sliding), no sync, and a time zone the tz database knows.
bool check_calendar(ngx_conf_t* cf, rl_zone_t* zone, const ngx_str_t& tz_arg) {
    if (zone->policy.calendar == rl::Calendar::none) {
        if (tz_arg.len == 0) return true;
        rl_conf_error(cf, "\"%V\" needs a calendar period (period=day, week, month or year) in ratelimit zone \"%V\"",
                      &tz_arg, &zone->name);
        return false;
    }
    if (zone->concurrency) return true;  // check_concurrency refuses period= there
    if (!zone->algo_set) {
        zone->policy.algo = rl::Algo::fixed;
        zone->algo_set = true;
    }
    if (zone->policy.algo != rl::Algo::fixed && zone->policy.algo != rl::Algo::sliding) {
        std::string_view name = rl::algo_name(zone->policy.algo);
        ngx_str_t algo{name.size(), reinterpret_cast<u_char*>(const_cast<char*>(name.data()))};
        rl_conf_error(cf, "a calendar period is for algo=fixed or algo=sliding, not \"%V\", in ratelimit zone \"%V\"",
                      &algo, &zone->name);
        return false;
    }
    if (zone->sync_us != 0) {
        rl_conf_error(cf, "\"sync\" cannot be used with a calendar period in ratelimit zone \"%V\"", &zone->name);
        return false;
    }
    // Once here: checks the library and loads the zone's rules before the workers start.
    rl::CalendarWindow w;
    if (!rl::calendar_window(zone->policy.calendar, zone->tz, static_cast<int64_t>(ngx_time()) * 1000000, w)) {
        rl_conf_error(cf, "cannot compute the calendar windows of ratelimit zone \"%V\"", &zone->name);
        return false;
    }
    zone->policy.win = w;
    return true;
}

// A rate zone's parameters, together; then its stores.
bool check_rate(ngx_conf_t* cf, rl_zone_t* zone, const zone_args_t& z) {
    if (z.have_rate == (z.have_requests && z.have_period) || z.have_requests != z.have_period) {
        rl_conf_error(cf, "\"rate\" or \"requests\" and \"period\" are required in ratelimit zone \"%V\", not both",
                      &zone->name);
        return false;
    }
    if (!rl_tier_check_zone(cf, zone, z.have_default ? &z.dflt : nullptr)) return false;
    if (!check_calendar(cf, zone, z.tz_arg)) return false;
    if (zone->algo_set && zone->burst_set && !rl::is_bucket(zone->policy.algo)) {
        std::string_view name = rl::algo_name(zone->policy.algo);
        ngx_str_t algo{name.size(), reinterpret_cast<u_char*>(const_cast<char*>(name.data()))};
        rl_conf_error(cf, "\"burst\" is not supported by the \"%V\" algorithm", &algo);
        return false;
    }
    rl::Policy check = zone->policy;
    if (!zone->algo_set) check.algo = rl::Algo::gcra;
    if (const char* why = rl::finish_policy(check)) {
        rl_conf_error(cf, "ratelimit zone \"%V\": %s", &zone->name, why);
        return false;
    }
    if (!check_sync(cf, zone, z)) return false;
    zone->local_id = RL_STORE_ID_SHM;
    zone->store_id = zone->sync_mode == RL_SYNC_LEASE        ? RL_STORE_ID_SYNC_LEASE
                     : zone->sync_mode == RL_SYNC_OPTIMISTIC ? RL_STORE_ID_SYNC_OPTIMISTIC
                     : zone->redis_name.len > 0              ? RL_STORE_ID_REDIS
                                                             : RL_STORE_ID_SHM;
    return true;
}

// A configuration error at the directive being read, or at the `ratelimit` line `where`.
template <typename... Args>
bool refuse(ngx_conf_t* cf, const rl_limit_t* where, const char* fmt, Args... args) {
    rl_conf_error_at(cf, where ? "ratelimit" : nullptr, where ? where->file : nullptr, where ? where->line : 0, fmt,
                     args...);
    return false;
}

}  // namespace

// ratelimit_zone NAME key=STRING (rate=R | rate=$VAR default_rate=R | requests=N period=T) [burst=N|$VAR]
//                [size=S] [algo=A] [block=TIME] [redis=NAME [sync=TIME [sync_mode=optimistic|lease]]]
//                [top=K] (period=day|week|month|year: [timezone=Area/City], check_calendar)
// ratelimit_zone NAME key=STRING (concurrency=N | concurrency=$VAR default_concurrency=N) [size=S]
//                [redis=NAME [hold=TIME]] [top=K]
char* rl_zone_parse(ngx_conf_t* cf, rl_engine_conf_t* ecf) noexcept {
    auto* args = static_cast<ngx_str_t*>(cf->args->elts);
    if (!rl_no_duplicate_params(cf, 2)) return static_cast<char*>(NGX_CONF_ERROR);
    auto* zone = static_cast<rl_zone_t*>(ngx_pcalloc(cf->pool, sizeof(rl_zone_t)));
    if (zone == nullptr) return static_cast<char*>(NGX_CONF_ERROR);
    zone->name = args[1];
    zone->file = cf->conf_file->file.name.data;
    zone->line = cf->conf_file->line;
    if (!check_name(cf, zone->name)) return static_cast<char*>(NGX_CONF_ERROR);

    zone_args_t z{};
    z.size = kDefaultZoneSize;
    z.hold_us = kDefaultHoldUs;
    for (ngx_uint_t i = 2; i < cf->args->nelts; i++) {
        rl_param_e rv = read_limit_param(cf, ecf->fe, zone, z, args[i]);
        if (rv == RL_PARAM_OTHER) rv = read_store_param(cf, ecf->fe, zone, z, args[i]);
        if (rv != RL_PARAM_READ) return static_cast<char*>(NGX_CONF_ERROR);
    }

    if (!z.have_key) return rl_conf_error(cf, "\"key\" is required in ratelimit zone \"%V\"", &zone->name);
    if (!check_top(cf, zone, z)) return static_cast<char*>(NGX_CONF_ERROR);
    bool conc = zone->concurrency || z.default_concurrency > 0 || z.have_hold;
    if (zone->policy.block_us > 0 && (conc || zone->sync_us != 0) && !rl_zone_check_block(cf, zone, nullptr)) {
        return static_cast<char*>(NGX_CONF_ERROR);
    }
    if (conc) {
        if ((zone->concurrency && z.tz_arg.len > 0 && !check_calendar(cf, zone, z.tz_arg)) ||
            !check_concurrency(cf, zone, z)) {
            return static_cast<char*>(NGX_CONF_ERROR);
        }
        return add_zone(cf, ecf, zone, z.size);
    }
    if (!check_rate(cf, zone, z)) return static_cast<char*>(NGX_CONF_ERROR);
    if (add_zone(cf, ecf, zone, z.size) != NGX_CONF_OK) return static_cast<char*>(NGX_CONF_ERROR);
    if (zone->algo_set && zone->policy.algo == rl::Algo::log && !rl_zone_check_log(cf, zone, zone->policy, nullptr)) {
        return static_cast<char*>(NGX_CONF_ERROR);
    }
    return NGX_CONF_OK;
}

bool rl_parse_block(std::string_view v, int64_t& us) noexcept {
    constexpr int64_t kMinBlockUs = 1000000, kMaxBlockUs = int64_t{365} * 86400 * 1000000;
    return rl::parse_duration(v, us) && us >= kMinBlockUs && us <= kMaxBlockUs;
}

bool rl_zone_check_block(ngx_conf_t* cf, const rl_zone_t* zone, const rl_limit_t* where) noexcept {
    if (zone->concurrency) {
        return refuse(cf, where, "\"block\" cannot be used with the concurrency zone \"%V\": a slot frees when its "
                      "request ends", &zone->name);
    }
    if (zone->sync_us != 0) {
        return refuse(cf, where, "\"block\" cannot be used with \"sync\" in ratelimit zone \"%V\": a block is not "
                      "reconciled between hosts", &zone->name);
    }
    return true;
}

bool rl_zone_check_log(ngx_conf_t* cf, rl_zone_t* zone, const rl::Policy& policy, const rl_limit_t* where) noexcept {
    if (zone->sync_us != 0) {
        return refuse(cf, where, "the \"log\" algorithm cannot be synced (ratelimit zone \"%V\"): it keeps every "
                      "request's time, not counts that hosts can add; use \"sliding\"", &zone->name);
    }
    if (zone->rate_cv != nullptr) {
        return refuse(cf, where, where ? "the \"log\" algorithm cannot take the variable rate of zone \"%V\" (its "
                                         "memory per key depends on the rate)"
                                       : "the \"log\" algorithm cannot take a variable \"rate\" (its memory per key "
                                         "depends on the rate) in ratelimit zone \"%V\"",
                      &zone->name);
    }
    zone->uses_log = true;
    uint32_t slot = rl::slot_size_for(rl::ring_bytes(policy));
    size_t usable = rl_zone_usable_bytes(zone->shm_zone->shm.size) - rl::top_keys_bytes(zone->top_k);
    if (rl::table_capacity(usable, slot) > 0) return true;
    return refuse(cf, where, "zone \"%V\" is too small for the sliding log of %L requests (%uD bytes per key)",
                  &zone->name, policy.requests, slot);
}

bool rl_zone_resolve(ngx_conf_t* cf, rl_zone_t* zone, const ngx_array_t* redis) noexcept {
    if (zone->redis_name.len == 0) return true;
    zone->redis = rl_redis_find(redis, zone->redis_name);
    if (zone->redis == nullptr) {
        rl_conf_error_at(cf, "ratelimit_zone", zone->file, zone->line, "unknown ratelimit_redis \"%V\" in zone \"%V\"",
                         &zone->redis_name, &zone->name);
        return false;
    }
    zone->timeout = zone->redis->timeout;
    return true;
}

rl_zone_t* rl_zone_find(const ngx_array_t* zones, std::string_view name) noexcept {
    auto** all = static_cast<rl_zone_t**>(zones->elts);
    for (ngx_uint_t i = 0; i < zones->nelts; i++) {
        if (rl_sv(all[i]->name) == name) return all[i];
    }
    return nullptr;
}
