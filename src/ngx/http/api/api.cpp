// ratelimit_api: the zones and one key's state as JSON, and a key's reset, in the zone's store.
//
//   GET    .../zones                    every zone: store, policies, keys, capacity, evictions, sync
//   GET    .../zones/NAME?key=K|addr=A  one key: remaining, reset, retry-after (cost 1), block, in flight
//   DELETE .../zones/NAME?key=K|addr=A  the key starts afresh (write=on only)
//
// Shared memory (and sync zones' local view, and in-flight slots) is read under the zone's lock
// on a copy: nothing is consumed, no slot is made for an unknown key. Redis zones are asked by
// the zone's own Lua, with checks that cannot consume (a cost of 0; a cost of 1 in a group that
// a check beyond any capacity rejects), the request waiting without blocking the worker.
#include "ngx/http/api/api.h"

#include "core/algo/block.h"
#include "core/wire/redis_command.h"
#include "core/wire/redis_keys.h"
#include "core/keys/rejected.h"
#include "ngx/redis/cluster.h"
#include "ngx/stores/redis_held.h"
#include "ngx/redis/node.h"
#include "ngx/limits/ctx.h"
#include "ngx/stores/store.h"
#include "ngx/sync/layout.h"

#include <cstring>
#include <new>

namespace {

constexpr size_t kMaxKeyLen = 4096;  // a key's bytes once decoded (the request line bounds it too)
constexpr uint8_t kAlgos = 7;        // rl::Algo values, concurrency included

int64_t now_us() {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return static_cast<int64_t>(ts.tv_sec) * 1000000 + ts.tv_nsec / 1000;
}

// ---- JSON ---------------------------------------------------------------------------------

// Bounded writer over a buffer from the request's pool (sized by the caller, with room to spare).
struct json_t {
    u_char* start;
    u_char* p;
    u_char* last;
    void raw(const char* s) { p = ngx_slprintf(p, last, "%s", s); }
    void str(std::string_view s) {
        static const char kHex[] = "0123456789abcdef";
        if (p < last) *p++ = '"';
        for (unsigned char ch : s) {
            if (last - p < 7) break;
            if (ch == '"' || ch == '\\') {
                *p++ = '\\';
                *p++ = ch;
            } else if (ch < 0x20 || ch >= 0x7f) {
                // Not UTF-8 checked (Redis's text, zone names): escaped byte by byte
                *p++ = '\\';
                *p++ = 'u';
                *p++ = '0';
                *p++ = '0';
                *p++ = static_cast<u_char>(kHex[ch >> 4]);
                *p++ = static_cast<u_char>(kHex[ch & 15]);
            } else {
                *p++ = ch;
            }
        }
        if (p < last) *p++ = '"';
    }
    void key(const char* k) {
        p = ngx_slprintf(p, last, "\"%s\":", k);
    }
    void num(const char* k, int64_t v) { p = ngx_slprintf(p, last, "\"%s\":%L", k, v); }
    // Microseconds as milliseconds, rounded up (a wait is never announced shorter than it is).
    void ms(const char* k, int64_t us) {
        if (us < 0) {
            p = ngx_slprintf(p, last, "\"%s\":null", k);
        } else {
            p = ngx_slprintf(p, last, "\"%s\":%L", k, (us + 999) / 1000);
        }
    }
    // A member after another: the comma, then the member.
    void then_key(const char* k) { raw(","); key(k); }
    void then_num(const char* k, int64_t v) { raw(","); num(k, v); }
    void then_ms(const char* k, int64_t us) { raw(","); ms(k, us); }
    size_t len() const { return static_cast<size_t>(p - start); }
};

bool json_alloc(ngx_http_request_t* r, json_t* j, size_t bytes) {
    j->start = static_cast<u_char*>(ngx_pnalloc(r->pool, bytes));
    j->p = j->start;
    j->last = j->start ? j->start + bytes : nullptr;
    return j->start != nullptr;
}

ngx_int_t send_body(ngx_http_request_t* r, ngx_uint_t status, u_char* body, size_t len) {
    ngx_buf_t* b = static_cast<ngx_buf_t*>(ngx_calloc_buf(r->pool));
    if (b == nullptr) return NGX_HTTP_INTERNAL_SERVER_ERROR;
    b->pos = body;
    b->last = body + len;
    b->memory = 1;
    b->last_buf = r == r->main ? 1 : 0;
    b->last_in_chain = 1;
    r->headers_out.status = status;
    r->headers_out.content_length_n = static_cast<off_t>(len);
    ngx_str_set(&r->headers_out.content_type, "application/json");
    r->headers_out.content_type_len = r->headers_out.content_type.len;
    r->headers_out.content_type_lowcase = nullptr;
    ngx_int_t rc = ngx_http_send_header(r);
    if (rc == NGX_ERROR || rc > NGX_OK || r->header_only) return rc;
    ngx_chain_t out{b, nullptr};
    return ngx_http_output_filter(r, &out);
}

ngx_int_t send_json(ngx_http_request_t* r, ngx_uint_t status, json_t& j) {
    if (j.p < j.last) *j.p++ = '\n';
    return send_body(r, status, j.start, j.len());
}

ngx_int_t send_error(ngx_http_request_t* r, ngx_uint_t status, std::string_view why) {
    json_t j;
    if (!json_alloc(r, &j, why.size() * 6 + 32)) return NGX_HTTP_INTERNAL_SERVER_ERROR;
    j.raw("{");
    j.key("error");
    j.str(why);
    j.raw("}");
    return send_json(r, status, j);
}

void write_policy(json_t& j, const rl::Policy& p) {
    j.raw("{");
    j.key("algorithm");
    j.str(rl::algo_name(p.algo));
    if (p.algo == rl::Algo::concurrency) {
        j.then_num("concurrency", p.requests);
        j.then_ms("hold_ms", p.period_us);
    } else {
        j.then_num("requests", p.requests);
        j.then_ms("period_ms", p.period_us);
        if (rl::is_bucket(p.algo)) {
            j.then_num("burst", p.burst);
        }
        if (p.block_us > 0) {
            j.then_ms("block_ms", p.block_us);
        }
    }
    j.raw("}");
}

// ---- zones and their policies ---------------------------------------------------------------

rl_zone_t* find_zone(rl_main_conf_t* mcf, std::string_view name) {
    auto** zones = static_cast<rl_zone_t**>(mcf->zones.elts);
    for (ngx_uint_t i = 0; i < mcf->zones.nelts; i++) {
        if (rl_sv(zones[i]->name) == name) return zones[i];
    }
    return nullptr;
}

// The policy a key is shown under: the first the zone is applied with; a zone no location
// applies, its own (gcra unless algo= says otherwise).
rl::Policy primary_policy(const rl_zone_t* zone) {
    if (zone->policies != nullptr && zone->policies->nelts > 0) return *static_cast<rl::Policy*>(zone->policies->elts);
    rl::Policy p = zone->policy;
    if (!zone->algo_set) p.algo = rl::Algo::gcra;
    rl::finish_policy(p);
    return p;
}

const char* store_name(const rl_zone_t* zone) { return zone->store->name; }

// A zone's object starts {"<label>":name,"store":...
void open_zone(json_t& j, const rl_zone_t* zone, const char* label) {
    j.raw("{");
    j.key(label);
    j.str(rl_sv(zone->name));
    j.then_key("store");
    j.str(store_name(zone));
}

ngx_int_t list_zones(ngx_http_request_t* r, rl_main_conf_t* mcf) {
    auto** zones = static_cast<rl_zone_t**>(mcf->zones.elts);
    size_t bytes = 64;
    for (ngx_uint_t i = 0; i < mcf->zones.nelts; i++) {
        ngx_uint_t np = zones[i]->policies ? zones[i]->policies->nelts : 1;
        bytes += 768 + 6 * (zones[i]->name.len + zones[i]->redis_name.len) + 256 * np;
    }
    json_t j;
    if (!json_alloc(r, &j, bytes)) return NGX_HTTP_INTERNAL_SERVER_ERROR;
    j.raw("{\"zones\":[");
    for (ngx_uint_t i = 0; i < mcf->zones.nelts; i++) {
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
                write_policy(j, ps[k]);
            }
        } else {
            write_policy(j, primary_policy(zone));
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
    return send_json(r, NGX_HTTP_OK, j);
}

// ---- the key --------------------------------------------------------------------------------

int hex_value(u_char c) {
    if (c >= '0' && c <= '9') return c - '0';
    c = static_cast<u_char>(c | 0x20);
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
}

// %XX decoded (strictly: a '%' not followed by two hex digits is an error; '+' is a '+').
const char* percent_decode(ngx_http_request_t* r, const ngx_str_t& in, ngx_str_t* out) {
    if (in.len > 3 * kMaxKeyLen) return "key too long (4096 bytes at most)";
    out->data = static_cast<u_char*>(ngx_pnalloc(r->pool, in.len + 1));
    if (out->data == nullptr) return "out of memory";
    size_t n = 0;
    for (size_t i = 0; i < in.len; i++) {
        u_char c = in.data[i];
        if (c == '%') {
            if (i + 2 >= in.len) return "malformed percent-encoding in the key";
            int hi = hex_value(in.data[i + 1]), lo = hex_value(in.data[i + 2]);
            if (hi < 0 || lo < 0) return "malformed percent-encoding in the key";
            c = static_cast<u_char>(hi * 16 + lo);
            i += 2;
        }
        out->data[n++] = c;
    }
    out->len = n;
    if (n > kMaxKeyLen) return "key too long (4096 bytes at most)";
    return nullptr;
}

// The key as the zone composes it: key= (raw, %XX decoded), or addr= (a textual address, as
// $binary_remote_addr makes it: 4 bytes IPv4, 16 bytes IPv6). nullptr, or why it is not valid.
const char* request_key(ngx_http_request_t* r, ngx_str_t* key) {
    ngx_str_t k, a;
    bool have_key = ngx_http_arg(r, const_cast<u_char*>(reinterpret_cast<const u_char*>("key")), 3, &k) == NGX_OK;
    bool have_addr = ngx_http_arg(r, const_cast<u_char*>(reinterpret_cast<const u_char*>("addr")), 4, &a) == NGX_OK;
    if (have_key && have_addr) return "give key= or addr=, not both";
    if (!have_key && !have_addr) return "missing key= (or addr=)";
    if (have_key) {
        if (const char* why = percent_decode(r, k, key)) return why;
        if (key->len == 0) return "empty key (a request with an empty key is exempt from its zone)";
        return nullptr;
    }
    ngx_str_t text;
    if (a.len > 64) return "addr= is not an IPv4 or IPv6 address";
    if (const char* why = percent_decode(r, a, &text)) return why;
    in_addr_t v4 = ngx_inet_addr(text.data, text.len);
    if (v4 != INADDR_NONE) {
        key->data = static_cast<u_char*>(ngx_pnalloc(r->pool, sizeof(v4)));
        if (key->data == nullptr) return "out of memory";
        ngx_memcpy(key->data, &v4, sizeof(v4));
        key->len = sizeof(v4);
        return nullptr;
    }
#if (NGX_HAVE_INET6)
    key->data = static_cast<u_char*>(ngx_pnalloc(r->pool, 16));
    if (key->data == nullptr) return "out of memory";
    if (text.len > 0 && ngx_inet6_addr(text.data, text.len, key->data) == NGX_OK) {
        key->len = 16;
        return nullptr;
    }
#endif
    return "addr= is not an IPv4 or IPv6 address";
}

// ---- one key's state --------------------------------------------------------------------------

struct key_state_t {
    rl::Policy policy;
    bool found;            // the store holds state for the key (shared memory: a slot)
    rl::Decision now;      // a request of cost 0: remaining, reset
    int64_t retry_us;      // a request of cost 1: its wait (0: it would pass)
    int64_t blocked_us;    // a live block's time left, 0 if none
    int64_t in_flight;     // concurrency: slots taken
    int64_t at_us;         // the store's time of the reading (unix us, store's clock)
    int64_t lease_units;   // a sync lease zone's view: units granted to this host, usable now (-1: none)
};

// A reply about one key of a zone starts {"zone":...,"store":...
void open_key_reply(json_t& j, const rl_zone_t* zone) { open_zone(j, zone, "zone"); }

// The key's figures: remaining, reset, retry-after, in flight, block (a reply's, or a sync
// zone's global state's).
void write_figures(json_t& j, const key_state_t& s) {
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

// A sync zone's reply carries the global state too (global: nullptr, and why: Redis could not
// tell it); others pass global = nullptr, why = {}.
ngx_int_t send_state(ngx_http_request_t* r, const rl_zone_t* zone, const key_state_t& s,
                     const key_state_t* global = nullptr, std::string_view why = {}) {
    json_t j;
    if (!json_alloc(r, &j, 2048 + 6 * (zone->name.len + why.size()))) return NGX_HTTP_INTERNAL_SERVER_ERROR;
    open_key_reply(j, zone);
    j.then_key("found");
    j.raw(s.found ? "true" : "false");
    j.then_key("policy");
    write_policy(j, s.policy);
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
    return send_json(r, NGX_HTTP_OK, j);
}

void finish_state(key_state_t& s, const rl::State& state, const int64_t* ring, int64_t now) {
    s.now = rl::decide(state, s.policy, now, 0, ring);
    rl::Decision one = rl::decide(state, s.policy, now, 1, ring);
    s.retry_us = one.allowed ? 0 : one.retry_after_us;
    if (s.policy.algo == rl::Algo::concurrency) s.in_flight = state.a;
    if (s.blocked_us > 0) {
        s.now.remaining = 0;
        s.retry_us = s.blocked_us;
    }
}

// The key's slot in the zone's table, read under the lock (a copy: nothing is consumed, nothing
// made). Sync zones: this host's view, on the zone's clock (lease: with the units it holds).
ngx_int_t read_local(ngx_http_request_t* r, rl_zone_t* zone, const rl::KeyHash& hash, key_state_t& s) {
    s = key_state_t{};
    s.lease_units = -1;
    s.policy = primary_policy(zone);
    uint64_t ring_bytes = rl::ring_bytes(s.policy);
    int64_t* ring = nullptr;
    if (ring_bytes > 0) {
        ring = static_cast<int64_t*>(ngx_pcalloc(r->pool, ring_bytes));
        if (ring == nullptr) return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }
    rl::State state;
    auto algo = static_cast<uint8_t>(s.policy.algo);
    ngx_shmtx_lock(&zone->shpool->mutex);
    rl::TableHeader* table = zone->table;
    int64_t now = now_us();
    if (zone->store->clock) now = zone->store->clock(zone, now);
    bool usable = ring_bytes <= (table->slot_size - sizeof(rl::Slot));
    if (rl::Slot* slot = usable ? rl::table_find(table, hash, algo) : nullptr) {
        s.found = true;
        state = slot->state;
        if (ring != nullptr) ngx_memcpy(ring, rl::slot_ring(slot), ring_bytes);
        if (zone->sync_shm != nullptr && zone->sync_mode == RL_SYNC_LEASE) {
            s.lease_units = rl::lease_usable(rl_sync_key(slot)->lease, s.policy, now);
        }
    }
    if (rl::Slot* b = rl::table_find(table, hash, static_cast<uint8_t>(rl::kBlockTag | algo))) {
        if (rl::block_live(b->state.a, now)) s.blocked_us = b->state.a - now;
    }
    ngx_shmtx_unlock(&zone->shpool->mutex);
    s.at_us = now;
    finish_state(s, state, ring, now);
    return NGX_OK;
}

ngx_int_t inspect_local(ngx_http_request_t* r, rl_zone_t* zone, const rl::KeyHash& hash) {
    key_state_t s;
    ngx_int_t rc = read_local(r, zone, hash, s);
    return rc == NGX_OK ? send_state(r, zone, s) : rc;
}

// The key's state in the zone's table goes (every algorithm's, its blocks, the rejections
// remembered for the zone's policies): the next request finds a fresh key.
ngx_uint_t reset_local(rl_zone_t* zone, const rl::KeyHash& hash) {
    ngx_uint_t n = 0;
    ngx_shmtx_lock(&zone->shpool->mutex);
    rl::TableHeader* table = zone->table;
    for (uint8_t a = 0; a < kAlgos; a++) {
        const uint8_t tags[] = {a, static_cast<uint8_t>(rl::kBlockTag | a)};
        for (uint8_t tag : tags) {
            rl::Slot* slot = rl::table_find(table, hash, tag);
            if (slot == nullptr) continue;
            // A zeroed slot is a fresh key for every algorithm; what follows it (a log's ring,
            // in-flight holders, a sync zone's view companions) is zeroed with it.
            slot->state = rl::State{};
            ngx_memzero(reinterpret_cast<u_char*>(slot) + sizeof(rl::Slot), table->slot_size - sizeof(rl::Slot));
            n += tag == a;
        }
    }
    if (zone->policies != nullptr) {
        auto* ps = static_cast<rl::Policy*>(zone->policies->elts);
        for (ngx_uint_t i = 0; i < zone->policies->nelts; i++) {
            auto tag = static_cast<uint8_t>(rl::kRejectedTag | static_cast<uint8_t>(ps[i].algo));
            if (rl::Slot* slot = rl::table_find(table, rl::rejection_key(hash, ps[i]), tag)) slot->state = rl::State{};
        }
    }
    ngx_shmtx_unlock(&zone->shpool->mutex);
    return n;
}

ngx_int_t send_reset(ngx_http_request_t* r, const rl_zone_t* zone, ngx_uint_t local, int64_t redis_keys) {
    json_t j;
    if (!json_alloc(r, &j, 256 + 6 * zone->name.len)) return NGX_HTTP_INTERNAL_SERVER_ERROR;
    open_key_reply(j, zone);
    j.raw(",\"reset\":true,");
    j.num("local_states", static_cast<int64_t>(local));
    if (redis_keys >= 0) {
        j.then_num("redis_keys_deleted", redis_keys);
    }
    j.raw("}");
    return send_json(r, NGX_HTTP_OK, j);
}

// ---- Redis -------------------------------------------------------------------------------------

// A command sent for the request: the request waits (r->main->count held) for its reply, at
// most the zone's Redis timeout.
struct api_wait_t {
    ngx_http_request_t* r;
    rl_zone_t* zone;
    rl_redis_t* redis;
    rl_redis_node_t* node;
    rl_conn_op_t* op;         // in flight: its data is cleared when the request stops waiting
    u_char* cmd;              // kept for a retry (MOVED, ASK, NOSCRIPT)
    size_t len;
    uint16_t slot;
    uint8_t tries;
    bool del;                 // DELETE: DEL of the key's Redis keys; else the inspection's checks
    bool sync;                // GET of a sync zone: `view` is this host's, `state` the global one
    bool done;
    ngx_event_t timer;
    ngx_uint_t local;         // DELETE: local states reset
    key_state_t state;
    key_state_t view;
    rl::Policy policies[2];   // the inspection's: cost 1 without block; the rejecting check's
    rl::RedisCheck checks[3];
};

void wait_end(api_wait_t* w, ngx_int_t rc) {
    if (w->done) return;
    w->done = true;
    if (w->timer.timer_set) ngx_del_timer(&w->timer);
    if (w->op != nullptr) {
        w->op->data = nullptr;  // its reply, if it comes, is dropped
        w->op = nullptr;
    }
    ngx_http_request_t* r = w->r;
    ngx_connection_t* c = r->connection;
    ngx_http_finalize_request(r, rc);
    ngx_http_run_posted_requests(c);
}

// A sync zone's view is still shown when Redis cannot tell the global state.
void wait_fail(api_wait_t* w, std::string_view why) {
    if (w->done) return;
    ngx_int_t rc = w->sync ? send_state(w->r, w->zone, w->view, nullptr, why)
                           : send_error(w->r, NGX_HTTP_SERVICE_UNAVAILABLE, why);
    wait_end(w, rc);
}

void wait_cleanup(void* data) noexcept {
    auto* w = static_cast<api_wait_t*>(data);
    w->done = true;
    if (w->timer.timer_set) ngx_del_timer(&w->timer);
    if (w->op != nullptr) {
        w->op->data = nullptr;
        w->op = nullptr;
    }
}

void on_timeout(ngx_event_t* ev) noexcept {
    auto* w = static_cast<api_wait_t*>(ev->data);
    wait_fail(w, "redis did not answer within its timeout");
}

void on_reply(rl_conn_op_t* op, redisReply* reply) noexcept;

bool wait_send(api_wait_t* w, bool asking) {
    if (w->node == nullptr || !rl_node_can_take(w->node, 1)) return false;
    w->op = rl_node_send(w->node, w->cmd, w->len, on_reply, w, 1, asking);
    return w->op != nullptr;
}

bool take_inspection(api_wait_t* w, const redisReply* reply) {
    if (reply->type != REDIS_REPLY_ARRAY) return false;
    int64_t values[rl::kReplyHead + 3 * rl::kReplyPerCheck + 4];
    if (reply->elements > sizeof(values) / sizeof(values[0])) return false;
    for (size_t i = 0; i < reply->elements; i++) {
        if (reply->element[i]->type != REDIS_REPLY_INTEGER) return false;
        values[i] = reply->element[i]->integer;
    }
    rl::RedisGroup groups[2] = {{&w->checks[0], 1}, {&w->checks[1], 2}};
    rl::Decision out[3];
    bool admitted[2];
    int64_t now = 0;
    if (!rl::decode_batch_reply(values, reply->elements, groups, 2, out, admitted, &now)) return false;
    key_state_t& s = w->state;
    s.found = true;  // Redis does not say whether the key existed: a fresh key reads as one
    s.now = out[0];
    s.at_us = now;
    if (out[0].block == rl::kBlockLive) {
        s.blocked_us = out[0].reset_us > 0 ? out[0].reset_us : out[0].retry_after_us;
        s.retry_us = s.blocked_us;
    } else {
        s.retry_us = out[1].allowed ? 0 : out[1].retry_after_us;
    }
    if (s.policy.algo == rl::Algo::concurrency) s.in_flight = s.policy.requests - out[0].remaining;
    return true;
}

void on_reply(rl_conn_op_t* op, redisReply* reply) noexcept {
    auto* w = static_cast<api_wait_t*>(op->data);
    w->op = nullptr;
    if (w->done) return;
    if (reply == nullptr) {
        wait_fail(w, "redis connection failed");
        return;
    }
    rl_retry_t retry{};
    rl_reply_e verdict = rl_node_reply(w->node, reply, &retry);
    if (verdict == RL_REPLY_RETRY && rl_node_retry_left(&w->tries)) {
        w->node = retry.node;
        if (!wait_send(w, retry.ask)) wait_fail(w, "redis unavailable (retry after a redirect)");
        return;
    }
    if (verdict != RL_REPLY_TAKE) {
        wait_fail(w, "redis: the command could not run (cluster redirects or TRYAGAIN)");
        return;
    }
    if (reply->type == REDIS_REPLY_ERROR) {
        char text[200];
        size_t n = ngx_min(reply->len, sizeof(text) - 8);
        ngx_memcpy(text, "redis: ", 7);
        ngx_memcpy(text + 7, reply->str, n);
        wait_fail(w, std::string_view(text, n + 7));
        return;
    }
    ngx_int_t rc;
    if (w->del) {
        if (reply->type != REDIS_REPLY_INTEGER) {
            wait_fail(w, "redis: unexpected reply to DEL");
            return;
        }
        rc = send_reset(w->r, w->zone, w->local, reply->integer);
    } else {
        if (!take_inspection(w, reply)) {
            wait_fail(w, "redis: unexpected reply to the check");
            return;
        }
        rc = w->sync ? send_state(w->r, w->zone, w->view, &w->state) : send_state(w->r, w->zone, w->state);
    }
    wait_end(w, rc);
}

api_wait_t* wait_new(ngx_http_request_t* r, rl_zone_t* zone) {
    ngx_pool_cleanup_t* cln = ngx_pool_cleanup_add(r->pool, sizeof(api_wait_t));
    if (cln == nullptr) return nullptr;
    auto* w = new (cln->data) api_wait_t{};
    w->r = r;
    w->zone = zone;
    w->redis = zone->redis;
    w->timer.handler = on_timeout;
    w->timer.data = w;
    w->timer.log = r->connection->log;
    cln->handler = wait_cleanup;
    return w;
}

// Sends w's command to the node of its slot and makes the request wait for the reply.
ngx_int_t wait_start(api_wait_t* w) {
    rl_redis_t* redis = w->redis;
    w->node = redis->cluster ? rl_cluster_route(redis, w->slot) : redis->nodes.n > 0 ? redis->nodes.elts[0] : nullptr;
    if (!wait_send(w, false)) {
        w->done = true;
        static constexpr std::string_view kWhy = "redis unavailable (not connected, or too much pending)";
        return w->sync ? send_state(w->r, w->zone, w->view, nullptr, kWhy)
                       : send_error(w->r, NGX_HTTP_SERVICE_UNAVAILABLE, kWhy);
    }
    ngx_add_timer(&w->timer, w->zone->timeout > 0 ? w->zone->timeout : 1000);
    w->r->main->count++;
    return NGX_DONE;
}

// The inspection: group 1, the key at cost 0 (reports, consumes nothing; a live block
// rejects it); group 2, the key at cost 1 without a block, with a check of another algorithm's
// key (the same hash tag) beyond any capacity: the group is rejected, so it changes nothing,
// and the first check reports its own wait for one unit.
// A sync zone's global state is the per-request zone's key, in the same format: asked the same
// way, beside this host's view.
ngx_int_t inspect_redis(ngx_http_request_t* r, rl_zone_t* zone, const rl::KeyHash& hash) {
    api_wait_t* w = wait_new(r, zone);
    if (w == nullptr) return NGX_HTTP_INTERNAL_SERVER_ERROR;
    if (zone->sync_us != 0) {
        w->sync = true;
        ngx_int_t rc = read_local(r, zone, hash, w->view);
        if (rc != NGX_OK) return rc;
    }
    w->state.policy = primary_policy(zone);
    w->state.lease_units = -1;
    const rl::Policy& p = w->state.policy;
    w->policies[0] = p;
    w->policies[0].block_us = 0;
    w->policies[1] = rl::Policy{};
    w->policies[1].algo = p.algo == rl::Algo::gcra ? rl::Algo::token : rl::Algo::gcra;
    rl::finish_policy(w->policies[1]);
    uint64_t seq = rl_held_next_seq();
    for (ngx_uint_t i = 0; i < 3; i++) {
        rl::RedisCheck& c = w->checks[i];
        c.zone = rl_sv(zone->name);
        c.hash = hash;
        c.owner = rl_held_owner();
        c.seq = seq;
    }
    w->checks[0].policy = &w->state.policy;
    w->checks[0].cost = 0;
    w->checks[1].policy = &w->policies[0];
    w->checks[1].cost = 1;
    w->checks[2].policy = &w->policies[1];
    w->checks[2].cost = w->policies[1].capacity() + 1;
    rl::RedisGroup groups[2] = {{&w->checks[0], 1}, {&w->checks[1], 2}};
    std::string_view prefix = rl_sv(w->redis->prefix);
    char keybuf[1024];
    if (rl::redis_key_max_len(prefix, rl_sv(zone->name)) > sizeof(keybuf)) return NGX_HTTP_INTERNAL_SERVER_ERROR;
    size_t klen = rl::redis_key(keybuf, prefix, rl_sv(zone->name), hash, p.algo);
    w->slot = rl::cluster_slot(std::string_view(keybuf, klen));
    // The script's form depends on the node (FCALL or EVALSHA): written for the node routed to.
    rl_redis_node_t* node = w->redis->cluster ? rl_cluster_route(w->redis, w->slot)
                            : w->redis->nodes.n > 0 ? w->redis->nodes.elts[0] : nullptr;
    rl::CommandScript script = node ? rl_node_script(node) : rl::kPreferredScript;
    w->len = rl::batch_command_len(script, false, prefix, groups, 2, 0);
    w->cmd = static_cast<u_char*>(ngx_pnalloc(r->pool, w->len));
    if (w->cmd == nullptr) return NGX_HTTP_INTERNAL_SERVER_ERROR;
    w->len = rl::write_batch_command(reinterpret_cast<char*>(w->cmd), script, false, prefix, groups, 2, 0);
    return wait_start(w);
}

// DEL of every algorithm's key of the key and their blocks (one hash tag: one slot).
ngx_int_t reset_redis(ngx_http_request_t* r, rl_zone_t* zone, const rl::KeyHash& hash, ngx_uint_t local) {
    api_wait_t* w = wait_new(r, zone);
    if (w == nullptr) return NGX_HTTP_INTERNAL_SERVER_ERROR;
    w->del = true;
    w->local = local;
    std::string_view prefix = rl_sv(w->redis->prefix), name = rl_sv(zone->name);
    static const char kBlock[] = ":block";
    size_t kmax = rl::redis_key_max_len(prefix, name) + sizeof(kBlock);
    size_t bytes = 32 + 2 * kAlgos * (kmax + 32);
    w->cmd = static_cast<u_char*>(ngx_pnalloc(r->pool, bytes));
    auto* key = static_cast<char*>(ngx_pnalloc(r->pool, kmax));
    if (w->cmd == nullptr || key == nullptr) return NGX_HTTP_INTERNAL_SERVER_ERROR;
    u_char* p = ngx_slprintf(w->cmd, w->cmd + bytes, "*%ui\r\n$3\r\nDEL\r\n", static_cast<ngx_uint_t>(1 + 2 * kAlgos));
    for (uint8_t a = 0; a < kAlgos; a++) {
        size_t klen = rl::redis_key(key, prefix, name, hash, static_cast<rl::Algo>(a));
        if (a == 0) w->slot = rl::cluster_slot(std::string_view(key, klen));
        p = ngx_slprintf(p, w->cmd + bytes, "$%uz\r\n%*s\r\n", klen, klen, key);
        p = ngx_slprintf(p, w->cmd + bytes, "$%uz\r\n%*s%s\r\n", klen + sizeof(kBlock) - 1, klen, key, kBlock);
    }
    w->len = static_cast<size_t>(p - w->cmd);
    return wait_start(w);
}

// ---- the handler --------------------------------------------------------------------------------

// The path after the location: ".../zones" (all) or ".../zones/NAME" (one, NAME set).
bool route(std::string_view uri, std::string_view* name) {
    static constexpr std::string_view kZones = "/zones";
    *name = {};
    if (uri.size() >= kZones.size() && uri.substr(uri.size() - kZones.size()) == kZones) return true;
    size_t at = uri.rfind("/zones/");
    if (at == std::string_view::npos) return false;
    std::string_view rest = uri.substr(at + kZones.size() + 1);
    if (rest.find('/') != std::string_view::npos) return false;
    *name = rest;
    return true;
}

ngx_int_t rl_api_handler(ngx_http_request_t* r) noexcept {
    auto* lcf = static_cast<rl_loc_conf_t*>(ngx_http_get_module_loc_conf(r, ngx_http_ratelimit_module));
    auto* mcf = static_cast<rl_main_conf_t*>(ngx_http_get_module_main_conf(r, ngx_http_ratelimit_module));
    ngx_int_t rc = ngx_http_discard_request_body(r);
    if (rc != NGX_OK) return rc;
    std::string_view name;
    if (!route(rl_sv(r->uri), &name)) return send_error(r, NGX_HTTP_NOT_FOUND, "unknown endpoint: use .../zones");
    bool read = r->method & (NGX_HTTP_GET | NGX_HTTP_HEAD);
    if (name.empty()) {
        if (!read) return send_error(r, NGX_HTTP_NOT_ALLOWED, "method not allowed: GET only");
        return list_zones(r, mcf);
    }
    if (!read && r->method != NGX_HTTP_DELETE) {
        return send_error(r, NGX_HTTP_NOT_ALLOWED, "method not allowed: GET or DELETE");
    }
    if (!read && !lcf->api_write) {
        return send_error(r, NGX_HTTP_NOT_ALLOWED, "DELETE needs ratelimit_api write=on");
    }
    rl_zone_t* zone = find_zone(mcf, name);
    if (zone == nullptr || zone->table == nullptr) return send_error(r, NGX_HTTP_NOT_FOUND, "unknown zone");
    ngx_str_t key;
    if (const char* why = request_key(r, &key)) return send_error(r, NGX_HTTP_BAD_REQUEST, why);
    rl::KeyHash hash = rl::hash_key(key.data, key.len, rl::kDefaultHashK0, rl::kDefaultHashK1);
    bool redis = zone->redis != nullptr;
    if (read) return redis ? inspect_redis(r, zone, hash) : inspect_local(r, zone, hash);
    ngx_uint_t local = reset_local(zone, hash);
    ngx_log_error(NGX_LOG_NOTICE, r->connection->log, 0, "ratelimit_api: a key of zone \"%V\" reset", &zone->name);
    return redis ? reset_redis(r, zone, hash, local) : send_reset(r, zone, local, -1);
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
    return NGX_CONF_OK;
}

bool rl_api_note_policy(ngx_conf_t* cf, rl_zone_t* zone, const rl::Policy& p) noexcept {
    if (zone->policies == nullptr) {
        zone->policies = ngx_array_create(cf->pool, 2, sizeof(rl::Policy));
        if (zone->policies == nullptr) return false;
    }
    auto* ps = static_cast<rl::Policy*>(zone->policies->elts);
    for (ngx_uint_t i = 0; i < zone->policies->nelts; i++) {
        const rl::Policy& q = ps[i];
        if (q.algo == p.algo && q.requests == p.requests && q.period_us == p.period_us && q.burst == p.burst &&
            q.delay == p.delay && q.max_delay_us == p.max_delay_us && q.block_us == p.block_us) {
            return true;
        }
    }
    auto* slot = static_cast<rl::Policy*>(ngx_array_push(zone->policies));
    if (slot == nullptr) return false;
    *slot = p;
    return true;
}
