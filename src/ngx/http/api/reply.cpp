// The API's replies: the zones, a key's state, a key's reset.
#include "ngx/http/api/reply.h"

#include "ngx/engine/snapshot.h"
#include "ngx/engine/top.h"
#include "ngx/http/api/top.h"
#include "ngx/redis/redis.h"
#include "ngx/stores/store.h"

#include "core/algo/algorithm.h"

namespace {

const char* store_name(const rl_zone_t* zone) { return zone->store->name; }

// A zone's object starts {"<label>":name,"store":...
void open_zone(rl_json_t& j, const rl_zone_t* zone, const char* label) {
    j.raw("{");
    j.key(label);
    j.str(rl_sv(zone->name));
    j.then_key("store");
    j.str(store_name(zone));
}


// A reply about one key of a zone starts {"zone":...,"store":...
void open_key_reply(rl_json_t& j, const rl_zone_t* zone) { open_zone(j, zone, "zone"); }

// The key's figures: remaining, reset, retry-after, in flight, block (a reply's, or a sync
// zone's global state's).
void write_figures(rl_json_t& j, const rl_key_state_t& s) {
    j.num("remaining", s.now.remaining);
    j.then_ms("reset_ms", s.now.reset_us);
    j.then_ms("retry_after_ms", s.retry_us);
    if (s.policy.algo == rl::Algo::concurrency) {
        j.then_num("in_flight", s.in_flight);
    }
    j.raw(",");
    if (s.blocked_us > 0) {
        j.num("blocked_until", (s.at_us + s.blocked_us + 999) / 1000);
        j.then_ms("blocked_for_ms", s.blocked_us);
    } else {
        j.raw("\"blocked_until\":null");
    }
}

// The counters of GET .../zones, in the order the dashboard's API.md lists them.
const struct {
    const char* name;
    rl_result_kind_e kind;
} kRequests[] = {
    {"passed", RL_RESULT_PASSED}, {"delayed", RL_RESULT_DELAYED}, {"rejected", RL_RESULT_REJECTED},
    {"blocked", RL_RESULT_BLOCKED}, {"rejected_dry_run", RL_RESULT_REJECTED_DRY_RUN},
    {"delayed_dry_run", RL_RESULT_DELAYED_DRY_RUN}, {"blocked_dry_run", RL_RESULT_BLOCKED_DRY_RUN},
    {"exempt", RL_RESULT_EXEMPT}, {"error_allowed", RL_RESULT_ERROR_ALLOWED},
    {"error_denied", RL_RESULT_ERROR_DENIED}, {"error_local", RL_RESULT_ERROR_LOCAL},
};
const char* const kErrors[RL_REDIS_ERR_N] = {
    "timeout", "refused", "reset", "protocol", "error_reply", "overflow", "out_of_bounds", "tls",
};
constexpr size_t kZoneTop = 3;  // the top keys a zone shows in GET .../zones

// Nanoseconds as seconds, a decimal without trailing zeros (a histogram's bound: 0.00025).
void seconds(rl_json_t& j, uint64_t ns) {
    uint64_t frac = ns % 1000000000;
    j.integer(static_cast<int64_t>(ns / 1000000000));
    if (frac == 0) return;
    char digits[10] = ".";
    for (int i = 9; i >= 1; i--, frac /= 10) digits[i] = static_cast<char>('0' + frac % 10);
    size_t n = 10;
    while (digits[n - 1] == '0') n--;
    j.put(digits, n);
}

// A count that is kept only with the counters: null without them.
void counter(rl_json_t& j, const char* k, bool counted, int64_t v) {
    if (counted) {
        j.then_num(k, v);
    } else {
        j.then_key(k);
        j.raw("null");
    }
}

// The zone's counters (the metrics'), and its first top keys.
void write_counts(rl_json_t& j, const rl_zone_t* zone, const rl_zone_snapshot_t& z, int64_t now) {
    j.then_num("top_k", zone->top_k);
    j.raw(",\"top\":[");
    rl::TopItem items[kZoneTop];
    rl::TopWindow w;
    size_t got = rl_top_read(const_cast<rl_zone_t*>(zone), now, items, kZoneTop, &w);
    for (size_t i = 0; i < got; i++) {
        if (i > 0) j.raw(",");
        rl_api_top_item(j, zone, items[i]);
    }
    j.raw("]");
    j.then_key("requests");
    if (z.counted) {
        j.raw("{");
        for (size_t k = 0; k < sizeof(kRequests) / sizeof(kRequests[0]); k++) {
            if (k > 0) j.raw(",");
            j.num(kRequests[k].name, static_cast<int64_t>(z.requests[kRequests[k].kind]));
        }
        j.raw("}");
    } else {
        j.raw("null");
    }
    if (z.concurrency) counter(j, "in_flight", z.counted, z.in_flight);
    if (z.redis) counter(j, "settle_failures", z.counted, static_cast<int64_t>(z.settle_failures));
}

// A zone's sync health: mode, interval, rounds, failures, hosts, the last round, keys sent.
void write_sync(rl_json_t& j, const rl_zone_t* zone, const rl_zone_snapshot_t& z) {
    j.raw(",\"sync\":{");
    j.key("mode");
    j.str(zone->sync_mode == RL_SYNC_LEASE ? "lease" : "optimistic");
    j.then_ms("interval_ms", zone->sync_us);
    j.then_num("rounds", static_cast<int64_t>(z.sync_rounds));
    j.then_num("failures", static_cast<int64_t>(z.sync_failures));
    j.then_num("hosts", z.sync_hosts);
    j.raw(",");
    // ngx_current_msec is CLOCK_MONOTONIC: the same in every worker.
    if (z.sync_last_ok == 0) {
        j.raw("\"last_round_ms_ago\":null");
    } else {
        j.num("last_round_ms_ago", static_cast<int64_t>(ngx_current_msec - z.sync_last_ok));
    }
    j.then_num("keys_sent", static_cast<int64_t>(z.sync_keys));
    j.raw("}");
}

// One zone of GET .../zones.
void write_zone(rl_json_t& j, const rl_zone_t* zone, int64_t now) {
    open_zone(j, zone, "name");
    if (zone->redis_name.len > 0) {
        j.then_key("redis");
        j.str(rl_sv(zone->redis_name));
    }
    j.then_key("policies");
    j.raw("[");
    if (zone->policies != nullptr && zone->policies->nelts > 0) {
        auto* ps = static_cast<rl::Policy*>(zone->policies->elts);
        for (ngx_uint_t k = 0; k < zone->policies->nelts; k++) {
            if (k > 0) j.raw(",");
            rl_json_policy(j, ps[k]);
        }
    } else {
        rl_json_policy(j, rl_zone_primary_policy(zone));
    }
    j.raw("]");
    j.then_key("tiered");
    j.raw(zone->rate_cv || zone->burst_cv || zone->concurrency_cv ? "true" : "false");
    rl_zone_snapshot_t z;
    rl_snapshot_zone(zone, &z);
    j.then_num("keys", static_cast<int64_t>(z.keys));
    j.then_num("capacity", static_cast<int64_t>(z.capacity));
    j.then_num("evictions", static_cast<int64_t>(z.evictions));
    if (z.sync) write_sync(j, zone, z);
    write_counts(j, zone, z, now);
    j.raw("}");
}

// One ratelimit_redis of GET .../zones: its counters, as its metrics.
void write_redis(rl_json_t& j, const rl_redis_snapshot_t& d) {
    j.raw("{");
    j.key("name");
    j.str(d.name);
    j.then_num("calls", static_cast<int64_t>(d.calls));
    j.then_num("checks", static_cast<int64_t>(d.checks));
    j.raw(",\"errors\":{");
    for (ngx_uint_t k = 0; k < RL_REDIS_ERR_N; k++) {
        if (k > 0) j.raw(",");
        j.num(kErrors[k], static_cast<int64_t>(d.errors[k]));
    }
    j.raw("}");
    j.then_num("reconnects", static_cast<int64_t>(d.reconnects));
    j.then_num("in_flight", d.in_flight);
    j.raw(",\"redirects\":{");
    j.num("moved", static_cast<int64_t>(d.moved));
    j.then_num("ask", static_cast<int64_t>(d.ask));
    j.raw("},\"round_trip\":{");
    uint64_t count = 0;
    for (ngx_uint_t k = 0; k <= kRlRoundTripBuckets; k++) count += d.round_trip[k];
    j.num("count", static_cast<int64_t>(count));
    j.p = ngx_slprintf(j.p, j.last, ",\"sum_s\":%.6f,\"buckets\":[", d.round_trip_s);
    uint64_t below = 0;
    for (ngx_uint_t k = 0; k < kRlRoundTripBuckets; k++) {
        below += d.round_trip[k];
        j.raw(k > 0 ? ",[" : "[");
        seconds(j, kRlRoundTripBoundsNs[k]);
        j.raw(",");
        j.integer(static_cast<int64_t>(below));
        j.raw("]");
    }
    j.raw("]}}");
}

}  // namespace

