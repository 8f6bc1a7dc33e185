// ratelimit_api: the zones and one key's state as JSON, and a key's reset, in the zone's store;
// the dashboard that shows them (dashboard/API.md).
//
//   GET    .../zones                    every zone: store, policies, keys, capacity, evictions, sync,
//                                       top keys, counters; every ratelimit_redis's counters
//   GET    .../zones/NAME?key=K|addr=A  one key: remaining, reset, retry-after (cost 1), block, in flight
//   GET    .../zones/NAME/top?n=N       the keys the zone rejects most, lately
//   DELETE .../zones/NAME?key=K|addr=A  the key starts afresh, and leaves the top keys (write=on only)
//   GET    .../ (Accept: text/html), .../app.js, .../style.css, .../icon.svg   the dashboard
//
// Shared memory (and sync zones' local view, and in-flight slots) is read under the zone's lock
// on a copy (engine/inspect.h): nothing is consumed, no slot is made for an unknown key. Redis
// zones are asked by the zone's own Lua (redis.cpp), the request waiting without blocking the
// worker.
#include "ngx/http/api/api.h"

#include "ngx/engine/metrics_zone.h"
#include "ngx/engine/top.h"
#include "ngx/http/api/key.h"
#include "ngx/http/api/page.h"
#include "ngx/http/api/redis.h"
#include "ngx/http/api/reply.h"
#include "ngx/http/api/top.h"

namespace {

ngx_int_t rl_api_handler(ngx_http_request_t* r) noexcept;

// What a request asks for, by the end of its path.
enum route_e {
    ROUTE_NONE = 0,
    ROUTE_ZONES,  // .../zones
    ROUTE_ZONE,   // .../zones/NAME
    ROUTE_TOP,    // .../zones/NAME/top
    ROUTE_FILE,   // the dashboard's: .../ (the page), .../app.js...
};

route_e route(std::string_view uri, std::string_view* name) {
    static constexpr std::string_view kZones = "/zones", kTop = "/top";
    *name = {};
    if (uri.size() >= kZones.size() && uri.substr(uri.size() - kZones.size()) == kZones) return ROUTE_ZONES;
    size_t at = uri.rfind("/zones/");
    if (at != std::string_view::npos) {
        std::string_view rest = uri.substr(at + kZones.size() + 1);
        size_t slash = rest.find('/');
        *name = rest.substr(0, slash);
        if (slash == std::string_view::npos) return rest.empty() ? ROUTE_ZONES : ROUTE_ZONE;
        return rest.substr(slash) == kTop ? ROUTE_TOP : ROUTE_NONE;
    }
    *name = uri.substr(uri.rfind('/') + 1);
    return rl_api_is_file(*name) ? ROUTE_FILE : ROUTE_NONE;
}

ngx_int_t inspect_local(ngx_http_request_t* r, rl_zone_t* zone, const rl::KeyHash& hash) {
    rl_key_state_t s;
    if (!rl_inspect_local(r->pool, zone, hash, &s)) return NGX_HTTP_INTERNAL_SERVER_ERROR;
    return rl_api_send_state(r, zone, s);
}

// A reset is logged once a second per zone and worker at most (a storm of DELETEs is not a
// storm of lines), with the resets of the second before that were not.
void log_reset(ngx_http_request_t* r, rl_zone_t* zone) {
    if (zone->reset_logged == ngx_time()) {
        zone->resets_unlogged++;
        return;
    }
    if (zone->resets_unlogged > 0) {
        ngx_log_error(NGX_LOG_NOTICE, r->connection->log, 0, "ratelimit_api: a key of zone \"%V\" reset (and %ui "
                      "more not logged)", &zone->name, zone->resets_unlogged);
    } else {
        ngx_log_error(NGX_LOG_NOTICE, r->connection->log, 0, "ratelimit_api: a key of zone \"%V\" reset", &zone->name);
    }
    zone->reset_logged = ngx_time();
    zone->resets_unlogged = 0;
}

ngx_int_t rl_api_handler(ngx_http_request_t* r) noexcept {
    auto* lcf = static_cast<rl_loc_conf_t*>(ngx_http_get_module_loc_conf(r, ngx_http_ratelimit_module));
    auto* mcf = static_cast<rl_main_conf_t*>(ngx_http_get_module_main_conf(r, ngx_http_ratelimit_module));
    ngx_int_t rc = ngx_http_discard_request_body(r);
    if (rc != NGX_OK) return rc;
    std::string_view name;
    route_e to = route(rl_sv(r->uri), &name);
    if (to == ROUTE_NONE) return rl_json_error(r, NGX_HTTP_NOT_FOUND, "unknown endpoint: use .../zones");
    if (to == ROUTE_FILE) return rl_api_send_file(r, name);
    bool read = r->method & (NGX_HTTP_GET | NGX_HTTP_HEAD);
    if (to != ROUTE_ZONE && !read) return rl_json_error(r, NGX_HTTP_NOT_ALLOWED, "method not allowed: GET only");
    if (to == ROUTE_ZONES) return rl_api_send_zones(r, &mcf->engine, lcf->api_write);
    if (!read && r->method != NGX_HTTP_DELETE) {
        return rl_json_error(r, NGX_HTTP_NOT_ALLOWED, "method not allowed: GET or DELETE");
    }
    if (!read && !lcf->api_write) {
        return rl_json_error(r, NGX_HTTP_NOT_ALLOWED, "DELETE needs ratelimit_api write=on");
    }
    rl_zone_t* zone = rl_zone_find(&mcf->engine.zones, name);
    if (zone == nullptr || zone->table == nullptr) return rl_json_error(r, NGX_HTTP_NOT_FOUND, "unknown zone");
    if (to == ROUTE_TOP) return rl_api_send_top(r, zone);
    ngx_str_t key;
    if (const char* why = rl_api_request_key(r, &key)) return rl_json_error(r, NGX_HTTP_BAD_REQUEST, why);
    rl::KeyHash hash = rl::hash_key(key.data, key.len, rl::kDefaultHashK0, rl::kDefaultHashK1);
    bool redis = zone->redis != nullptr;
    if (read) return redis ? rl_api_inspect_redis(r, zone, hash) : inspect_local(r, zone, hash);
    ngx_uint_t local = rl_reset_local(zone, hash);
    rl_top_drop(zone, hash);
    log_reset(r, zone);
    return redis ? rl_api_reset_redis(r, zone, hash, local) : rl_api_send_reset(r, zone, local, -1);
}

}  // namespace

