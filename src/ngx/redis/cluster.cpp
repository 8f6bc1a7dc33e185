// Redis Cluster: each worker keeps the slot map (from CLUSTER SLOTS, asked without blocking
// on one of the known nodes), routes each call to the primary owning its slot, and keeps the
// map fresh: about every second, soon after a node fails, and at once after a MOVED.
#include "ngx/redis/cluster.h"

#include "core/text/log_text.h"
#include "core/wire/redis_keys.h"

namespace {

constexpr ngx_msec_t kRefreshEvery = 1000;
constexpr ngx_msec_t kRefreshSoon = 100;  // after a MOVED or a node failure, not more often

struct rl_cluster_t {
    uint16_t slots[rl::kClusterSlots];  // owning node's index + 1; 0 while unknown
    ngx_event_t refresh;
    ngx_uint_t next;         // the node asked next, round robin
    unsigned asking_map:1;   // a CLUSTER SLOTS is in flight
    unsigned soon:1;         // a refresh is wanted before the periodic one
};

rl_cluster_t* state_of(rl_redis_t* redis) { return static_cast<rl_cluster_t*>(redis->cluster_state); }

void ask_map(rl_redis_t* redis);

void on_refresh(ngx_event_t* ev) noexcept {
    auto* redis = static_cast<rl_redis_t*>(ev->data);
    ask_map(redis);
    if (!ngx_exiting && !ngx_quit && !ngx_terminate) ngx_add_timer(ev, kRefreshEvery);
}

std::string_view sv(const char* s, size_t n) { return {s, n}; }

// The name a new node's certificate is checked against: ssl_name, else the host name the node
// announces (cluster-announce-hostname), else its address.
ngx_str_t tls_name(rl_redis_t* redis, std::string_view host, std::string_view announced) {
    if (redis->ssl_name.len || !redis->ssl) return redis->ssl_name;
    std::string_view name = announced.empty() ? host : announced;
    ngx_str_t out = ngx_null_string;
    if (name.size() > 253) return out;
    out.data = static_cast<u_char*>(ngx_pnalloc(redis->pool, name.size()));
    if (out.data == nullptr) return out;
    ngx_memcpy(out.data, name.data(), name.size());
    out.len = name.size();
    return out;
}

// The host name in a CLUSTER SLOTS node entry's metadata ([ip, port, id, {hostname: ...}]).
std::string_view announced_hostname(const redisReply* entry) {
    if (entry->elements < 4 || entry->element[3]->type != REDIS_REPLY_ARRAY) return {};
    const redisReply* meta = entry->element[3];
    for (size_t k = 0; k + 1 < meta->elements; k += 2) {
        const redisReply* key = meta->element[k];
        const redisReply* value = meta->element[k + 1];
        if (key->type == REDIS_REPLY_STRING && sv(key->str, key->len) == "hostname" &&
            value->type == REDIS_REPLY_STRING) {
            return sv(value->str, value->len);
        }
    }
    return {};
}

// The node at host:port, created (and later connected on first use) if new.
rl_redis_node_t* node_at(rl_redis_t* redis, std::string_view host, long long port, std::string_view announced = {}) {
    u_char text[NGX_SOCKADDR_STRLEN + 8];
    if (host.size() > NGX_SOCKADDR_STRLEN || port <= 0 || port > 65535) return nullptr;
    bool v6 = host.find(':') != std::string_view::npos;
    u_char* end = ngx_snprintf(text, sizeof(text), v6 ? "[%*s]:%L" : "%*s:%L", host.size(), host.data(), port);
    size_t len = static_cast<size_t>(end - text);
    for (ngx_uint_t i = 0; i < redis->nodes.n; i++) {
        rl_redis_node_t* node = redis->nodes.elts[i];
        const ngx_str_t& name = node->conn.addr.name;
        if (name.len != len || ngx_strncmp(name.data, text, len) != 0) continue;
        // First seen in a MOVED (an address only): the name CLUSTER SLOTS announces serves from
        // the next connection on.
        const ngx_str_t& was = node->conn.tls_name;
        if (!announced.empty() && (was.len != announced.size() || ngx_strncmp(was.data, announced.data(), was.len) != 0)) {
            ngx_str_t now = tls_name(redis, host, announced);
            if (now.len) node->conn.tls_name = now;
        }
        return node;
    }
    ngx_addr_t addr;
    ngx_memzero(&addr, sizeof(addr));
    if (ngx_parse_addr_port(redis->pool, &addr, text, len) != NGX_OK) {
        rl_redis_log_error(&redis->conn, 0,
                           "ratelimit redis \"%V\": cannot use the node address \"%*s\" (an IP address is needed)",
                           &redis->name, len, text);
        return nullptr;
    }
    addr.name.data = static_cast<u_char*>(ngx_pnalloc(redis->pool, len));
    if (addr.name.data == nullptr) return nullptr;
    ngx_memcpy(addr.name.data, text, len);
    addr.name.len = len;
    rl_redis_node_t* node = rl_node_add(redis, addr);
    if (node != nullptr) node->conn.tls_name = tls_name(redis, host, announced);
    return node;
}

ngx_uint_t index_of(rl_redis_t* redis, rl_redis_node_t* node) {
    for (ngx_uint_t i = 0; i < redis->nodes.n; i++) {
        if (redis->nodes.elts[i] == node) return i;
    }
    return redis->nodes.n;
}

// CLUSTER SLOTS: [[start, end, [host, port, id, ...], replicas...], ...]
void on_map(rl_conn_op_t* op, redisReply* reply) noexcept {
    auto* redis = static_cast<rl_redis_t*>(op->data);
    rl_cluster_t* cl = state_of(redis);
    cl->asking_map = 0;
    if (reply == nullptr) {
        cl->soon = 1;  // that node is gone: ask another one shortly
        return;
    }
    if (reply->type != REDIS_REPLY_ARRAY) {
        char text[rl::kLogTextCap];
        size_t n = reply->type == REDIS_REPLY_ERROR ? rl::log_text(reply->str, reply->len, text, sizeof(text)) : 0;
        rl_redis_log_error(&redis->conn, 0, "ratelimit redis \"%V\" at %V: CLUSTER SLOTS failed: %*s", &redis->name,
                           &op->conn->addr.name, n, text);
        cl->soon = 1;
        return;
    }
    for (size_t i = 0; i < reply->elements; i++) {
        const redisReply* range = reply->element[i];
        if (range->type != REDIS_REPLY_ARRAY || range->elements < 3) continue;
        const redisReply* start = range->element[0];
        const redisReply* end = range->element[1];
        const redisReply* primary = range->element[2];
        if (start->type != REDIS_REPLY_INTEGER || end->type != REDIS_REPLY_INTEGER ||
            primary->type != REDIS_REPLY_ARRAY || primary->elements < 2 ||
            primary->element[0]->type != REDIS_REPLY_STRING || primary->element[1]->type != REDIS_REPLY_INTEGER) {
            continue;
        }
        std::string_view host = sv(primary->element[0]->str, primary->element[0]->len);
        rl_redis_node_t* node;
        if (host.empty() || host == "?") {
            node = static_cast<rl_redis_node_t*>(op->conn->data);  // the node does not know its own address: it is the one we asked
        } else {
            node = node_at(redis, host, primary->element[1]->integer, announced_hostname(primary));
        }
        if (node == nullptr || start->integer < 0 || end->integer >= rl::kClusterSlots) continue;
        auto ref = static_cast<uint16_t>(index_of(redis, node) + 1);
        for (long long s = start->integer; s <= end->integer; s++) cl->slots[s] = ref;
    }
    cl->soon = 0;
    ngx_log_debug3(NGX_LOG_DEBUG_HTTP, redis->conn.log, 0, "ratelimit redis \"%V\" at %V: slot map of %uz ranges",
                   &redis->name, &op->conn->addr.name, reply->elements);
}

void ask_map(rl_redis_t* redis) {
    rl_cluster_t* cl = state_of(redis);
    if (cl->asking_map) return;
    static const char kCommand[] = "*2\r\n$7\r\nCLUSTER\r\n$5\r\nSLOTS\r\n";
    // Ask the known nodes in turn: a dead one fails the op at once and the next is asked soon.
    for (ngx_uint_t tries = 0; tries < redis->nodes.n; tries++) {
        rl_redis_node_t* node = redis->nodes.elts[cl->next++ % redis->nodes.n];
        if (rl_conn_send(&node->conn, reinterpret_cast<const u_char*>(kCommand), sizeof(kCommand) - 1, on_map, redis, 0)) {
            cl->asking_map = 1;
            return;
        }
    }
}

}  // namespace

