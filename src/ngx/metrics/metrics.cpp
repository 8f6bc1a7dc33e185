// ratelimit_metrics: the counters' shared memory (laid out once, found again by name on each
// reload) and the location handler that writes them in the Prometheus text format.
#include "ngx/metrics/metrics.h"

#include "core/algo/block.h"
#include "core/text/metrics_format.h"
#include "core/wire/redis_command.h"
#include "ngx/limits/ctx.h"
#include "ngx/redis/redis.h"
#include "ngx/sync/layout.h"

#include <ctime>

namespace {

// The zone's tag: no ratelimit_zone or `ratelimit zone=` can name the same shared memory.
u_char rl_metrics_tag;

constexpr uint32_t kMagic = 0x524c4d32;  // "RLM2"
constexpr size_t kNameMax = rl::kMaxZoneLen;  // a zone's longest name; nginx -t refuses a longer ratelimit_redis
// Zones and ratelimit_redis one configuration may name (nginx -t refuses more). The table holds
// twice as many: the names of the running configuration and of the one before it (whose
// workers may still be finishing requests); entries of older ones are reused.
constexpr uint32_t kMaxNames = 1000;
constexpr uint32_t kEntries = 2 * kMaxNames;

enum : uint32_t { kKindZone = 1, kKindRedis = 2 };

struct rl_metrics_entry_t {
    uint32_t kind;
    uint32_t name_len;
    uint64_t gen;  // the last configuration that named it
    u_char name[kNameMax];
    union {
        rl_metrics_zone_t zone;
        rl_metrics_redis_t redis;
    } c;
};

// Layout changes change entry_size: an old layout is then started afresh.
struct rl_metrics_shm_t {
    uint32_t magic;
    uint32_t entry_size;
    uint32_t n;
    uint32_t cap;
    uint64_t gen;  // configurations loaded since the table was laid out
    rl_metrics_entry_t entries[kEntries];
};
constexpr size_t kZoneSize = (sizeof(rl_metrics_shm_t) + 16 * 4096 + 4095) & ~size_t{4095};

struct rl_metrics_conf_t {
    rl_main_conf_t* mcf;
};

constexpr uint64_t kRoundTripBoundsNs[kRlRoundTripBuckets] = {
    100000, 250000, 500000, 1000000, 2500000, 5000000, 10000000, 25000000, 50000000, 100000000, 250000000,
    500000000, 1000000000,
};

bool same_name(const rl_metrics_entry_t* e, uint32_t kind, const ngx_str_t& name) {
    return e->kind == kind && e->name_len == name.len && ngx_memcmp(e->name, name.data, name.len) == 0;
}

// The entry of a name, marked as named by this configuration; a new name takes a free entry, or
// the one longest unnamed among those no configuration since the one before this names.
rl_metrics_entry_t* entry_for(rl_metrics_shm_t* shm, uint32_t kind, const ngx_str_t& name, ngx_log_t* log) {
    rl_metrics_entry_t* reuse = nullptr;
    for (uint32_t i = 0; i < shm->n; i++) {
        rl_metrics_entry_t* e = &shm->entries[i];
        if (same_name(e, kind, name)) {
            e->gen = shm->gen;
            return e;
        }
        if (e->gen + 1 < shm->gen && (reuse == nullptr || e->gen < reuse->gen)) reuse = e;
    }
    if (name.len > kNameMax || (shm->n == shm->cap && reuse == nullptr)) {
        // nginx -t refuses both (rl_metrics_postconfiguration): a table laid out by another build
        ngx_log_error(NGX_LOG_WARN, log, 0, "ratelimit_metrics: no metrics for %s \"%V\" (%s)",
                      kind == kKindZone ? "zone" : "ratelimit_redis", &name,
                      name.len > kNameMax ? "name too long" : "too many names");
        return nullptr;
    }
    rl_metrics_entry_t* e = reuse != nullptr ? reuse : &shm->entries[shm->n];
    e->kind = 0;  // while it changes, no scrape matches it (they read names of this configuration)
    ngx_memory_barrier();
    ngx_memzero(&e->c, sizeof(e->c));
    e->name_len = static_cast<uint32_t>(name.len);
    ngx_memcpy(e->name, name.data, name.len);
    e->gen = shm->gen;
    ngx_memory_barrier();
    e->kind = kind;
    if (reuse == nullptr) shm->n++;
    return e;
}

// In the master, at each (re)configuration; workers of the old configuration keep adding to
// the entries they know, which are the same ones.
ngx_int_t rl_metrics_init(ngx_shm_zone_t* shm_zone, void* data) noexcept {
    auto* conf = static_cast<rl_metrics_conf_t*>(shm_zone->data);
    auto* shpool = reinterpret_cast<ngx_slab_pool_t*>(shm_zone->shm.addr);
    auto* shm = static_cast<rl_metrics_shm_t*>(data != nullptr || shm_zone->shm.exists ? shpool->data : nullptr);
    if (shm == nullptr) {
        shm = static_cast<rl_metrics_shm_t*>(ngx_slab_alloc(shpool, sizeof(rl_metrics_shm_t)));
        if (shm == nullptr) return NGX_ERROR;
        shpool->data = shm;
        shm->magic = 0;
    }
    if (shm->magic != kMagic || shm->entry_size != sizeof(rl_metrics_entry_t)) {
        ngx_memzero(shm, sizeof(*shm));
        shm->magic = kMagic;
        shm->entry_size = sizeof(rl_metrics_entry_t);
        shm->cap = kEntries;
    }
    shm->gen++;
    ngx_log_t* log = shm_zone->shm.log;
    auto** zones = static_cast<rl_zone_t**>(conf->mcf->zones.elts);
    for (ngx_uint_t i = 0; i < conf->mcf->zones.nelts; i++) {
        rl_metrics_entry_t* e = entry_for(shm, kKindZone, zones[i]->name, log);
        zones[i]->metrics = e ? &e->c.zone : nullptr;
    }
    auto** redis = static_cast<rl_redis_t**>(conf->mcf->redis.elts);
    for (ngx_uint_t i = 0; i < conf->mcf->redis.nelts; i++) {
        rl_metrics_entry_t* e = entry_for(shm, kKindRedis, redis[i]->name, log);
        redis[i]->conn.metrics = e ? &e->c.redis : nullptr;
    }
    return NGX_OK;
}

// What the handler writes, read once, so that measuring and writing see the same numbers.
struct zone_snapshot_t {
    std::string_view name;
    uint64_t requests[RL_RESULT_N];
    uint64_t keys, capacity, evictions;
    bool concurrency;   // concurrency=N: its in-flight gauge
    int64_t in_flight;
    bool redis;         // decided in Redis per request: its settles can fail
    uint64_t settle_failures;
    bool sync;  // sync=TIME: its reconciliation's counters (kept in the zone's sync header)
    uint64_t sync_rounds, sync_keys, sync_failures;
    int64_t sync_hosts;
};

struct redis_snapshot_t {
    std::string_view name;
    uint64_t calls, checks, errors[RL_REDIS_ERR_N], reconnects, moved, ask;
    int64_t in_flight;
    uint64_t round_trip[kRlRoundTripBuckets + 1];
    double round_trip_s;
};

uint64_t load(const ngx_atomic_t& counter) { return static_cast<uint64_t>(counter); }

const std::string_view kResultNames[RL_RESULT_N] = {
    "passed", "rejected", "rejected_dry_run", "exempt", "error_allowed", "error_denied", "error_local",
    "delayed", "delayed_dry_run", "blocked", "blocked_dry_run",
};
const std::string_view kErrorNames[RL_REDIS_ERR_N] = {
    "timeout", "refused", "reset", "protocol", "error_reply", "overflow", "out_of_bounds", "tls",
};

struct snapshot_t {
    zone_snapshot_t* zones;
    ngx_uint_t nzones;
    redis_snapshot_t* redis;
    ngx_uint_t nredis;
};

bool take_snapshot(ngx_http_request_t* r, rl_main_conf_t* mcf, snapshot_t* s) {
    s->zones = static_cast<zone_snapshot_t*>(ngx_pcalloc(r->pool, (mcf->zones.nelts + 1) * sizeof(zone_snapshot_t)));
    s->redis = static_cast<redis_snapshot_t*>(ngx_pcalloc(r->pool, (mcf->redis.nelts + 1) * sizeof(redis_snapshot_t)));
    if (s->zones == nullptr || s->redis == nullptr) return false;
    s->nzones = s->nredis = 0;
    auto** zones = static_cast<rl_zone_t**>(mcf->zones.elts);
    for (ngx_uint_t i = 0; i < mcf->zones.nelts; i++) {
        rl_zone_t* zone = zones[i];
        if (zone->metrics == nullptr) continue;
        zone_snapshot_t& z = s->zones[s->nzones++];
        z.name = rl_sv(zone->name);
        for (ngx_uint_t k = 0; k < RL_RESULT_N; k++) z.requests[k] = load(zone->metrics->requests[k]);
        z.concurrency = zone->concurrency;
        z.in_flight = static_cast<int64_t>(load(zone->metrics->in_flight));
        z.redis = zone->redis != nullptr && zone->sync_shm == nullptr && !zone->concurrency;
        z.settle_failures = load(zone->metrics->settle_failures);
        // Under the zone's lock: the table's fields change together with its slots.
        ngx_shmtx_lock(&zone->shpool->mutex);
        z.keys = zone->table->used;
        z.capacity = zone->table->nslots;
        z.evictions = zone->table->evictions;
        if (const rl_sync_shm_t* h = zone->sync_shm) {
            z.sync = true;
            z.sync_rounds = h->rounds;
            z.sync_keys = h->keys_sent;
            z.sync_failures = h->failures;
            z.sync_hosts = h->hosts;
        }
        ngx_shmtx_unlock(&zone->shpool->mutex);
    }
    auto** all = static_cast<rl_redis_t**>(mcf->redis.elts);
    for (ngx_uint_t i = 0; i < mcf->redis.nelts; i++) {
        rl_metrics_redis_t* m = all[i]->conn.metrics;
        if (m == nullptr) continue;
        redis_snapshot_t& d = s->redis[s->nredis++];
        d.name = rl_sv(all[i]->name);
        d.calls = load(m->calls);
        d.checks = load(m->checks);
        for (ngx_uint_t k = 0; k < RL_REDIS_ERR_N; k++) d.errors[k] = load(m->errors[k]);
        d.reconnects = load(m->reconnects);
        d.moved = load(m->moved);
        d.ask = load(m->ask);
        d.in_flight = static_cast<int64_t>(load(m->in_flight));
        for (ngx_uint_t k = 0; k <= kRlRoundTripBuckets; k++) d.round_trip[k] = load(m->round_trip[k]);
        d.round_trip_s = static_cast<double>(load(m->round_trip_ns)) / 1e9;
    }
    return true;
}

// One family of counters with one label per zone (or per ratelimit_redis).
template <typename T, typename F>
void per_name(rl::MetricsWriter& w, const char* name, const char* label, const T* items, ngx_uint_t n, F value) {
    for (ngx_uint_t i = 0; i < n; i++) {
        rl::MetricLabel l{label, items[i].name};
        w.sample(name, &l, 1, value(items[i]));
    }
}

// sync=TIME zones only: one family each, a sample per sync zone.
template <typename F>
void per_sync_zone(rl::MetricsWriter& w, const char* name, const char* help, const char* type, const snapshot_t& s,
                   F value) {
    bool any = false;
    for (ngx_uint_t i = 0; i < s.nzones; i++) any = any || s.zones[i].sync;
    if (!any) return;
    w.family(name, help, type);
    for (ngx_uint_t i = 0; i < s.nzones; i++) {
        if (!s.zones[i].sync) continue;
        rl::MetricLabel l{"zone", s.zones[i].name};
        w.sample(name, &l, 1, value(s.zones[i]));
    }
}

void write_sync(rl::MetricsWriter& w, const snapshot_t& s) {
    per_sync_zone(w, "nginx_ratelimit_sync_rounds_total", "Reconciliations of sync zones with Redis (one per "
                  "interval per host).", "counter", s, [](const zone_snapshot_t& z) { return z.sync_rounds; });
    per_sync_zone(w, "nginx_ratelimit_sync_keys_total", "Keys sent to Redis by those reconciliations and by lease "
                  "asks.", "counter", s, [](const zone_snapshot_t& z) { return z.sync_keys; });
    per_sync_zone(w, "nginx_ratelimit_sync_failures_total", "Reconciliations or lease asks that failed (their keys "
                  "are sent again).", "counter", s, [](const zone_snapshot_t& z) { return z.sync_failures; });
    per_sync_zone(w, "nginx_ratelimit_sync_hosts", "Hosts that reconciled the zone recently, as Redis counts them.",
                  "gauge", s, [](const zone_snapshot_t& z) { return z.sync_hosts; });
}

void write_zones(rl::MetricsWriter& w, const snapshot_t& s) {
    if (s.nzones == 0) return;
    w.family("nginx_ratelimit_requests_total",
             "Requests by zone and by what the zone decided (counted once per zone that applied).", "counter");
    for (ngx_uint_t i = 0; i < s.nzones; i++) {
        for (ngx_uint_t k = 0; k < RL_RESULT_N; k++) {
            rl::MetricLabel l[] = {{"zone", s.zones[i].name}, {"result", kResultNames[k]}};
            w.sample("nginx_ratelimit_requests_total", l, 2, s.zones[i].requests[k]);
        }
    }
    w.family("nginx_ratelimit_zone_keys", "Keys held in the zone's shared memory.", "gauge");
    per_name(w, "nginx_ratelimit_zone_keys", "zone", s.zones, s.nzones, [](const zone_snapshot_t& z) { return z.keys; });
    w.family("nginx_ratelimit_zone_capacity_keys", "Keys the zone's shared memory can hold.", "gauge");
    per_name(w, "nginx_ratelimit_zone_capacity_keys", "zone", s.zones, s.nzones,
             [](const zone_snapshot_t& z) { return z.capacity; });
    w.family("nginx_ratelimit_zone_evictions_total", "Least recently used keys dropped to make room for new ones.",
             "counter");
    per_name(w, "nginx_ratelimit_zone_evictions_total", "zone", s.zones, s.nzones,
             [](const zone_snapshot_t& z) { return z.evictions; });
    bool any = false;
    for (ngx_uint_t i = 0; i < s.nzones; i++) any = any || s.zones[i].concurrency;
    if (any) {
        w.family("nginx_ratelimit_in_flight", "Requests of this host holding a slot of a concurrency zone.", "gauge");
        for (ngx_uint_t i = 0; i < s.nzones; i++) {
            if (!s.zones[i].concurrency) continue;
            rl::MetricLabel l{"zone", s.zones[i].name};
            w.sample("nginx_ratelimit_in_flight", &l, 1, s.zones[i].in_flight);
        }
    }
    any = false;
    for (ngx_uint_t i = 0; i < s.nzones; i++) any = any || s.zones[i].redis;
    if (any) {
        w.family("nginx_ratelimit_settle_failures_total",
                 "Settles (settle=) Redis did not take after a second try: their difference is lost.", "counter");
        for (ngx_uint_t i = 0; i < s.nzones; i++) {
            if (!s.zones[i].redis) continue;
            rl::MetricLabel l{"zone", s.zones[i].name};
            w.sample("nginx_ratelimit_settle_failures_total", &l, 1, s.zones[i].settle_failures);
        }
    }
    write_sync(w, s);
}

void write_redis(rl::MetricsWriter& w, const snapshot_t& s) {
    if (s.nredis == 0) return;
    const redis_snapshot_t* d = s.redis;
    w.family("nginx_ratelimit_redis_calls_total", "Script runs sent to Redis (each carries the checks of many requests).",
             "counter");
    per_name(w, "nginx_ratelimit_redis_calls_total", "redis", d, s.nredis, [](const redis_snapshot_t& x) { return x.calls; });
    w.family("nginx_ratelimit_redis_checks_total", "Checks (one per request and zone) carried by those script runs.",
             "counter");
    per_name(w, "nginx_ratelimit_redis_checks_total", "redis", d, s.nredis, [](const redis_snapshot_t& x) { return x.checks; });
    w.family("nginx_ratelimit_redis_errors_total", "Redis failures by reason; ratelimit_on_error applied to the "
             "requests concerned.", "counter");
    for (ngx_uint_t i = 0; i < s.nredis; i++) {
        for (ngx_uint_t k = 0; k < RL_REDIS_ERR_N; k++) {
            rl::MetricLabel l[] = {{"redis", d[i].name}, {"reason", kErrorNames[k]}};
            w.sample("nginx_ratelimit_redis_errors_total", l, 2, d[i].errors[k]);
        }
    }
    w.family("nginx_ratelimit_redis_reconnects_total", "Connections opened again after a failure.", "counter");
    per_name(w, "nginx_ratelimit_redis_reconnects_total", "redis", d, s.nredis,
             [](const redis_snapshot_t& x) { return x.reconnects; });
    w.family("nginx_ratelimit_redis_in_flight", "Commands sent and not answered yet, in all workers.", "gauge");
    per_name(w, "nginx_ratelimit_redis_in_flight", "redis", d, s.nredis, [](const redis_snapshot_t& x) { return x.in_flight; });
    w.family("nginx_ratelimit_redis_redirects_total", "Redis Cluster redirections (MOVED, ASK) followed.", "counter");
    for (ngx_uint_t i = 0; i < s.nredis; i++) {
        rl::MetricLabel moved[] = {{"redis", d[i].name}, {"kind", "moved"}};
        w.sample("nginx_ratelimit_redis_redirects_total", moved, 2, d[i].moved);
        rl::MetricLabel ask[] = {{"redis", d[i].name}, {"kind", "ask"}};
        w.sample("nginx_ratelimit_redis_redirects_total", ask, 2, d[i].ask);
    }
    w.family("nginx_ratelimit_redis_round_trip_seconds", "Time from writing a script run to reading its reply.",
             "histogram");
    double bounds[kRlRoundTripBuckets];
    for (ngx_uint_t k = 0; k < kRlRoundTripBuckets; k++) bounds[k] = static_cast<double>(kRoundTripBoundsNs[k]) / 1e9;
    for (ngx_uint_t i = 0; i < s.nredis; i++) {
        rl::MetricLabel l{"redis", d[i].name};
        w.histogram("nginx_ratelimit_redis_round_trip_seconds", &l, 1, bounds, d[i].round_trip, kRlRoundTripBuckets,
                    d[i].round_trip_s);
    }
}

ngx_int_t rl_metrics_handler(ngx_http_request_t* r) noexcept {
    if (!(r->method & (NGX_HTTP_GET | NGX_HTTP_HEAD))) return NGX_HTTP_NOT_ALLOWED;
    ngx_int_t rc = ngx_http_discard_request_body(r);
    if (rc != NGX_OK) return rc;
    auto* mcf = static_cast<rl_main_conf_t*>(ngx_http_get_module_main_conf(r, ngx_http_ratelimit_module));
    snapshot_t s;
    if (!take_snapshot(r, mcf, &s)) return NGX_HTTP_INTERNAL_SERVER_ERROR;

    rl::MetricsWriter measure(nullptr, 0);
    write_zones(measure, s);
    write_redis(measure, s);
    size_t len = measure.length();
    ngx_buf_t* b = len ? ngx_create_temp_buf(r->pool, len) : static_cast<ngx_buf_t*>(ngx_calloc_buf(r->pool));
    if (b == nullptr) return NGX_HTTP_INTERNAL_SERVER_ERROR;
    rl::MetricsWriter w(reinterpret_cast<char*>(b->pos), len);
    write_zones(w, s);
    write_redis(w, s);
    b->last = b->pos + len;
    b->last_buf = r == r->main ? 1 : 0;
    b->last_in_chain = 1;

    r->headers_out.status = NGX_HTTP_OK;
    r->headers_out.content_length_n = static_cast<off_t>(len);
    ngx_str_set(&r->headers_out.content_type, "text/plain; version=0.0.4");
    r->headers_out.content_type_len = r->headers_out.content_type.len;
    rc = ngx_http_send_header(r);
    if (rc == NGX_ERROR || rc > NGX_OK || r->header_only) return rc;
    ngx_chain_t out{b, nullptr};
    return ngx_http_output_filter(r, &out);
}

}  // namespace