// ratelimit_api [write=on|off];  (location)
char* rl_api_directive(ngx_conf_t* cf, ngx_command_t*, void* conf) noexcept {
    auto* lcf = static_cast<rl_loc_conf_t*>(conf);
    auto* clcf = static_cast<ngx_http_core_loc_conf_t*>(ngx_http_conf_get_module_loc_conf(cf, ngx_http_core_module));
    if (clcf->handler == rl_api_handler) return const_cast<char*>("is duplicate");
    auto* args = static_cast<ngx_str_t*>(cf->args->elts);
    lcf->api_write = 0;
    if (cf->args->nelts == 2) {
        std::string_view a = rl_sv(args[1]);
        if (a == "write=on") {
            lcf->api_write = 1;
        } else if (a != "write=off") {
            return rl_conf_error(cf, "invalid parameter \"%V\", it must be \"write=on\" or \"write=off\"", &args[1]);
        }
    }
    clcf->handler = rl_api_handler;
    // The request counters (ratelimit_metrics's) are kept too: the dashboard's rates need them.
    ngx_str_t name = ngx_string("ratelimit:metrics");
    auto* mcf = static_cast<rl_main_conf_t*>(ngx_http_conf_get_module_main_conf(cf, ngx_http_ratelimit_module));
    return rl_metrics_zone_add(cf, &mcf->engine, &name) != nullptr ? NGX_CONF_OK : static_cast<char*>(NGX_CONF_ERROR);
}

