// `ratelimit_redis ... resolve`: the host names of its addresses are resolved in the worker
// through http{}'s `resolver`, again every second (nginx's resolver answers from its cache
// until the record's TTL, or `valid=`, runs out) and soon after a connection to it fails. A
// failed answer keeps the last good address; a new one moves the connection there.
#pragma once

#include "ngx/redis/redis.h"

bool rl_resolve_init(rl_redis_t* redis) noexcept;
// Watches `conn`, configured as host:port (a name), from now on.
bool rl_resolve_watch(rl_redis_t* redis, rl_conn_t* conn, const ngx_str_t& host, in_port_t port) noexcept;
// The connection failed: its name is asked again soon.
void rl_resolve_soon(rl_redis_t* redis, rl_conn_t* conn) noexcept;
void rl_resolve_exit(rl_redis_t* redis) noexcept;
