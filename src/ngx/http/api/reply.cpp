// The API's replies: the zones, a key's state, a key's reset.
#include "ngx/http/api/reply.h"

#include "ngx/stores/store.h"
#include "ngx/sync/layout.h"

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


}  // namespace

ngx_int_t rl_api_send_zones(ngx_http_request_t* r, const rl_engine_conf_t* ecf) noexcept {
    auto** zones = static_cast<rl_zone_t**>(ecf->zones.elts);
    size_t bytes = 64;
    for (ngx_uint_t i = 0; i < ecf->zones.nelts; i++) {
        ngx_uint_t np = zones[i]->policies ? zones[i]->policies->nelts : 1;
        bytes += 768 + 6 * (zones[i]->name.len + zones[i]->redis_name.len) + 256 * np;
    }
    rl_json_t j;
    if (!rl_json_alloc(r, &j, bytes)) return NGX_HTTP_INTERNAL_SERVER_ERROR;
    j.raw("{\"zones\":[");
    for (ngx_uint_t i = 0; i < ecf->zones.nelts; i++) {
        rl_zone_t* zone = zones[i];
        if (i > 0) j.raw(",");
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
        // Under the zone's lock: the table's fields change together with its slots.
        uint64_t keys = 0, cap = 0, evictions = 0, rounds = 0, failures = 0, last_ok = 0;
        int64_t hosts = 0;
        const rl_sync_shm_t* h = zone->sync_shm;
        if (zone->table != nullptr) {
            ngx_shmtx_lock(&zone->shpool->mutex);
            keys = zone->table->used;
            cap = zone->table->nslots;
            evictions = zone->table->evictions;
            if (h != nullptr) {
                rounds = h->rounds;
                failures = h->failures;
                hosts = h->hosts;
                last_ok = h->last_ok;
            }
            ngx_shmtx_unlock(&zone->shpool->mutex);
        }
        j.then_num("keys", static_cast<int64_t>(keys));
        j.then_num("capacity", static_cast<int64_t>(cap));
        j.then_num("evictions", static_cast<int64_t>(evictions));
        if (h != nullptr) {
            j.raw(",\"sync\":{");
            j.key("mode");
            j.str(zone->sync_mode == RL_SYNC_LEASE ? "lease" : "optimistic");
            j.then_ms("interval_ms", zone->sync_us);
            j.then_num("rounds", static_cast<int64_t>(rounds));
            j.then_num("failures", static_cast<int64_t>(failures));
            j.then_num("hosts", hosts);
            j.raw(",");
            // ngx_current_msec is CLOCK_MONOTONIC: the same in every worker.
            if (last_ok == 0) {
                j.raw("\"last_round_ms_ago\":null");
            } else {
                j.num("last_round_ms_ago", static_cast<int64_t>(ngx_current_msec - last_ok));
            }
            j.raw("}");
        }
        j.raw("}");
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

