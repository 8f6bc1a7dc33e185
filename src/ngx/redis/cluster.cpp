// Redis Cluster: each worker keeps the slot map (from CLUSTER SLOTS, asked without blocking
// on one of the known nodes), routes each call to the primary owning its slot, and keeps the
// map fresh: about every second, soon after a node fails, and at once after a MOVED.
#include "ngx/redis/cluster.h"

#include "core/text/log_text.h"
#include "core/wire/redis_keys.h"

namespace {

constexpr ngx_msec_t kRefreshEvery = 1000;
constexpr ngx_msec_t kRefreshSoon = 100;  // after a MOVED or a node failure, not more often
// Nodes a ratelimit_redis keeps per worker (Redis Cluster's own ceiling is about 1000 nodes):
// an answer naming more leaves the slots of the others unmapped (their keys go to a known node,
// which redirects). Each costs ~1.4 KB, and its connection's buffers while it is up.
constexpr ngx_uint_t kMaxNodes = 1024;
constexpr ngx_uint_t kAskTries = 4;  // nodes tried per ask for the map: a map of dead nodes costs little

struct rl_cluster_t {
    uint16_t slots[rl::kClusterSlots];  // owning node's index + 1; 0 while unknown
    ngx_event_t refresh;
    ngx_uint_t next;         // the node asked next, round robin
    ngx_uint_t nseeds;       // the configured nodes: first in redis->nodes, never dropped
    ngx_uint_t cap;          // nodes kept at most (kMaxNodes, or the seeds if more)
    ngx_uint_t live;         // nodes not retired
    uint16_t* owned;         // per node index: the slots the map gives it (0: the map no longer names it)
    uint64_t* keys;          // per node index: its address's key (addr_key)
    uint16_t* table;         // the nodes found at run time by key: index + 1, open addressing
    ngx_uint_t mask;         // the table's size - 1 (a power of two, twice the cap at least)
    unsigned asking_map:1;   // a CLUSTER SLOTS is in flight
    unsigned soon:1;         // a refresh is wanted before the periodic one
    unsigned full:1;         // at the cap with nothing to drop, until the next map or refresh
    time_t capped_logged;    // an answer left out ranges: said once a second (connection errors
                             // of the nodes it named must not hide it)
};

rl_cluster_t* state_of(rl_redis_t* redis) { return static_cast<rl_cluster_t*>(redis->cluster_state); }

void ask_map(rl_redis_t* redis);
void drop_unnamed(rl_redis_t* redis);

void on_refresh(ngx_event_t* ev) noexcept {
    auto* redis = static_cast<rl_redis_t*>(ev->data);
    state_of(redis)->full = 0;
    drop_unnamed(redis);  // nodes whose last commands were in flight at the last map
    ask_map(redis);
    if (!ngx_exiting && !ngx_quit && !ngx_terminate) ngx_add_timer(ev, kRefreshEvery);
}

std::string_view sv(const char* s, size_t n) { return {s, n}; }

// The map gives `slot` to the node of index ref - 1 (0: to none), and counts what each owns.
void set_slot(rl_cluster_t* cl, size_t slot, uint16_t ref) {
    if (cl->slots[slot] != 0) cl->owned[cl->slots[slot] - 1]--;
    cl->slots[slot] = ref;
    if (ref != 0) cl->owned[ref - 1]++;
}

ngx_uint_t first_probe(const rl_cluster_t* cl, uint64_t key) {
    return static_cast<ngx_uint_t>((key * 0x9e3779b97f4a7c15ull) >> 32) & cl->mask;
}

void table_insert(rl_cluster_t* cl, ngx_uint_t index) {
    ngx_uint_t h = first_probe(cl, cl->keys[index]);
    while (cl->table[h] != 0) h = (h + 1) & cl->mask;
    cl->table[h] = static_cast<uint16_t>(index + 1);
}

// Retires the nodes the map no longer names (never a seed), once nothing is in flight or
// waiting on them; the others at a later refresh.
void drop_unnamed(rl_redis_t* redis) {
    rl_cluster_t* cl = state_of(redis);
    bool dropped = false;
    for (ngx_uint_t i = cl->nseeds; i < redis->nodes.n; i++) {
        rl_redis_node_t* node = redis->nodes.elts[i];
        if (node->retired || cl->owned[i] > 0 || !rl_node_idle(node)) continue;
        ngx_log_debug2(NGX_LOG_DEBUG_HTTP, redis->conn.log, 0, "ratelimit redis \"%V\": node %V dropped",
                       &redis->name, &node->conn.addr.name);
        rl_node_retire(node);
        cl->live--;
        dropped = true;
    }
    if (!dropped) return;
    ngx_memzero(cl->table, (cl->mask + 1) * sizeof(uint16_t));  // built again without them
    for (ngx_uint_t i = cl->nseeds; i < redis->nodes.n; i++) {
        if (!redis->nodes.elts[i]->retired) table_insert(cl, i);
    }
}

// A socket address as one number, for the lookup (equal addresses, equal keys).
uint64_t addr_key(const sockaddr* sa) {
    uint64_t port = ngx_inet_get_port(const_cast<sockaddr*>(sa));
    if (sa->sa_family == AF_INET) {
        return (uint64_t{ntohl(reinterpret_cast<const sockaddr_in*>(sa)->sin_addr.s_addr)} << 16) | port;
    }
    uint64_t h = 1469598103934665603ull;  // FNV-1a over the IPv6 address
#if (NGX_HAVE_INET6)
    const u_char* p = reinterpret_cast<const sockaddr_in6*>(sa)->sin6_addr.s6_addr;
    for (size_t i = 0; i < 16; i++) h = (h ^ p[i]) * 1099511628211ull;
#endif
    return (h << 16) | port | (uint64_t{1} << 63);
}

bool is_at(const rl_redis_node_t* node, const sockaddr* sa, socklen_t len) {
    const ngx_addr_t& a = node->conn.addr;
    return a.sockaddr != nullptr && ngx_cmp_sockaddr(a.sockaddr, a.socklen, const_cast<sockaddr*>(sa), len, 1) == NGX_OK;
}

// The node at `sa`, or nullptr: a seed (its address may change: resolve), or one of the table.
rl_redis_node_t* find_node(rl_redis_t* redis, const sockaddr* sa, socklen_t len, uint64_t key) {
    rl_cluster_t* cl = state_of(redis);
    for (ngx_uint_t i = 0; i < cl->nseeds; i++) {
        if (is_at(redis->nodes.elts[i], sa, len)) return redis->nodes.elts[i];
    }
    for (ngx_uint_t h = first_probe(cl, key); cl->table[h] != 0; h = (h + 1) & cl->mask) {
        ngx_uint_t i = cl->table[h] - 1u;
        if (cl->keys[i] == key && is_at(redis->nodes.elts[i], sa, len)) return redis->nodes.elts[i];
    }
    return nullptr;
}

// The name a node's certificate is checked against: ssl_name, else the host name the node
// announces (cluster-announce-hostname), else its address; copied into the node.
void set_tls_name(rl_redis_t* redis, rl_redis_node_t* node, std::string_view name) {
    if (redis->ssl_name.len || !redis->ssl) {
        node->conn.tls_name = redis->ssl_name;
        return;
    }
    if (name.size() >= sizeof(node->name)) name = {};  // no host name is that long: it matches nothing
    ngx_memcpy(node->name, name.data(), name.size());
    node->conn.tls_name = {name.size(), node->name};
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

// A node's address as CLUSTER SLOTS, MOVED and ASK give it (an IP address and a port), into
// `sa`; its length, or 0 if it is not one.
socklen_t parse_node_addr(std::string_view host, long long port, ngx_sockaddr_t* sa) {
    ngx_memzero(sa, sizeof(*sa));
    if (port <= 0 || port > 65535 || host.empty() || host.size() > NGX_SOCKADDR_STRLEN) return 0;
    auto* text = reinterpret_cast<u_char*>(const_cast<char*>(host.data()));
    socklen_t len = 0;
    in_addr_t v4 = ngx_inet_addr(text, host.size());
    if (v4 != INADDR_NONE) {
        sa->sockaddr_in.sin_family = AF_INET;
        sa->sockaddr_in.sin_addr.s_addr = v4;
        len = sizeof(sa->sockaddr_in);
#if (NGX_HAVE_INET6)
    } else if (ngx_inet6_addr(text, host.size(), sa->sockaddr_in6.sin6_addr.s6_addr) == NGX_OK) {
        sa->sockaddr_in6.sin6_family = AF_INET6;
        len = sizeof(sa->sockaddr_in6);
#endif
    }
    if (len > 0) ngx_inet_set_port(&sa->sockaddr, static_cast<in_port_t>(port));
    return len;
}

// A retired entry to reuse, or room for one more: false at the cap (the nodes the map no
// longer names are dropped first, if idle).
bool room_for_one(rl_redis_t* redis, rl_redis_node_t** reuse) {
    rl_cluster_t* cl = state_of(redis);
    if (cl->live >= cl->cap && !cl->full) drop_unnamed(redis);
    if (cl->live >= cl->cap) {
        cl->full = 1;  // (not looked at again for each of the many nodes an answer may name)
        return false;
    }
    *reuse = nullptr;
    for (ngx_uint_t i = cl->nseeds; i < redis->nodes.n && *reuse == nullptr; i++) {
        if (redis->nodes.elts[i]->retired) *reuse = redis->nodes.elts[i];
    }
    return true;
}

enum node_at_e { NODE_OK, NODE_BAD_ADDRESS, NODE_NO_ROOM };

// The node at host:port (an address CLUSTER SLOTS, MOVED or ASK gave), created (and later
// connected on first use) if new; *why says why not.
rl_redis_node_t* node_at(rl_redis_t* redis, std::string_view host, long long port, std::string_view announced,
                         node_at_e* why) {
    rl_cluster_t* cl = state_of(redis);
    ngx_sockaddr_t sa;
    socklen_t len = parse_node_addr(host, port, &sa);
    if (len == 0) {
        rl::LogText text(host);
        rl_redis_log_error(&redis->conn, 0, "ratelimit redis \"%V\": cannot use the node address \"%*s\" port %L "
                           "(an IP address is needed)", &redis->name, text.len, text.text, port);
        *why = NODE_BAD_ADDRESS;
        return nullptr;
    }
    uint64_t key = addr_key(&sa.sockaddr);
    *why = NODE_OK;
    if (rl_redis_node_t* node = find_node(redis, &sa.sockaddr, len, key)) {
        // First seen in a MOVED (an address only): the name CLUSTER SLOTS announces serves from
        // the next connection on.
        const ngx_str_t& was = node->conn.tls_name;
        if (redis->ssl && redis->ssl_name.len == 0 && !announced.empty() && announced.size() < sizeof(node->name) &&
            (was.len != announced.size() || ngx_strncmp(was.data, announced.data(), was.len) != 0)) {
            set_tls_name(redis, node, announced);
        }
        return node;
    }
    rl_redis_node_t* reuse = nullptr;
    if (!room_for_one(redis, &reuse)) {
        *why = NODE_NO_ROOM;
        return nullptr;
    }
    ngx_addr_t none;
    ngx_memzero(&none, sizeof(none));
    rl_redis_node_t* node = rl_node_add(redis, none, reuse);
    if (node == nullptr) return nullptr;
    rl_conn_set_addr(&node->conn, &sa.sockaddr, len);  // the name is the address as nginx prints it
    set_tls_name(redis, node, announced.empty() ? host : announced);
    cl->keys[node->index] = key;
    table_insert(cl, node->index);
    cl->live++;
    return node;
}

// A range of CLUSTER SLOTS ([start, end, [host, port, ...], replicas...]): its bounds and its
// primary, or false if it is not one (it names no slot then).
bool read_range(const redisReply* range, long long* start, long long* end, const redisReply** primary) {
    if (range->type != REDIS_REPLY_ARRAY || range->elements < 3) return false;
    const redisReply* s = range->element[0];
    const redisReply* e = range->element[1];
    const redisReply* p = range->element[2];
    if (s->type != REDIS_REPLY_INTEGER || e->type != REDIS_REPLY_INTEGER || p->type != REDIS_REPLY_ARRAY ||
        p->elements < 2 || p->element[0]->type != REDIS_REPLY_STRING || p->element[1]->type != REDIS_REPLY_INTEGER) {
        return false;
    }
    if (s->integer < 0 || s->integer > e->integer || e->integer >= rl::kClusterSlots) return false;
    *start = s->integer;
    *end = e->integer;
    *primary = p;
    return true;
}

// CLUSTER SLOTS: [[start, end, [host, port, id, ...], replicas...], ...]. The answer is the
// whole map: slots it does not name are unknown (their keys go to a node that redirects),
// nodes it does not name are dropped. Its work is bounded: ranges past the 16384 slots there
// are, and nodes past kMaxNodes, are left out (logged).
void on_map(rl_conn_op_t* op, redisReply* reply) noexcept {
    auto* redis = static_cast<rl_redis_t*>(op->data);
    rl_cluster_t* cl = state_of(redis);
    cl->asking_map = 0;
    if (reply == nullptr) {
        cl->soon = 1;  // that node is gone: ask another one shortly
        return;
    }
    long long start, end;
    const redisReply* primary;
    size_t named = 0;
    for (size_t i = 0; reply->type == REDIS_REPLY_ARRAY && i < reply->elements && named == 0; i++) {
        if (read_range(reply->element[i], &start, &end, &primary)) named++;
    }
    if (named == 0) {  // an error, or nothing a map is made of: the map is kept
        rl::LogText text(reply->type == REDIS_REPLY_ERROR ? sv(reply->str, reply->len) : std::string_view());
        rl_redis_log_error(&redis->conn, 0, "ratelimit redis \"%V\" at %V: CLUSTER SLOTS failed: %s%*s", &redis->name,
                           &op->conn->addr.name, reply->type == REDIS_REPLY_ERROR ? "" : "no slot in the answer",
                           text.len, text.text);
        cl->soon = 1;
        return;
    }
    for (size_t s = 0; s < rl::kClusterSlots; s++) set_slot(cl, s, 0);
    cl->full = 0;
    size_t assigned = 0, left_out = 0;
    for (size_t i = 0; i < reply->elements; i++) {
        if (!read_range(reply->element[i], &start, &end, &primary)) continue;
        if (assigned + static_cast<size_t>(end - start + 1) > rl::kClusterSlots) {
            left_out++;  // more slots than there are: what is past them is not a map
            continue;
        }
        std::string_view host = sv(primary->element[0]->str, primary->element[0]->len);
        rl_redis_node_t* node;
        node_at_e why = NODE_OK;
        if (host.empty() || host == "?") {
            node = static_cast<rl_redis_node_t*>(op->conn->data);  // the node does not know its own address: it is the one we asked
        } else {
            node = node_at(redis, host, primary->element[1]->integer, announced_hostname(primary), &why);
        }
        if (node == nullptr) {
            if (why == NODE_NO_ROOM) left_out++;
            continue;
        }
        assigned += static_cast<size_t>(end - start + 1);
        auto ref = static_cast<uint16_t>(node->index + 1);
        for (long long s = start; s <= end; s++) set_slot(cl, static_cast<size_t>(s), ref);
    }
    drop_unnamed(redis);
    cl->soon = 0;
    if (left_out > 0 && cl->capped_logged != ngx_time()) {
        cl->capped_logged = ngx_time();
        ngx_log_error(NGX_LOG_ERR, redis->conn.log, 0, "ratelimit redis \"%V\" at %V: CLUSTER SLOTS names more slots "
                      "or nodes than there can be (%ui nodes kept at most): %uz ranges left out, their keys go to a "
                      "known node", &redis->name, &op->conn->addr.name, cl->cap, left_out);
    }
    ngx_log_debug4(NGX_LOG_DEBUG_HTTP, redis->conn.log, 0, "ratelimit redis \"%V\" at %V: slot map of %uz ranges, %ui nodes",
                   &redis->name, &op->conn->addr.name, reply->elements, cl->live);
}

// The map is asked of the configured nodes and of the others in turn (a poisoned map of dead
// nodes cannot keep it from the seeds), kAskTries nodes at most per ask.
void ask_map(rl_redis_t* redis) {
    rl_cluster_t* cl = state_of(redis);
    if (cl->asking_map || redis->nodes.n == 0) return;
    static const char kCommand[] = "*2\r\n$7\r\nCLUSTER\r\n$5\r\nSLOTS\r\n";
    for (ngx_uint_t tries = 0; tries < kAskTries; tries++) {
        ngx_uint_t turn = cl->next++;
        rl_redis_node_t* node = turn % 2 == 0 ? redis->nodes.elts[(turn / 2) % cl->nseeds]
                                              : redis->nodes.elts[(turn / 2) % redis->nodes.n];
        if (node->retired) continue;
        if (rl_conn_send(&node->conn, reinterpret_cast<const u_char*>(kCommand), sizeof(kCommand) - 1, on_map, redis, 0)) {
            cl->asking_map = 1;
            return;
        }
    }
}

}  // namespace

bool rl_cluster_init(rl_redis_t* redis) noexcept {
    auto* cl = static_cast<rl_cluster_t*>(ngx_calloc(sizeof(rl_cluster_t), redis->conn.log));
    if (cl == nullptr || redis->nodes.n == 0) return false;
    redis->cluster_state = cl;
    cl->nseeds = cl->live = redis->nodes.n;
    cl->cap = cl->nseeds > kMaxNodes ? (cl->nseeds < 65535 ? cl->nseeds : 65534) : kMaxNodes;
    cl->mask = 1;
    while (cl->mask + 1 < 2 * cl->cap) cl->mask = 2 * cl->mask + 1;
    cl->owned = static_cast<uint16_t*>(ngx_calloc(cl->cap * sizeof(uint16_t), redis->conn.log));
    cl->keys = static_cast<uint64_t*>(ngx_calloc(cl->cap * sizeof(uint64_t), redis->conn.log));
    cl->table = static_cast<uint16_t*>(ngx_calloc((cl->mask + 1) * sizeof(uint16_t), redis->conn.log));
    if (cl->owned == nullptr || cl->keys == nullptr || cl->table == nullptr) return false;
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
    // Unknown slot (the map is not in yet): a seed answers with a MOVED to the right node.
    return redis->nodes.elts[slot % cl->nseeds];
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
    node_at_e why = NODE_OK;
    rl_redis_node_t* node = node_at(redis, host, port, {}, &why);
    if (why == NODE_NO_ROOM) {
        rl::LogText name(host);
        rl_redis_log_error(&redis->conn, 0, "ratelimit redis \"%V\": a redirection to %*s:%i not followed: %ui nodes "
                           "kept at most", &redis->name, name.len, name.text, port, state_of(redis)->cap);
    }
    if (node != nullptr && !*ask) {
        // MOVED: the slot has a new owner for good; the rest of the map may have moved too.
        set_slot(state_of(redis), static_cast<size_t>(slot), static_cast<uint16_t>(node->index + 1));
        rl_cluster_refresh_soon(redis);
    }
    return node;
}

void rl_cluster_node_failed(rl_redis_node_t* node) noexcept {
    // A seed may fail at once, while the worker starts, before the cluster state exists.
    if (node->redis->cluster && node->redis->cluster_state != nullptr) rl_cluster_refresh_soon(node->redis);
}
