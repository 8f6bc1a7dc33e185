// ratelimit_zone: parsing, the shared-memory table (created once, reused across reloads),
// and all-or-nothing decisions over several zones under their locks.
#include "ratelimit.h"

#include "core/rate.h"
#include "core/redis_command.h"
#include "core/refund.h"
#include "sync.h"

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
    if (zone->sync_mode != RL_SYNC_OFF) return rl::slot_size_for(sizeof(rl_sync_key_t));  // never the log
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

// A sync zone's block starts with its sync header and lists (sync.h), sized for every slot
// the whole block could hold; the table takes the rest.
size_t sync_area(const rl_zone_t* zone, size_t block_bytes, uint32_t slot_size, uint32_t* cap) {
    *cap = 0;
    if (zone->sync_mode == RL_SYNC_OFF) return 0;
    *cap = rl::table_capacity(block_bytes, slot_size);
    size_t area = rl_sync_area_bytes(*cap);
    return area < block_bytes ? area : block_bytes;
}

// Whether what a reload found can be kept (at the same place, sync or not): the same layout.
bool zone_compatible(const rl_zone_t* zone, const rl_zone_t* old, uint32_t slot_size, uint32_t cap) {
    if (!rl::table_compatible(old->table, slot_size)) return false;
    if (zone->sync_mode == RL_SYNC_OFF) return true;
    return old->sync_shm == zone->block && rl_sync_compatible(old->sync_shm, cap) && old->table->nslots <= cap;
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
        size_t area = sync_area(zone, zone->block_bytes, slot_size, &cap);
        if ((old->sync_shm != nullptr) != (zone->sync_mode != RL_SYNC_OFF) ||
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
    size_t area = sync_area(zone, zone->block_bytes, slot_size, &cap);
    ngx_shmtx_lock(&zone->shpool->mutex);
    zone->sync_shm = nullptr;
    zone->table = rl::table_format(static_cast<u_char*>(zone->block) + area, zone->block_bytes - area, slot_size, secret);
    if (zone->table != nullptr && area > 0) {
        zone->sync_shm = static_cast<rl_sync_shm_t*>(zone->block);
        rl_sync_format(zone->sync_shm, cap, shm_zone->shm.log);
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
    if (zone->algo_set && zone->policy.algo == rl::Algo::log) {
        rl_conf_error(cf, "the \"log\" algorithm cannot be synced (ratelimit zone \"%V\"): it keeps every "
                      "request's time, not counts that hosts can add; use \"sliding\"", &zone->name);
        return false;
    }
    if (!mode_set) zone->sync_mode = RL_SYNC_OPTIMISTIC;
    zone->sync_policies = ngx_array_create(cf->pool, 2, sizeof(rl::Policy));
    return zone->sync_policies != nullptr;
}

}  // namespace

// ratelimit_zone NAME key=STRING (rate=R | rate=$VAR default_rate=R | requests=N period=T) [burst=N|$VAR]
//                [size=S] [algo=A] [redis=NAME [sync=TIME [sync_mode=optimistic|lease]]]
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
        rl_conf_error(cf, "zone name \"%V\" is too long (%uz bytes at most)", &zone->name,
                           rl::kMaxZoneLen);
        return static_cast<char*>(NGX_CONF_ERROR);
    }
    for (size_t i = 0; i < zone->name.len; i++) {
        u_char ch = zone->name.data[i];
        if (!(isalnum(ch) || ch == '_' || ch == '-' || ch == '.')) {
            rl_conf_error(cf,
                               "invalid zone name \"%V\": only letters, digits, \"_\", \"-\" and \".\" are allowed",
                               &zone->name);
            return static_cast<char*>(NGX_CONF_ERROR);
        }
    }

    bool have_key = false, have_rate = false, have_requests = false, have_period = false, have_default = false;
    size_t size = kDefaultZoneSize;
    rl::Policy dflt;
    ngx_str_t sync_arg = ngx_null_string;
    bool mode_set = false;

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
        } else if (rl_arg(a, "rate=", v)) {
            if (rl_tier_is_variable(&v)) {
                zone->rate_cv = rl_complex_value(cf, &v);
                if (zone->rate_cv == nullptr) return static_cast<char*>(NGX_CONF_ERROR);
            } else if (!rl::parse_rate(rl_sv(v), zone->policy.requests, zone->policy.period_us)) {
                rl_conf_error(cf, "invalid rate \"%V\"", &a);
                return static_cast<char*>(NGX_CONF_ERROR);
            }
            have_rate = true;
        } else if (rl_arg(a, "default_rate=", v)) {
            // A variable rate's fallback: the zone's policy once the loop knows rate= is one.
            if (!rl::parse_rate(rl_sv(v), dflt.requests, dflt.period_us)) {
                rl_conf_error(cf, "invalid default_rate \"%V\"", &a);
                return static_cast<char*>(NGX_CONF_ERROR);
            }
            have_default = true;
        } else if (rl_arg(a, "requests=", v)) {
            if (!rl::parse_int(rl_sv(v), 1, rl::kMaxRequests, zone->policy.requests)) {
                rl_conf_error(cf, "invalid requests \"%V\"", &a);
                return static_cast<char*>(NGX_CONF_ERROR);
            }
            have_requests = true;
        } else if (rl_arg(a, "period=", v)) {
            if (!rl::parse_duration(rl_sv(v), zone->policy.period_us)) {
                rl_conf_error(cf, "invalid period \"%V\"", &a);
                return static_cast<char*>(NGX_CONF_ERROR);
            }
            have_period = true;
        } else if (rl_arg(a, "burst=", v)) {
            if (rl_tier_is_variable(&v)) {
                zone->burst_cv = rl_complex_value(cf, &v);
                if (zone->burst_cv == nullptr) return static_cast<char*>(NGX_CONF_ERROR);
            } else if (!rl::parse_int(rl_sv(v), 0, rl::kMaxRequests, zone->policy.burst)) {
                rl_conf_error(cf, "invalid burst \"%V\"", &a);
                return static_cast<char*>(NGX_CONF_ERROR);
            }
            zone->burst_set = true;
        } else if (rl_arg(a, "size=", v)) {
            ssize_t n = ngx_parse_size(&v);
            if (n == NGX_ERROR) {
                rl_conf_error(cf, "invalid size \"%V\"", &a);
                return static_cast<char*>(NGX_CONF_ERROR);
            }
            if (n < static_cast<ssize_t>(8 * ngx_pagesize)) {
                rl_conf_error(cf, "zone \"%V\" is too small", &zone->name);
                return static_cast<char*>(NGX_CONF_ERROR);
            }
            size = static_cast<size_t>(n);
        } else if (rl_arg(a, "redis=", v)) {
            zone->redis_name = v;
            if (zone->redis_name.len == 0) {
                rl_conf_error(cf, "invalid parameter \"%V\"", &a);
                return static_cast<char*>(NGX_CONF_ERROR);
            }
        } else if (rl_arg(a, "sync=", v)) {
            if (!rl::parse_duration(rl_sv(v), zone->sync_us) || zone->sync_us <= 0) {
                rl_conf_error(cf, "invalid sync interval \"%V\"", &a);
                return static_cast<char*>(NGX_CONF_ERROR);
            }
            sync_arg = a;
        } else if (rl_arg(a, "sync_mode=", v)) {
            if (rl_sv(v) == "optimistic") {
                zone->sync_mode = RL_SYNC_OPTIMISTIC;
            } else if (rl_sv(v) == "lease") {
                zone->sync_mode = RL_SYNC_LEASE;
            } else {
                rl_conf_error(cf, "invalid sync_mode \"%V\", it must be \"optimistic\" or \"lease\"", &v);
                return static_cast<char*>(NGX_CONF_ERROR);
            }
            mode_set = true;
        } else if (rl_arg(a, "algo=", v)) {
            if (!rl::parse_algo(rl_sv(v), zone->policy.algo)) {
                rl_conf_error(cf, "invalid algorithm \"%V\"", &v);
                return static_cast<char*>(NGX_CONF_ERROR);
            }
            zone->algo_set = true;
        } else {
            rl_conf_error(cf, "invalid parameter \"%V\"", &a);
            return static_cast<char*>(NGX_CONF_ERROR);
        }
    }

    if (!have_key) {
        rl_conf_error(cf, "\"key\" is required in ratelimit zone \"%V\"", &zone->name);
        return static_cast<char*>(NGX_CONF_ERROR);
    }
    if (have_rate == (have_requests && have_period) || have_requests != have_period) {
        rl_conf_error(cf,
                           "\"rate\" or \"requests\" and \"period\" are required in ratelimit zone \"%V\", "
                           "not both", &zone->name);
        return static_cast<char*>(NGX_CONF_ERROR);
    }
    if (!rl_tier_check_zone(cf, zone, have_default ? &dflt : nullptr)) return static_cast<char*>(NGX_CONF_ERROR);
    if (zone->algo_set && zone->burst_set && !rl::is_bucket(zone->policy.algo)) {
        std::string_view name = rl::algo_name(zone->policy.algo);
        ngx_str_t algo{name.size(), reinterpret_cast<u_char*>(const_cast<char*>(name.data()))};
        rl_conf_error(cf, "\"burst\" is not supported by the \"%V\" algorithm", &algo);
        return static_cast<char*>(NGX_CONF_ERROR);
    }

    rl::Policy check = zone->policy;
    if (!zone->algo_set) check.algo = rl::Algo::gcra;
    if (const char* why = rl::finish_policy(check)) {
        rl_conf_error(cf, "ratelimit zone \"%V\": %s", &zone->name, why);
        return static_cast<char*>(NGX_CONF_ERROR);
    }

    if (!check_sync(cf, zone, sync_arg, mode_set)) return static_cast<char*>(NGX_CONF_ERROR);

    ngx_shm_zone_t* shm_zone = ngx_shared_memory_add(cf, &zone->name, size, &ngx_http_ratelimit_module);
    if (shm_zone == nullptr) return static_cast<char*>(NGX_CONF_ERROR);
    if (shm_zone->data != nullptr) {
        rl_conf_error(cf, "duplicate zone \"%V\"", &zone->name);
        return static_cast<char*>(NGX_CONF_ERROR);
    }
    zone->shm_zone = shm_zone;
    shm_zone->init = rl_init_zone;
    shm_zone->data = zone;
    auto** all = static_cast<rl_zone_t**>(ngx_array_push(&mcf->zones));
    if (all == nullptr) return static_cast<char*>(NGX_CONF_ERROR);
    *all = zone;

    if (zone->algo_set && zone->policy.algo == rl::Algo::log && !rl_zone_check_log_fits(cf, zone, zone->policy, nullptr)) {
        return static_cast<char*>(NGX_CONF_ERROR);
    }
    return NGX_CONF_OK;
}