// nginx -t: what cannot be exported is refused, saying why (with ratelimit_metrics only).
ngx_int_t rl_metrics_postconfiguration(ngx_conf_t* cf, const rl_main_conf_t* mcf) noexcept {
    bool on = false;
    ngx_list_part_t* part = &cf->cycle->shared_memory.part;
    auto* shm = static_cast<ngx_shm_zone_t*>(part->elts);
    for (ngx_uint_t i = 0;; i++) {
        if (i >= part->nelts) {
            if (part->next == nullptr) break;
            part = part->next;
            shm = static_cast<ngx_shm_zone_t*>(part->elts);
            i = 0;
            if (part->nelts == 0) continue;
        }
        if (shm[i].tag == &rl_metrics_tag) on = true;
    }
    if (!on) return NGX_OK;
    ngx_uint_t names = mcf->zones.nelts + mcf->redis.nelts;
    if (names > kMaxNames) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "ratelimit_metrics exports at most %ui zones and ratelimit_redis, this configuration "
                           "names %ui", static_cast<ngx_uint_t>(kMaxNames), names);
        return NGX_ERROR;
    }
    auto** redis = static_cast<rl_redis_t**>(mcf->redis.elts);
    for (ngx_uint_t i = 0; i < mcf->redis.nelts; i++) {
        if (redis[i]->name.len <= kNameMax) continue;
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "ratelimit_metrics cannot export ratelimit_redis \"%V\": its name is longer than %uz bytes",
                           &redis[i]->name, kNameMax);
        return NGX_ERROR;
    }
    return NGX_OK;
}

