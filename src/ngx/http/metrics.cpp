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

// A sample's labels: the zone's or the ratelimit_redis's name, the subsystem of another front
// end's (stream), and one more label when given.
struct labels_t {
    rl::MetricLabel l[3];
    size_t n = 0;
    labels_t(const char* key, std::string_view name, std::string_view subsystem, const char* extra = nullptr,
             std::string_view value = {}) {
        l[n++] = {key, name};
        if (!subsystem.empty()) l[n++] = {"subsystem", subsystem};
        if (extra != nullptr) l[n++] = {extra, value};
    }
};

// One family with a sample per item `want` takes.
template <typename T, typename Want, typename F>
void family(rl::MetricsWriter& w, const char* name, const char* help, const char* type, const char* key,
            const T* items, ngx_uint_t n, Want want, F value) {
    bool any = false;
    for (ngx_uint_t i = 0; i < n; i++) any = any || want(items[i]);
    if (!any) return;
    w.family(name, help, type);
    for (ngx_uint_t i = 0; i < n; i++) {
        if (!want(items[i])) continue;
        labels_t l(key, items[i].name, items[i].subsystem);
        w.sample(name, l.l, l.n, value(items[i]));
    }
}

// A family of counters by result: the zones `want` takes, each result of `counts`.
template <typename Want, typename Counts>
void by_result(rl::MetricsWriter& w, const char* name, const char* help, const rl_snapshot_t& s, Want want,
               Counts counts) {
    bool any = false;
    for (ngx_uint_t i = 0; i < s.nzones; i++) any = any || want(s.zones[i]);
    if (!any) return;
    w.family(name, help, "counter");
    for (ngx_uint_t i = 0; i < s.nzones; i++) {
        if (!want(s.zones[i])) continue;
        const uint64_t* c = counts(s.zones[i]);
        for (ngx_uint_t k = 0; k < RL_RESULT_N; k++) {
            rl::MetricLabel l[] = {{"zone", s.zones[i].name}, {"result", kResultNames[k]}};
            w.sample(name, l, 2, c[k]);
        }
    }
}

void write_zones(rl::MetricsWriter& w, const rl_snapshot_t& s) {
    const rl_zone_snapshot_t* z = s.zones;
    auto own = [](const rl_zone_snapshot_t& x) { return x.subsystem.empty(); };
    auto stream = [](const rl_zone_snapshot_t& x) { return !x.subsystem.empty(); };
    by_result(w, "nginx_ratelimit_requests_total", "Requests by zone and by what the zone decided (counted once per "
              "zone that applied).", s, own, [](const rl_zone_snapshot_t& x) { return x.requests; });
    by_result(w, "nginx_ratelimit_connections_total", "stream{}: TCP connections and UDP sessions by zone and by what "
              "the zone decided.", s, stream, [](const rl_zone_snapshot_t& x) { return x.requests; });
    by_result(w, "nginx_ratelimit_datagrams_total", "stream{}: datagrams of admitted UDP sessions by zone (at=datagram) "
              "and by what the zone decided.", s, stream, [](const rl_zone_snapshot_t& x) { return x.datagrams; });
    auto table = [](const rl_zone_snapshot_t& x) { return x.table; };
    family(w, "nginx_ratelimit_zone_keys", "Keys held in the zone's shared memory.", "gauge", "zone", z, s.nzones,
           table, [](const rl_zone_snapshot_t& x) { return x.keys; });
    family(w, "nginx_ratelimit_zone_capacity_keys", "Keys the zone's shared memory can hold.", "gauge", "zone", z,
           s.nzones, table, [](const rl_zone_snapshot_t& x) { return x.capacity; });
    family(w, "nginx_ratelimit_zone_evictions_total", "Least recently used keys dropped to make room for new ones.",
           "counter", "zone", z, s.nzones, table, [](const rl_zone_snapshot_t& x) { return x.evictions; });
    family(w, "nginx_ratelimit_in_flight", "Requests (stream: connections, sessions) of this host holding a slot of "
           "a concurrency zone.", "gauge", "zone", z, s.nzones, [](const rl_zone_snapshot_t& x) { return x.concurrency; },
           [](const rl_zone_snapshot_t& x) { return x.in_flight; });
    family(w, "nginx_ratelimit_settle_failures_total", "Settles (settle=) Redis did not take after a second try: "
           "their difference is lost.", "counter", "zone", z, s.nzones,
           [](const rl_zone_snapshot_t& x) { return x.redis && x.subsystem.empty(); },
           [](const rl_zone_snapshot_t& x) { return x.settle_failures; });
    auto sync = [](const rl_zone_snapshot_t& x) { return x.sync; };
    family(w, "nginx_ratelimit_sync_rounds_total", "Reconciliations of sync zones with Redis (one per interval per "
           "host).", "counter", "zone", z, s.nzones, sync, [](const rl_zone_snapshot_t& x) { return x.sync_rounds; });
    family(w, "nginx_ratelimit_sync_keys_total", "Keys sent to Redis by those reconciliations and by lease asks.",
           "counter", "zone", z, s.nzones, sync, [](const rl_zone_snapshot_t& x) { return x.sync_keys; });
    family(w, "nginx_ratelimit_sync_failures_total", "Reconciliations or lease asks that failed (their keys are sent "
           "again).", "counter", "zone", z, s.nzones, sync, [](const rl_zone_snapshot_t& x) { return x.sync_failures; });
    family(w, "nginx_ratelimit_sync_hosts", "Hosts that reconciled the zone recently, as Redis counts them.", "gauge",
           "zone", z, s.nzones, sync, [](const rl_zone_snapshot_t& x) { return x.sync_hosts; });
}

