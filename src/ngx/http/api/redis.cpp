// The API's Redis side: a key's state asked of Redis by the zone's own Lua (checks that cannot
// consume), and a key's Redis keys deleted; the request waits for the reply without blocking
// the worker, at most the zone's Redis timeout.
#include "ngx/http/api/redis.h"

#include "ngx/http/api/reply.h"
#include "ngx/redis/cluster.h"
#include "ngx/redis/node.h"
#include "ngx/stores/redis_held.h"

#include "core/algo/block.h"
#include "core/wire/redis_command.h"
#include "core/wire/redis_keys.h"

#include <new>

namespace {

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
    rl_key_state_t state;
    rl_key_state_t view;
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
    ngx_int_t rc = w->sync ? rl_api_send_state(w->r, w->zone, w->view, nullptr, why)
                           : rl_json_error(w->r, NGX_HTTP_SERVICE_UNAVAILABLE, why);
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
    rl_key_state_t& s = w->state;
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
        rc = rl_api_send_reset(w->r, w->zone, w->local, reply->integer);
    } else {
        if (!take_inspection(w, reply)) {
            wait_fail(w, "redis: unexpected reply to the check");
            return;
        }
        rc = w->sync ? rl_api_send_state(w->r, w->zone, w->view, &w->state) : rl_api_send_state(w->r, w->zone, w->state);
    }
    wait_end(w, rc);
}


// The node of w's slot, or nullptr.
rl_redis_node_t* route(const api_wait_t* w) {
    rl_redis_t* redis = w->redis;
    return redis->cluster ? rl_cluster_route(redis, w->slot) : redis->nodes.n > 0 ? redis->nodes.elts[0] : nullptr;
}

// How that node runs the Lua (FCALL unless it refused Functions).
rl::CommandScript route_script(const api_wait_t* w) {
    rl_redis_node_t* node = route(w);
    return node ? rl_node_script(node) : rl::kPreferredScript;
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
    w->node = route(w);
    if (!wait_send(w, false)) {
        w->done = true;
        static constexpr std::string_view kWhy = "redis unavailable (not connected, or too much pending)";
        return w->sync ? rl_api_send_state(w->r, w->zone, w->view, nullptr, kWhy)
                       : rl_json_error(w->r, NGX_HTTP_SERVICE_UNAVAILABLE, kWhy);
    }
    ngx_add_timer(&w->timer, w->zone->timeout > 0 ? w->zone->timeout : 1000);
    w->r->main->count++;
    return NGX_DONE;
}


}  // namespace

// The inspection: group 1, the key at cost 0 (reports, consumes nothing; a live block
// rejects it); group 2, the key at cost 1 without a block, with a check of another algorithm's
// key (the same hash tag) beyond any capacity: the group is rejected, so it changes nothing,
// and the first check reports its own wait for one unit.
// A sync zone's global state is the per-request zone's key, in the same format: asked the same
// way, beside this host's view.
ngx_int_t rl_api_inspect_redis(ngx_http_request_t* r, rl_zone_t* zone, const rl::KeyHash& hash) noexcept {
    api_wait_t* w = wait_new(r, zone);
    if (w == nullptr) return NGX_HTTP_INTERNAL_SERVER_ERROR;
    if (zone->sync_us != 0) {
        w->sync = true;
        if (!rl_inspect_local(r->pool, zone, hash, &w->view)) return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }
    w->state.policy = rl_zone_primary_policy(zone);
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
    rl::CommandScript script = route_script(w);
    w->len = rl::batch_command_len(script, false, prefix, groups, 2, 0);
    w->cmd = static_cast<u_char*>(ngx_pnalloc(r->pool, w->len));
    if (w->cmd == nullptr) return NGX_HTTP_INTERNAL_SERVER_ERROR;
    w->len = rl::write_batch_command(reinterpret_cast<char*>(w->cmd), script, false, prefix, groups, 2, 0);
    return wait_start(w);
}


// DEL of every algorithm's key of the key and their blocks (one hash tag: one slot).
ngx_int_t rl_api_reset_redis(ngx_http_request_t* r, rl_zone_t* zone, const rl::KeyHash& hash, ngx_uint_t local) noexcept {
    api_wait_t* w = wait_new(r, zone);
    if (w == nullptr) return NGX_HTTP_INTERNAL_SERVER_ERROR;
    w->del = true;
    w->local = local;
    std::string_view prefix = rl_sv(w->redis->prefix), name = rl_sv(zone->name);
    char key[1024];
    if (rl::redis_key_max_len(prefix, name) > sizeof(key)) return NGX_HTTP_INTERNAL_SERVER_ERROR;
    w->slot = rl::cluster_slot(std::string_view(key, rl::redis_key(key, prefix, name, hash, rl::Algo::gcra)));
    // The script's form depends on the node (FCALL or EVALSHA): written for the node routed to.
    rl::CommandScript script = route_script(w);
    w->len = rl::reset_command(nullptr, script, false, prefix, name, hash, 0);
    w->cmd = static_cast<u_char*>(ngx_pnalloc(r->pool, w->len));
    if (w->cmd == nullptr) return NGX_HTTP_INTERNAL_SERVER_ERROR;
    w->len = rl::reset_command(reinterpret_cast<char*>(w->cmd), script, false, prefix, name, hash, 0);
    return wait_start(w);
}