// ratelimit_metrics;  (location)
char* rl_metrics_directive(ngx_conf_t* cf, ngx_command_t*, void*) noexcept {
    auto* clcf = static_cast<ngx_http_core_loc_conf_t*>(ngx_http_conf_get_module_loc_conf(cf, ngx_http_core_module));
    if (clcf->handler == rl_metrics_handler) return const_cast<char*>("is duplicate");
    clcf->handler = rl_metrics_handler;
    ngx_str_t name = ngx_string("ratelimit:metrics");
    ngx_shm_zone_t* shm_zone = ngx_shared_memory_add(cf, &name, kZoneSize, &rl_metrics_tag);
    if (shm_zone == nullptr) return static_cast<char*>(NGX_CONF_ERROR);
    if (shm_zone->data == nullptr) {
        auto* conf = static_cast<rl_metrics_conf_t*>(ngx_pcalloc(cf->pool, sizeof(rl_metrics_conf_t)));
        if (conf == nullptr) return static_cast<char*>(NGX_CONF_ERROR);
        conf->mcf = static_cast<rl_main_conf_t*>(ngx_http_conf_get_module_main_conf(cf, ngx_http_ratelimit_module));
        shm_zone->init = rl_metrics_init;
        shm_zone->data = conf;
    }
    return NGX_CONF_OK;
}