bool rl_cluster_init(rl_redis_t* redis) noexcept {
    auto* cl = static_cast<rl_cluster_t*>(ngx_calloc(sizeof(rl_cluster_t), redis->conn.log));
    if (cl == nullptr) return false;
    redis->cluster_state = cl;
    cl->refresh.handler = on_refresh;
    cl->refresh.data = redis;
    cl->refresh.log = redis->conn.log;
    cl->refresh.cancelable = 1;
    ask_map(redis);
    ngx_add_timer(&cl->refresh, kRefreshEvery);
    return true;
}

rl_redis_node_t* rl_cluster_route(rl_redis_t* redis, uint16_t slot) noexcept {
    rl_cluster_t* cl = state_of(redis);
    uint16_t ref = cl->slots[slot];
    if (ref != 0) return redis->nodes.elts[ref - 1];
    // Unknown slot (the map is not in yet): any node answers with a MOVED to the right one.
    return redis->nodes.elts[slot % redis->nodes.n];
}

void rl_cluster_refresh_soon(rl_redis_t* redis) noexcept {
    rl_cluster_t* cl = state_of(redis);
    if (cl->asking_map) return;
    // The periodic timer is brought forward, never more often than kRefreshSoon.
    if (!cl->refresh.timer_set || cl->refresh.timer.key > ngx_current_msec + kRefreshSoon) {
        ngx_add_timer(&cl->refresh, kRefreshSoon);
    }
}