bool rl_zone_check_log_fits(ngx_conf_t* cf, rl_zone_t* zone, const rl::Policy& policy,
                            const rl_limit_t* where) noexcept {
    zone->uses_log = true;
    uint32_t slot = rl::slot_size_for(rl::ring_bytes(policy));
    if (rl::table_capacity(usable_bytes(zone->shm_zone->shm.size), slot) > 0) return true;
    if (where == nullptr) {
        rl_conf_error(cf,
                           "zone \"%V\" is too small for the sliding log of %L requests (%uD bytes per key)",
                           &zone->name, policy.requests, slot);
    } else {
        ngx_log_error(NGX_LOG_EMERG, cf->log, 0,
                      "zone \"%V\" is too small for the sliding log of %L requests (%uD bytes per key) in \"ratelimit\" "
                      "directive in %s:%ui",
                      &zone->name, policy.requests, slot, where->file, where->line);
    }
    return false;
}

namespace {

int64_t now_us() {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return static_cast<int64_t>(ts.tv_sec) * 1000000 + ts.tv_nsec / 1000;
}

}  // namespace

namespace {

// Locks each distinct zone of the results once, in address order, so that two requests
// never wait on each other. Returns the number of locks taken.
ngx_uint_t lock_zones(rl_result_t** results, ngx_uint_t n, ngx_slab_pool_t** locks) {
    ngx_uint_t nlocks = 0;
    for (ngx_uint_t i = 0; i < n; i++) {
        ngx_slab_pool_t* p = results[i]->applied->zone->shpool;
        ngx_uint_t j = 0;
        while (j < nlocks && locks[j] < p) j++;
        if (j < nlocks && locks[j] == p) continue;
        for (ngx_uint_t k = nlocks; k > j; k--) locks[k] = locks[k - 1];
        locks[j] = p;
        nlocks++;
    }
    for (ngx_uint_t i = 0; i < nlocks; i++) ngx_shmtx_lock(&locks[i]->mutex);
    return nlocks;
}

void unlock_zones(ngx_slab_pool_t** locks, ngx_uint_t nlocks) {
    for (ngx_uint_t i = nlocks; i > 0; i--) ngx_shmtx_unlock(&locks[i - 1]->mutex);
}

// The slot of a result's key, or nullptr when it cannot be used: an old worker finishing its
// requests during a reload may see a table laid out by the new configuration, and must never
// use more log ring than a slot has.
rl::Slot* slot_of(const rl_result_t& res) {
    const rl::Policy& policy = *res.policy;
    rl::TableHeader* table = res.applied->zone->table;
    if (policy.algo == rl::Algo::log && static_cast<uint64_t>(policy.requests) > rl::ring_capacity(table)) {
        return nullptr;
    }
    if (res.applied->zone->sync_shm && table->slot_size < rl::slot_size_for(sizeof(rl_sync_key_t))) return nullptr;
    return rl::table_acquire(table, res.hash, static_cast<uint8_t>(policy.algo), nullptr);
}

int64_t* ring_of(const rl_result_t& res, rl::Slot* slot) {
    return res.policy->algo == rl::Algo::log ? rl::slot_ring(slot) : nullptr;
}

}  // namespace

