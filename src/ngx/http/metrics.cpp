// ratelimit_metrics: the location handler that writes the counters (engine/snapshot.h) in the
// Prometheus text format.
#include "ngx/http/metrics.h"

#include "ngx/engine/metrics_zone.h"
#include "ngx/engine/snapshot.h"
#include "ngx/http/conf.h"
#include "ngx/http/send.h"

#include "core/text/metrics_format.h"

namespace {

const std::string_view kResultNames[RL_RESULT_N] = {
    "passed", "rejected", "rejected_dry_run", "exempt", "error_allowed", "error_denied", "error_local",
    "delayed", "delayed_dry_run", "blocked", "blocked_dry_run",
};
const std::string_view kErrorNames[RL_REDIS_ERR_N] = {
    "timeout", "refused", "reset", "protocol", "error_reply", "overflow", "out_of_bounds", "tls",
};

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
void per_sync_zone(rl::MetricsWriter& w, const char* name, const char* help, const char* type, const rl_snapshot_t& s,
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

void write_sync(rl::MetricsWriter& w, const rl_snapshot_t& s) {
    per_sync_zone(w, "nginx_ratelimit_sync_rounds_total", "Reconciliations of sync zones with Redis (one per "
                  "interval per host).", "counter", s, [](const rl_zone_snapshot_t& z) { return z.sync_rounds; });
    per_sync_zone(w, "nginx_ratelimit_sync_keys_total", "Keys sent to Redis by those reconciliations and by lease "
                  "asks.", "counter", s, [](const rl_zone_snapshot_t& z) { return z.sync_keys; });
    per_sync_zone(w, "nginx_ratelimit_sync_failures_total", "Reconciliations or lease asks that failed (their keys "
                  "are sent again).", "counter", s, [](const rl_zone_snapshot_t& z) { return z.sync_failures; });
    per_sync_zone(w, "nginx_ratelimit_sync_hosts", "Hosts that reconciled the zone recently, as Redis counts them.",
                  "gauge", s, [](const rl_zone_snapshot_t& z) { return z.sync_hosts; });
}

void write_zones(rl::MetricsWriter& w, const rl_snapshot_t& s) {
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
    per_name(w, "nginx_ratelimit_zone_keys", "zone", s.zones, s.nzones, [](const rl_zone_snapshot_t& z) { return z.keys; });
    w.family("nginx_ratelimit_zone_capacity_keys", "Keys the zone's shared memory can hold.", "gauge");
    per_name(w, "nginx_ratelimit_zone_capacity_keys", "zone", s.zones, s.nzones,
             [](const rl_zone_snapshot_t& z) { return z.capacity; });
    w.family("nginx_ratelimit_zone_evictions_total", "Least recently used keys dropped to make room for new ones.",
             "counter");
    per_name(w, "nginx_ratelimit_zone_evictions_total", "zone", s.zones, s.nzones,
             [](const rl_zone_snapshot_t& z) { return z.evictions; });
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

void write_redis(rl::MetricsWriter& w, const rl_snapshot_t& s) {
    if (s.nredis == 0) return;
    const rl_redis_snapshot_t* d = s.redis;
    w.family("nginx_ratelimit_redis_calls_total", "Script runs sent to Redis (each carries the checks of many requests).",
             "counter");
    per_name(w, "nginx_ratelimit_redis_calls_total", "redis", d, s.nredis, [](const rl_redis_snapshot_t& x) { return x.calls; });
    w.family("nginx_ratelimit_redis_checks_total", "Checks (one per request and zone) carried by those script runs.",
             "counter");
    per_name(w, "nginx_ratelimit_redis_checks_total", "redis", d, s.nredis, [](const rl_redis_snapshot_t& x) { return x.checks; });
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
             [](const rl_redis_snapshot_t& x) { return x.reconnects; });
    w.family("nginx_ratelimit_redis_in_flight", "Commands sent and not answered yet, in all workers.", "gauge");
    per_name(w, "nginx_ratelimit_redis_in_flight", "redis", d, s.nredis, [](const rl_redis_snapshot_t& x) { return x.in_flight; });
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
    for (ngx_uint_t k = 0; k < kRlRoundTripBuckets; k++) bounds[k] = static_cast<double>(kRlRoundTripBoundsNs[k]) / 1e9;
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
    rl_snapshot_t s;
    if (!rl_snapshot_take(r->pool, &mcf->engine, &s)) return NGX_HTTP_INTERNAL_SERVER_ERROR;

    rl::MetricsWriter measure(nullptr, 0);
    write_zones(measure, s);
    write_redis(measure, s);
    size_t len = measure.length();
    auto* body = static_cast<u_char*>(len > 0 ? ngx_pnalloc(r->pool, len) : nullptr);
    if (len > 0 && body == nullptr) return NGX_HTTP_INTERNAL_SERVER_ERROR;
    rl::MetricsWriter w(reinterpret_cast<char*>(body), len);
    write_zones(w, s);
    write_redis(w, s);
    return rl_http_send(r, NGX_HTTP_OK, "text/plain; version=0.0.4", body, len);
}

}  // namespace

// ratelimit_metrics;  (location)
char* rl_metrics_directive(ngx_conf_t* cf, ngx_command_t*, void*) noexcept {
    auto* clcf = static_cast<ngx_http_core_loc_conf_t*>(ngx_http_conf_get_module_loc_conf(cf, ngx_http_core_module));
    if (clcf->handler == rl_metrics_handler) return const_cast<char*>("is duplicate");
    clcf->handler = rl_metrics_handler;
    ngx_str_t name = ngx_string("ratelimit:metrics");
    auto* mcf = static_cast<rl_main_conf_t*>(ngx_http_conf_get_module_main_conf(cf, ngx_http_ratelimit_module));
    return rl_metrics_zone_add(cf, &mcf->engine, &name) != nullptr ? NGX_CONF_OK : static_cast<char*>(NGX_CONF_ERROR);
}