rl_redis_node_t* rl_cluster_redirect(rl_redis_t* redis, const redisReply* reply, bool* ask) noexcept {
    // "MOVED <slot> <host>:<port>" or "ASK <slot> <host>:<port>"
    std::string_view text = sv(reply->str, reply->len);
    *ask = text.substr(0, 4) == "ASK ";
    if (!*ask && text.substr(0, 6) != "MOVED ") return nullptr;
    size_t sp1 = text.find(' ');
    size_t sp2 = text.find(' ', sp1 + 1);
    size_t colon = text.rfind(':');
    if (sp2 == std::string_view::npos || colon == std::string_view::npos || colon < sp2) return nullptr;
    ngx_int_t slot = ngx_atoi(reinterpret_cast<u_char*>(const_cast<char*>(text.data() + sp1 + 1)), sp2 - sp1 - 1);
    ngx_int_t port = ngx_atoi(reinterpret_cast<u_char*>(const_cast<char*>(text.data() + colon + 1)),
                              text.size() - colon - 1);
    std::string_view host = text.substr(sp2 + 1, colon - sp2 - 1);
    if (host.size() >= 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
    if (slot < 0 || slot >= rl::kClusterSlots || port == NGX_ERROR) return nullptr;
    rl_redis_node_t* node = node_at(redis, host, port);
    if (node != nullptr && !*ask) {
        // MOVED: the slot has a new owner for good; the rest of the map may have moved too.
        state_of(redis)->slots[slot] = static_cast<uint16_t>(index_of(redis, node) + 1);
        rl_cluster_refresh_soon(redis);
    }
    return node;
}

void rl_cluster_node_failed(rl_redis_node_t* node) noexcept {
    // A seed may fail at once, while the worker starts, before the cluster state exists.
    if (node->redis->cluster && node->redis->cluster_state != nullptr) rl_cluster_refresh_soon(node->redis);
}
