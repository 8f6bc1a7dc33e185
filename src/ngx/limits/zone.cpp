// ratelimit_zone: parsing, the zone's store, and its shared-memory table (created once, reused
// across reloads), whose block starts with the store's own area when it has one.
#include "ngx/limits/zone.h"

#include "core/algo/concurrency.h"
#include "core/text/rate.h"
#include "core/wire/redis_command.h"
#include "ngx/redis/redis.h"
#include "ngx/stores/redis_request.h"
#include "ngx/stores/store.h"
#include "ngx/sync/sync.h"
#include "ngx/limits/tier.h"

#include <sys/random.h>

namespace {

constexpr size_t kDefaultZoneSize = 1024 * 1024;

// Bytes of a zone the table can use: the slab pool keeps a header and a page descriptor per page.
size_t usable_bytes(size_t zone_size) {
    size_t per_page = ngx_pagesize + sizeof(ngx_slab_page_t);
    size_t pages = (zone_size - sizeof(ngx_slab_pool_t)) / per_page;
    return pages > 1 ? (pages - 1) * ngx_pagesize : 0;  // one page lost to alignment at most
}

uint32_t zone_slot_size(const rl_zone_t* zone) {
    if (size_t bytes = rl_zone_key_bytes(zone)) return rl::slot_size_for(bytes);  // never the log
    rl::Policy p = zone->policy;
    p.algo = rl::Algo::log;
    return rl::slot_size_for(zone->uses_log ? rl::ring_bytes(p) : 0);
}

// The secret that places keys in the table's buckets: random, so that no client can choose
// keys that share one; made once, when the table is laid out, and kept with it across reloads.
uint64_t table_secret(ngx_log_t* log) {
    uint64_t secret = 0;
    if (getrandom(&secret, sizeof(secret), GRND_NONBLOCK) != static_cast<ssize_t>(sizeof(secret))) {
        // Only at very early boot, before the kernel's pool is ready: less secret, still not public.
        ngx_log_error(NGX_LOG_WARN, log, ngx_errno, "ratelimit: getrandom() failed, the zone's secret is weaker");
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        secret = (static_cast<uint64_t>(ts.tv_nsec) << 32) ^ static_cast<uint64_t>(ts.tv_sec) ^
                 (static_cast<uint64_t>(ngx_pid) << 16) ^ reinterpret_cast<uintptr_t>(&secret);
        secret *= 0x9e3779b97f4a7c15ULL;
    }
    return secret;
}

// A block starts with its store's area (a sync zone's header and lists), sized for every slot
// the whole block could hold; the table takes the rest.
size_t store_area(const rl_zone_t* zone, size_t block_bytes, uint32_t slot_size, uint32_t* cap) {
    *cap = 0;
    if (zone->store->area_bytes == nullptr) return 0;
    *cap = rl::table_capacity(block_bytes, slot_size);
    size_t area = zone->store->area_bytes(*cap);
    return area < block_bytes ? area : block_bytes;
}

// Whether what a reload found can be kept (at the same place, with an area or not): the same layout.
bool zone_compatible(const rl_zone_t* zone, const rl_zone_t* old, uint32_t slot_size, uint32_t cap) {
    if (!rl::table_compatible(old->table, slot_size)) return false;
    if (zone->store->area_bytes == nullptr) return true;
    return old->sync_shm == zone->block && zone->store->area_compatible(old->sync_shm, cap) &&
           old->table->nslots <= cap;
}

ngx_int_t rl_init_zone(ngx_shm_zone_t* shm_zone, void* data) noexcept {
    auto* zone = static_cast<rl_zone_t*>(shm_zone->data);
    auto* old = static_cast<rl_zone_t*>(data);
    uint32_t slot_size = zone_slot_size(zone);

    if (old != nullptr) {  // reload: same name and size, so nginx kept the memory
        zone->shpool = old->shpool;
        zone->block = old->block;
        zone->block_bytes = old->block_bytes;
        uint32_t cap;
        size_t area = store_area(zone, zone->block_bytes, slot_size, &cap);
        if ((old->sync_shm != nullptr) != (zone->store->area_bytes != nullptr) ||
            reinterpret_cast<u_char*>(old->table) != static_cast<u_char*>(zone->block) + area) {
            // The table would move within the memory the old workers still use until they exit.
            ngx_log_error(NGX_LOG_EMERG, shm_zone->shm.log, 0,
                          "ratelimit zone \"%V\": \"sync\" cannot be added or removed by a reload (the running "
                          "workers use the zone's memory): give the zone another name, or restart nginx",
                          &zone->name);
            return NGX_ERROR;
        }
        if (zone_compatible(zone, old, slot_size, cap)) {
            zone->table = old->table;
            zone->sync_shm = old->sync_shm;  // the view, the unsent deltas and the leases carry on
            return NGX_OK;
        }
        ngx_log_error(NGX_LOG_NOTICE, shm_zone->shm.log, 0,
                      "ratelimit zone \"%V\": its table's layout changed (sliding log use, sync, or a new version "
                      "of the module), its state is reset", &zone->name);
    } else {
        zone->shpool = reinterpret_cast<ngx_slab_pool_t*>(shm_zone->shm.addr);
        if (shm_zone->shm.exists) {
            zone->block = zone->shpool->data;
            zone->block_bytes = usable_bytes(shm_zone->shm.size);
        } else {
            // One allocation as large as the fresh pool allows: the table never allocates again.
            zone->shpool->log_nomem = 0;  // the tries below that do not fit are expected
            for (ngx_uint_t pages = zone->shpool->pfree; pages > 0 && zone->block == nullptr; pages--) {
                zone->block = ngx_slab_alloc(zone->shpool, pages * ngx_pagesize);
                zone->block_bytes = pages * ngx_pagesize;
            }
            if (zone->block == nullptr) {
                ngx_log_error(NGX_LOG_EMERG, shm_zone->shm.log, 0, "ratelimit zone \"%V\" has no room", &zone->name);
                return NGX_ERROR;
            }
            zone->shpool->data = zone->block;
        }
    }

    uint64_t secret = table_secret(shm_zone->shm.log);
    uint32_t cap;
    size_t area = store_area(zone, zone->block_bytes, slot_size, &cap);
    ngx_shmtx_lock(&zone->shpool->mutex);
    zone->sync_shm = nullptr;
    zone->table = rl::table_format(static_cast<u_char*>(zone->block) + area, zone->block_bytes - area, slot_size, secret);
    if (zone->table != nullptr && area > 0) {
        zone->sync_shm = static_cast<rl_sync_shm_t*>(zone->block);
        zone->store->area_format(zone->sync_shm, cap);
    }
    ngx_shmtx_unlock(&zone->shpool->mutex);
    if (zone->table == nullptr) {
        ngx_log_error(NGX_LOG_EMERG, shm_zone->shm.log, 0,
                      "ratelimit zone \"%V\" is too small for one key of %uD bytes", &zone->name, slot_size);
        return NGX_ERROR;
    }
    ngx_log_error(NGX_LOG_INFO, shm_zone->shm.log, 0, "ratelimit zone \"%V\": %uD keys of %uD bytes, %uD buckets",
                  &zone->name, zone->table->nslots, slot_size, zone->table->nbuckets);
    return NGX_OK;
}

constexpr int64_t kMinSyncUs = 10000;
// hold=: how long Redis keeps a slot its host no longer refreshes (every hold / 3).
constexpr int64_t kDefaultHoldUs = 30000000;
constexpr int64_t kMinHoldUs = 1000000;
constexpr int64_t kMaxHoldUs = 86400000000;

// sync= and sync_mode= of a zone, once its other parameters are read.
bool check_sync(ngx_conf_t* cf, rl_zone_t* zone, const ngx_str_t& sync_arg, bool mode_set) {
    if (zone->sync_us == 0) {
        if (mode_set) rl_conf_error(cf, "\"sync_mode\" needs \"sync\" in ratelimit zone \"%V\"", &zone->name);
        return !mode_set;
    }
    if (zone->redis_name.len == 0) {
        rl_conf_error(cf, "\"sync\" needs \"redis\" in ratelimit zone \"%V\": it reconciles with Redis", &zone->name);
        return false;
    }
    if (zone->sync_us < kMinSyncUs || zone->sync_us > zone->policy.period_us) {
        rl_conf_error(cf, "\"%V\" must be from 10ms to the period of ratelimit zone \"%V\" (%L ms)", &sync_arg,
                      &zone->name, zone->policy.period_us / 1000);
        return false;
    }
    if (!mode_set) zone->sync_mode = RL_SYNC_OPTIMISTIC;
    zone->sync_policies = ngx_array_create(cf->pool, 2, sizeof(rl::Policy));
    return zone->sync_policies != nullptr;
}

// The zone's shared memory, and the zone among the http block's.
char* add_zone(ngx_conf_t* cf, rl_main_conf_t* mcf, rl_zone_t* zone, size_t size) {
    ngx_shm_zone_t* shm_zone = ngx_shared_memory_add(cf, &zone->name, size, &ngx_http_ratelimit_module);
    if (shm_zone == nullptr) return static_cast<char*>(NGX_CONF_ERROR);
    if (shm_zone->data != nullptr) {
        return rl_conf_error(cf, "duplicate zone \"%V\"", &zone->name);
    }
    zone->shm_zone = shm_zone;
    shm_zone->init = rl_init_zone;
    shm_zone->data = zone;
    auto** all = static_cast<rl_zone_t**>(ngx_array_push(&mcf->zones));
    if (all == nullptr) return static_cast<char*>(NGX_CONF_ERROR);
    *all = zone;

    return NGX_CONF_OK;
}

// concurrency= and what may come with it, once a zone's parameters are read; then its stores.
bool check_concurrency(ngx_conf_t* cf, rl_zone_t* zone, const char* rate_param, int64_t default_concurrency,
                       bool have_hold, const ngx_str_t& sync_arg, bool mode_set) {
    if (!zone->concurrency) {
        rl_conf_error(cf, "\"%s\" needs \"concurrency\" in ratelimit zone \"%V\"",
                      have_hold ? "hold" : "default_concurrency", &zone->name);
        return false;
    }
    if (rate_param != nullptr) {
        rl_conf_error(cf, "\"%s\" cannot be combined with \"concurrency\" in ratelimit zone \"%V\": a zone limits "
                      "a rate or the requests in flight", rate_param, &zone->name);
        return false;
    }
    if (sync_arg.len > 0 || mode_set) {
        rl_conf_error(cf, "\"sync\" cannot be used with \"concurrency\" in ratelimit zone \"%V\": a slot is held "
                      "by one request until it ends, not a count hosts can add later; use \"redis\" alone",
                      &zone->name);
        return false;
    }
    if (have_hold && zone->redis_name.len == 0) {
        rl_conf_error(cf, "\"hold\" needs \"redis\" in ratelimit zone \"%V\": it is how long Redis keeps the "
                      "slot of a host that stopped refreshing it", &zone->name);
        return false;
    }
    if ((zone->concurrency_cv != nullptr) != (default_concurrency > 0)) {
        rl_conf_error(cf, zone->concurrency_cv ? "a variable \"concurrency\" requires \"default_concurrency\" in "
                                                 "ratelimit zone \"%V\""
                                               : "\"default_concurrency\" is only for a variable \"concurrency\" in "
                                                 "ratelimit zone \"%V\"",
                      &zone->name);
        return false;
    }
    if (default_concurrency > 0) zone->policy.requests = default_concurrency;
    zone->policy.algo = rl::Algo::concurrency;
    zone->algo_set = true;
    zone->local = &rl_conc_store;
    zone->store = zone->redis_name.len > 0 ? &rl_redis_store : &rl_conc_store;
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

}  // namespace

void rl_calendar_window(const rl_result_t& res, int64_t now) noexcept {
    const rl::Policy* p = res.policy;
    if (p->calendar == rl::Calendar::none || (now >= p->win.start && now < p->win.end)) return;
    // The applied policy (a calendar one is never a tier's): this worker's, in its
    // configuration's memory; computed again only when now leaves its window.
    rl::calendar_window(p->calendar, res.applied->zone->tz, now, const_cast<rl::Policy*>(p)->win);
}

// ratelimit_zone NAME key=STRING (rate=R | rate=$VAR default_rate=R | requests=N period=T) [burst=N|$VAR]
//                [size=S] [algo=A] [block=TIME] [redis=NAME [sync=TIME [sync_mode=optimistic|lease]]]
//                (period=day|week|month|year: [timezone=Area/City], check_calendar)
// ratelimit_zone NAME key=STRING (concurrency=N | concurrency=$VAR default_concurrency=N) [size=S]
//                [redis=NAME [hold=TIME]]
char* rl_zone_directive(ngx_conf_t* cf, ngx_command_t*, void* conf) noexcept {
    auto* mcf = static_cast<rl_main_conf_t*>(conf);
    auto* args = static_cast<ngx_str_t*>(cf->args->elts);
    if (!rl_no_duplicate_params(cf, 2)) return static_cast<char*>(NGX_CONF_ERROR);
    auto* zone = static_cast<rl_zone_t*>(ngx_pcalloc(cf->pool, sizeof(rl_zone_t)));
    if (zone == nullptr) return static_cast<char*>(NGX_CONF_ERROR);
    zone->name = args[1];
    zone->file = cf->conf_file->file.name.data;
    zone->line = cf->conf_file->line;
    // The name appears in response headers and Redis keys: keep it short, in a safe alphabet.
    if (zone->name.len > rl::kMaxZoneLen) {
        return rl_conf_error(cf, "zone name \"%V\" is too long (%uz bytes at most)", &zone->name,
                           rl::kMaxZoneLen);
    }
    for (size_t i = 0; i < zone->name.len; i++) {
        u_char ch = zone->name.data[i];
        if (!(isalnum(ch) || ch == '_' || ch == '-' || ch == '.')) {
            return rl_conf_error(cf,
                               "invalid zone name \"%V\": only letters, digits, \"_\", \"-\" and \".\" are allowed",
                               &zone->name);
        }
    }

    bool have_key = false, have_rate = false, have_requests = false, have_period = false, have_default = false;
    size_t size = kDefaultZoneSize;
    rl::Policy dflt;
    ngx_str_t sync_arg = ngx_null_string;
    ngx_str_t tz_arg = ngx_null_string;
    bool mode_set = false;
    const char* rate_param = nullptr;  // a rate's parameter, refused with concurrency=
    bool have_hold = false;
    int64_t default_concurrency = 0;
    int64_t hold_us = kDefaultHoldUs;

    for (ngx_uint_t i = 2; i < cf->args->nelts; i++) {
        ngx_str_t& a = args[i];
        ngx_str_t v;
        if (rl_arg(a, "key=", v)) {
            ngx_http_compile_complex_value_t ccv{};
            ccv.cf = cf;
            ccv.value = &v;
            ccv.complex_value = &zone->key;
            if (ngx_http_compile_complex_value(&ccv) != NGX_OK) return static_cast<char*>(NGX_CONF_ERROR);
            have_key = true;
        } else if (rl_arg(a, "concurrency=", v)) {
            if (rl_tier_is_variable(&v)) {
                zone->concurrency_cv = rl_complex_value(cf, &v);
                if (zone->concurrency_cv == nullptr) return static_cast<char*>(NGX_CONF_ERROR);
            } else if (!rl::parse_int(rl_sv(v), 1, rl::kMaxConcurrency, zone->policy.requests)) {
                return rl_conf_error(cf, "invalid concurrency \"%V\", it must be from 1 to %L", &a,
                                     rl::kMaxConcurrency);
            }
            zone->concurrency = true;
        } else if (rl_arg(a, "default_concurrency=", v)) {
            if (!rl::parse_int(rl_sv(v), 1, rl::kMaxConcurrency, default_concurrency)) {
                return rl_conf_error(cf, "invalid default_concurrency \"%V\", it must be from 1 to %L", &a,
                                     rl::kMaxConcurrency);
            }
        } else if (rl_arg(a, "hold=", v)) {
            if (!rl::parse_duration(rl_sv(v), hold_us) || hold_us < kMinHoldUs || hold_us > kMaxHoldUs) {
                return rl_conf_error(cf, "invalid hold \"%V\", it must be from 1s to 1d", &a);
            }
            have_hold = true;
        } else if (rl_arg(a, "rate=", v)) {
            rate_param = "rate";
            if (rl_tier_is_variable(&v)) {
                zone->rate_cv = rl_complex_value(cf, &v);
                if (zone->rate_cv == nullptr) return static_cast<char*>(NGX_CONF_ERROR);
            } else if (!rl::parse_rate(rl_sv(v), zone->policy.requests, zone->policy.period_us)) {
                return rl_conf_error(cf, "invalid rate \"%V\"", &a);
            }
            have_rate = true;
        } else if (rl_arg(a, "default_rate=", v)) {
            rate_param = "default_rate";
            // A variable rate's fallback: the zone's policy once the loop knows rate= is one.
            if (!rl::parse_rate(rl_sv(v), dflt.requests, dflt.period_us)) {
                return rl_conf_error(cf, "invalid default_rate \"%V\"", &a);
            }
            have_default = true;
        } else if (rl_arg(a, "requests=", v)) {
            rate_param = "requests";
            if (!rl::parse_int(rl_sv(v), 1, rl::kMaxRequests, zone->policy.requests)) {
                return rl_conf_error(cf, "invalid requests \"%V\"", &a);
            }
            have_requests = true;
        } else if (rl_arg(a, "period=", v)) {
            rate_param = "period";
            if (rl::parse_calendar(rl_sv(v), zone->policy.calendar)) {
                zone->policy.period_us = rl::calendar_longest_us(zone->policy.calendar);
            } else if (!rl::parse_duration(rl_sv(v), zone->policy.period_us)) {
                return rl_conf_error(cf, "invalid period \"%V\"", &a);
            }
            have_period = true;
        } else if (rl_arg(a, "timezone=", v)) {
            tz_arg = a;
            // A name such as Europe/Berlin (the tz database's: no file paths, no POSIX rules).
            bool name_ok = v.len > 0 && v.data[0] != '/' && ngx_strlchr(v.data, v.data + v.len, '.') == nullptr;
            zone->tz = name_ok ? rl::find_time_zone(rl_sv(v)) : nullptr;
            if (zone->tz == nullptr) {
                return rl_conf_error(cf, "unknown time zone \"%V\" in ratelimit zone \"%V\"", &v, &zone->name);
            }
        } else if (rl_arg(a, "burst=", v)) {
            rate_param = "burst";
            if (rl_tier_is_variable(&v)) {
                zone->burst_cv = rl_complex_value(cf, &v);
                if (zone->burst_cv == nullptr) return static_cast<char*>(NGX_CONF_ERROR);
            } else if (!rl::parse_int(rl_sv(v), 0, rl::kMaxRequests, zone->policy.burst)) {
                return rl_conf_error(cf, "invalid burst \"%V\"", &a);
            }
            zone->burst_set = true;
        } else if (rl_arg(a, "size=", v)) {
            ssize_t n = ngx_parse_size(&v);
            if (n == NGX_ERROR) {
                return rl_conf_error(cf, "invalid size \"%V\"", &a);
            }
            if (n < static_cast<ssize_t>(8 * ngx_pagesize)) {
                return rl_conf_error(cf, "zone \"%V\" is too small", &zone->name);
            }
            size = static_cast<size_t>(n);
        } else if (rl_arg(a, "redis=", v)) {
            zone->redis_name = v;
            if (zone->redis_name.len == 0) {
                return rl_conf_error(cf, "invalid parameter \"%V\"", &a);
            }
        } else if (rl_arg(a, "sync=", v)) {
            if (!rl::parse_duration(rl_sv(v), zone->sync_us) || zone->sync_us <= 0) {
                return rl_conf_error(cf, "invalid sync interval \"%V\"", &a);
            }
            sync_arg = a;
        } else if (rl_arg(a, "sync_mode=", v)) {
            if (rl_sv(v) == "optimistic") {
                zone->sync_mode = RL_SYNC_OPTIMISTIC;
            } else if (rl_sv(v) == "lease") {
                zone->sync_mode = RL_SYNC_LEASE;
            } else {
                return rl_conf_error(cf, "invalid sync_mode \"%V\", it must be \"optimistic\" or \"lease\"", &v);
            }
            mode_set = true;
        } else if (rl_arg(a, "block=", v)) {
            if (!rl_parse_block(rl_sv(v), zone->policy.block_us)) {
                return rl_conf_error(cf, "invalid block \"%V\", it must be from 1s to 1y", &a);
            }
        } else if (rl_arg(a, "algo=", v)) {
            rate_param = "algo";
            if (!rl::parse_algo(rl_sv(v), zone->policy.algo)) {
                return rl_conf_error(cf, "invalid algorithm \"%V\"", &v);
            }
            zone->algo_set = true;
        } else {
            return rl_conf_error(cf, "invalid parameter \"%V\"", &a);
        }
    }

    if (!have_key) {
        return rl_conf_error(cf, "\"key\" is required in ratelimit zone \"%V\"", &zone->name);
    }
    if (zone->policy.block_us > 0 && (zone->concurrency || default_concurrency > 0 || have_hold || zone->sync_us != 0)) {
        if (!rl_zone_check_block(cf, zone, nullptr)) return static_cast<char*>(NGX_CONF_ERROR);
    }
    if (zone->concurrency && tz_arg.len > 0 && !check_calendar(cf, zone, tz_arg)) {
        return static_cast<char*>(NGX_CONF_ERROR);
    }
    if (zone->concurrency || default_concurrency > 0 || have_hold) {
        if (!check_concurrency(cf, zone, rate_param, default_concurrency, have_hold, sync_arg, mode_set)) {
            return static_cast<char*>(NGX_CONF_ERROR);
        }
        zone->policy.period_us = hold_us;
        return add_zone(cf, mcf, zone, size);
    }
    if (have_rate == (have_requests && have_period) || have_requests != have_period) {
        return rl_conf_error(cf,
                           "\"rate\" or \"requests\" and \"period\" are required in ratelimit zone \"%V\", "
                           "not both", &zone->name);
    }
    if (!rl_tier_check_zone(cf, zone, have_default ? &dflt : nullptr)) return static_cast<char*>(NGX_CONF_ERROR);
    if (!check_calendar(cf, zone, tz_arg)) return static_cast<char*>(NGX_CONF_ERROR);
    if (zone->algo_set && zone->burst_set && !rl::is_bucket(zone->policy.algo)) {
        std::string_view name = rl::algo_name(zone->policy.algo);
        ngx_str_t algo{name.size(), reinterpret_cast<u_char*>(const_cast<char*>(name.data()))};
        return rl_conf_error(cf, "\"burst\" is not supported by the \"%V\" algorithm", &algo);
    }

    rl::Policy check = zone->policy;
    if (!zone->algo_set) check.algo = rl::Algo::gcra;
    if (const char* why = rl::finish_policy(check)) {
        return rl_conf_error(cf, "ratelimit zone \"%V\": %s", &zone->name, why);
    }

    if (!check_sync(cf, zone, sync_arg, mode_set)) return static_cast<char*>(NGX_CONF_ERROR);
    zone->local = &rl_shm_store;
    zone->store = zone->sync_mode == RL_SYNC_LEASE        ? &rl_sync_lease_store
                  : zone->sync_mode == RL_SYNC_OPTIMISTIC ? &rl_sync_optimistic_store
                  : zone->redis_name.len > 0              ? &rl_redis_store
                                                          : &rl_shm_store;

    if (add_zone(cf, mcf, zone, size) != NGX_CONF_OK) return static_cast<char*>(NGX_CONF_ERROR);
    if (zone->algo_set && zone->policy.algo == rl::Algo::log && !rl_zone_check_log(cf, zone, zone->policy, nullptr)) {
        return static_cast<char*>(NGX_CONF_ERROR);
    }
    return NGX_CONF_OK;
}

namespace {

// A configuration error at the directive being read, or at the `ratelimit` line `where`.
template <typename... Args>
bool refuse(ngx_conf_t* cf, const rl_limit_t* where, const char* fmt, Args... args) {
    rl_conf_error_at(cf, where ? "ratelimit" : nullptr, where ? where->file : nullptr, where ? where->line : 0, fmt,
                     args...);
    return false;
}

}  // namespace

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
    if (rl::table_capacity(usable_bytes(zone->shm_zone->shm.size), slot) > 0) return true;
    return refuse(cf, where, "zone \"%V\" is too small for the sliding log of %L requests (%uD bytes per key)",
                  &zone->name, policy.requests, slot);
}

bool rl_zone_resolve(ngx_conf_t* cf, rl_zone_t* zone, rl_main_conf_t* mcf) noexcept {
    if (zone->redis_name.len == 0) return true;
    zone->redis = rl_redis_find(mcf, zone->redis_name);
    if (zone->redis == nullptr) {
        rl_conf_error_at(cf, "ratelimit_zone", zone->file, zone->line, "unknown ratelimit_redis \"%V\" in zone \"%V\"",
                         &zone->redis_name, &zone->name);
        return false;
    }
    zone->timeout = zone->redis->timeout;
    if (zone->concurrency) {
        // Its slots are refreshed three times per hold: one lost refresh does not drop them.
        auto every = static_cast<ngx_msec_t>(zone->policy.period_us / 3000);
        if (zone->redis->refresh_ms == 0 || every < zone->redis->refresh_ms) zone->redis->refresh_ms = every;
    }
    return true;
}
