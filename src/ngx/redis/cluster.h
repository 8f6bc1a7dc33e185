// Redis Cluster routing for a `ratelimit_redis NAME cluster ...` (see redis_cluster.cpp).
#pragma once

#include "ngx/redis/node.h"

// Creates the worker's slot map and asks for it; refreshes it about every second.
bool rl_cluster_init(rl_redis_t* redis) noexcept;
// The primary owning `slot`, as far as this worker knows (any node while it does not know).
rl_redis_node_t* rl_cluster_route(rl_redis_t* redis, uint16_t slot) noexcept;
// For a MOVED or ASK error reply: the node to retry on (created if new), or nullptr if the
// reply is neither. A MOVED also updates the map; *ask tells which it was.
rl_redis_node_t* rl_cluster_redirect(rl_redis_t* redis, const redisReply* reply, bool* ask) noexcept;
// The map may be stale (a node failed, a redirection was seen): ask for it again soon.
void rl_cluster_refresh_soon(rl_redis_t* redis) noexcept;
void rl_cluster_node_failed(rl_redis_node_t* node) noexcept;