bool rl_decide_all(rl_result_t** results, ngx_uint_t n, void** scratch) noexcept {
    auto** slots = reinterpret_cast<rl::Slot**>(scratch);
    auto** locks = reinterpret_cast<ngx_slab_pool_t**>(scratch + n);
    ngx_uint_t nlocks = lock_zones(results, n, locks);

    // The clock is read under the locks: decisions on a zone then see time in lock order.
    int64_t now = now_us();
    bool all_allowed = true;
    for (ngx_uint_t i = 0; i < n; i++) {
        rl_result_t& res = *results[i];
        const rl_zone_t* zone = res.applied->zone;
        res.at = zone->sync_shm ? rl_sync_now(zone, now) : now;
        slots[i] = slot_of(res);
        if (slots[i] == nullptr) {
            res.decision = rl::Decision{};
            res.decision.allowed = true;
            res.decision.limit = res.policy->requests;
            continue;
        }
        if (zone->sync_shm) {
            res.decision = rl_sync_decide(res, slots[i], res.at);
        } else {
            res.decision = rl::decide(slots[i]->state, *res.policy, now, res.cost, ring_of(res, slots[i]));
        }
        all_allowed = all_allowed && res.decision.allowed;
    }
    for (ngx_uint_t i = 0; i < n; i++) {
        rl_result_t& res = *results[i];
        if (slots[i] == nullptr) continue;
        if (!all_allowed) {
            if (res.applied->zone->sync_shm) rl_sync_release(res, slots[i]);
            // Nothing is consumed: the limits that would have allowed report their untouched state.
            if (res.decision.allowed) {
                res.decision = rl::decide(slots[i]->state, *res.policy, res.at, 0, ring_of(res, slots[i]));
            }
            continue;
        }
        if (res.applied->zone->sync_shm) {
            rl_sync_commit(res, slots[i]);
        } else {
            if (res.policy->algo == rl::Algo::log) {
                rl::commit_log(res.decision, rl::slot_ring(slots[i]), *res.policy, res.cost);
            }
            slots[i]->state = res.decision.next;
        }
        res.consumed = res.cost > 0;
    }
    unlock_zones(locks, nlocks);
    return all_allowed;
}

void rl_refund_all(rl_result_t** results, ngx_uint_t n, void** scratch) noexcept {
    auto** locks = reinterpret_cast<ngx_slab_pool_t**>(scratch + n);
    ngx_uint_t nlocks = lock_zones(results, n, locks);
    int64_t now = now_us();
    for (ngx_uint_t i = 0; i < n; i++) {
        rl_result_t& res = *results[i];
        if (!res.consumed) continue;
        rl::Slot* slot = slot_of(res);
        const rl_zone_t* zone = res.applied->zone;
        if (slot != nullptr && zone->sync_shm) {
            rl_sync_refund(res, slot, rl_sync_now(zone, now));
        } else if (slot != nullptr) {
            rl::refund(slot->state, ring_of(res, slot), *res.policy, now, res.at, res.cost);
            // Headers report the state after the refund, as when shared memory alone rejects.
            res.decision = rl::decide(slot->state, *res.policy, now, 0, ring_of(res, slot));
        }
        res.consumed = false;
    }
    unlock_zones(locks, nlocks);
}
