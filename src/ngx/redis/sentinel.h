// `ratelimit_redis NAME sentinel=MASTER ADDRESS...`: the addresses are Sentinels. Each worker
// asks them where the master is (SENTINEL get-master-addr-by-name), points the one server of
// the ratelimit_redis there, and asks again every second and soon after the master fails or
// refuses writes, so a failover is followed without a reload. The Sentinels' connections have
// their own handshake (their own credentials, and a check that they are Sentinels).
#pragma once

#include "ngx/redis/node.h"

bool rl_sentinel_init(rl_redis_t* redis) noexcept;
// The master failed or refused a write: ask the Sentinels soon (at most every 100 ms).
void rl_sentinel_ask_soon(rl_redis_t* redis) noexcept;
void rl_sentinel_exit(rl_redis_t* redis) noexcept;