ngx_int_t rl_api_send_zones(ngx_http_request_t* r, const rl_engine_conf_t* ecf, bool write) noexcept {
    auto** zones = static_cast<rl_zone_t**>(ecf->zones.elts);
    size_t bytes = 128;
    auto** redis = static_cast<rl_redis_t**>(ecf->redis.elts);
    for (ngx_uint_t i = 0; i < ecf->redis.nelts; i++) bytes += 1024 + 6 * redis[i]->name.len;
    for (ngx_uint_t i = 0; i < ecf->zones.nelts; i++) {
        ngx_uint_t np = zones[i]->policies ? zones[i]->policies->nelts : 1;
        bytes += 1536 + 6 * (zones[i]->name.len + zones[i]->redis_name.len) + 256 * np + kZoneTop * kRlApiTopItemBytes;
    }
    rl_json_t j;
    if (!rl_json_alloc(r, &j, bytes)) return NGX_HTTP_INTERNAL_SERVER_ERROR;
    int64_t now = rl_top_now_us();
    j.raw("{");
    j.num("now_ms", now / 1000);
    j.then_key("write");
    j.raw(write ? "true" : "false");
    j.raw(",\"zones\":[");
    for (ngx_uint_t i = 0; i < ecf->zones.nelts; i++) {
        if (i > 0) j.raw(",");
        write_zone(j, zones[i], now);
    }
    j.raw("],\"redis\":[");
    bool first = true;
    for (ngx_uint_t i = 0; i < ecf->redis.nelts; i++) {
        rl_redis_snapshot_t d;
        if (!rl_snapshot_redis(redis[i], &d)) continue;
        if (!first) j.raw(",");
        first = false;
        write_redis(j, d);
    }
    j.raw("]}");
    return rl_json_send(r, NGX_HTTP_OK, j);
}