void rl_metrics_count_results(const rl_ctx_t* ctx, const rl_loc_conf_t* lcf) noexcept {
    for (ngx_uint_t i = 0; i < ctx->nresults; i++) {
        const rl_result_t& res = ctx->results[i];
        rl_metrics_zone_t* m = res.applied->zone->metrics;
        if (m == nullptr) continue;
        rl_result_kind_e kind;
        switch (res.store) {
        case RL_STORE_SHM:
        case RL_STORE_REDIS:
            if (res.decision.allowed && res.decision.delay_us > 0) {
                kind = lcf->dry_run ? RL_RESULT_DELAYED_DRY_RUN : RL_RESULT_DELAYED;
            } else if (res.decision.allowed) {
                kind = RL_RESULT_PASSED;
            } else if (res.decision.block == rl::kBlockLive) {
                kind = lcf->dry_run ? RL_RESULT_BLOCKED_DRY_RUN : RL_RESULT_BLOCKED;
            } else {
                kind = lcf->dry_run ? RL_RESULT_REJECTED_DRY_RUN : RL_RESULT_REJECTED;
            }
            break;
        case RL_STORE_LOCAL:
            kind = RL_RESULT_ERROR_LOCAL;
            break;
        case RL_STORE_FAILED:
            kind = lcf->on_error == RL_ON_ERROR_DENY    ? RL_RESULT_ERROR_DENIED
                   : lcf->on_error == RL_ON_ERROR_LOCAL ? RL_RESULT_ERROR_LOCAL
                                                        : RL_RESULT_ERROR_ALLOWED;
            break;
        default:
            continue;  // not asked: a shared-memory limit had already rejected the request
        }
        rl_metrics_count(m, kind);
    }
}

uint64_t rl_metrics_now_ns(const rl_metrics_redis_t* m) noexcept {
    if (m == nullptr) return 0;
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return static_cast<uint64_t>(ts.tv_sec) * 1000000000u + static_cast<uint64_t>(ts.tv_nsec);
}

void rl_metrics_round_trip(rl_metrics_redis_t* m, uint64_t sent_ns) noexcept {
    if (m == nullptr || sent_ns == 0) return;
    uint64_t took = rl_metrics_now_ns(m) - sent_ns;
    ngx_uint_t b = 0;
    while (b < kRlRoundTripBuckets && took > kRoundTripBoundsNs[b]) b++;
    rl_metrics_add(&m->round_trip[b], 1);
    rl_metrics_add(&m->round_trip_ns, static_cast<ngx_atomic_int_t>(took));
}