void write_redis(rl::MetricsWriter& w, const rl_snapshot_t& s) {
    const rl_redis_snapshot_t* d = s.redis;
    ngx_uint_t n = s.nredis;
    auto all = [](const rl_redis_snapshot_t&) { return true; };
    family(w, "nginx_ratelimit_redis_calls_total", "Script runs sent to Redis (each carries the checks of many "
           "requests).", "counter", "redis", d, n, all, [](const rl_redis_snapshot_t& x) { return x.calls; });
    family(w, "nginx_ratelimit_redis_checks_total", "Checks (one per request and zone) carried by those script runs.",
           "counter", "redis", d, n, all, [](const rl_redis_snapshot_t& x) { return x.checks; });
    if (n == 0) return;
    w.family("nginx_ratelimit_redis_errors_total", "Redis failures by reason; ratelimit_on_error applied to the "
             "requests concerned.", "counter");
    for (ngx_uint_t i = 0; i < n; i++) {
        for (ngx_uint_t k = 0; k < RL_REDIS_ERR_N; k++) {
            labels_t l("redis", d[i].name, d[i].subsystem, "reason", kErrorNames[k]);
            w.sample("nginx_ratelimit_redis_errors_total", l.l, l.n, d[i].errors[k]);
        }
    }
    family(w, "nginx_ratelimit_redis_reconnects_total", "Connections opened again after a failure.", "counter", "redis",
           d, n, all, [](const rl_redis_snapshot_t& x) { return x.reconnects; });
    family(w, "nginx_ratelimit_redis_in_flight", "Commands sent and not answered yet, in all workers.", "gauge", "redis",
           d, n, all, [](const rl_redis_snapshot_t& x) { return x.in_flight; });
    w.family("nginx_ratelimit_redis_redirects_total", "Redis Cluster redirections (MOVED, ASK) followed.", "counter");
    for (ngx_uint_t i = 0; i < n; i++) {
        labels_t moved("redis", d[i].name, d[i].subsystem, "kind", "moved");
        w.sample("nginx_ratelimit_redis_redirects_total", moved.l, moved.n, d[i].moved);
        labels_t ask("redis", d[i].name, d[i].subsystem, "kind", "ask");
        w.sample("nginx_ratelimit_redis_redirects_total", ask.l, ask.n, d[i].ask);
    }
    w.family("nginx_ratelimit_redis_round_trip_seconds", "Time from writing a script run to reading its reply.",
             "histogram");
    double bounds[kRlRoundTripBuckets];
    for (ngx_uint_t k = 0; k < kRlRoundTripBuckets; k++) bounds[k] = static_cast<double>(kRlRoundTripBoundsNs[k]) / 1e9;
    for (ngx_uint_t i = 0; i < n; i++) {
        labels_t l("redis", d[i].name, d[i].subsystem);
        w.histogram("nginx_ratelimit_redis_round_trip_seconds", l.l, l.n, bounds, d[i].round_trip, kRlRoundTripBuckets,
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
    // The stream module's counters, when it is loaded (its own .so, its own metrics zone).
    static ngx_str_t stream_zone = ngx_string("ratelimit:stream");
    auto* cycle = const_cast<ngx_cycle_t*>(ngx_cycle);
    if (!rl_snapshot_add(r->pool, cycle, stream_zone, "stream", &s)) return NGX_HTTP_INTERNAL_SERVER_ERROR;

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