ngx_int_t rl_api_send_state(ngx_http_request_t* r, const rl_zone_t* zone, const rl_key_state_t& s,
                            const rl_key_state_t* global, std::string_view why) noexcept {
    rl_json_t j;
    if (!rl_json_alloc(r, &j, 2048 + 6 * (zone->name.len + why.size()))) return NGX_HTTP_INTERNAL_SERVER_ERROR;
    open_key_reply(j, zone);
    j.then_key("found");
    j.raw(s.found ? "true" : "false");
    j.then_key("policy");
    rl_json_policy(j, s.policy);
    j.then_num("limit", s.policy.requests);
    j.raw(",");
    write_figures(j, s);
    if (s.lease_units >= 0) {
        j.then_num("lease_units", s.lease_units);
    }
    if (global != nullptr) {
        j.raw(",\"global\":{");
        write_figures(j, *global);
        j.raw("}");
    } else if (zone->sync_us != 0) {
        j.raw(",\"global\":null,");
        j.key("global_error");
        j.str(why);
    }
    j.raw("}");
    return rl_json_send(r, NGX_HTTP_OK, j);
}


ngx_int_t rl_api_send_reset(ngx_http_request_t* r, const rl_zone_t* zone, ngx_uint_t local,
                            int64_t redis_keys) noexcept {
    rl_json_t j;
    if (!rl_json_alloc(r, &j, 256 + 6 * zone->name.len)) return NGX_HTTP_INTERNAL_SERVER_ERROR;
    open_key_reply(j, zone);
    j.raw(",\"reset\":true,");
    j.num("local_states", static_cast<int64_t>(local));
    if (redis_keys >= 0) {
        j.then_num("redis_keys_deleted", redis_keys);
    }
    j.raw("}");
    return rl_json_send(r, NGX_HTTP_OK, j);
}

