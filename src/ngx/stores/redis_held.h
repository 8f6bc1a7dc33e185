// In-flight slots held in Redis (concurrency zones with redis=): each is a member of its key's
// sorted set, taken by the request's script call; here it is kept alive while its request runs
// (every worker refreshes all of its slots every hold / 3, one pipelined write per server) and
// given back when the request ends (a ZREM). Both follow MOVED / ASK (resend.h): a slot whose
// key moved to another node is given back, or kept, there. A host that dies stops refreshing:
// Redis drops its slots within `hold`.
#pragma once

#include "ngx/redis/redis.h"

#include "core/wire/redis_command.h"

struct rl_metrics_zone_t;

struct rl_held_t {
    ngx_queue_t link;        // in the ratelimit_redis's held slots (per worker)
    rl_held_t* next;         // the request's other slots
    rl_redis_t* redis;
    rl_metrics_zone_t* metrics;  // the zone's in-flight gauge, or nullptr
    uint16_t slot;           // cluster slot of the key
    rl::RedisCheck check;    // zone name (configuration memory), hash, owner and seq
    rl::Policy policy;       // the check's, copied: a tier's lives in the request's pool
};

// This worker's owner id (random, < 2^48) and a new request's sequence number: the member
// "<owner>.<seq>" is unique across hosts and workers.
uint64_t rl_held_owner() noexcept;
uint64_t rl_held_next_seq() noexcept;
// Redis's clock as a decide reply reported it: refresh scores are computed from it.
void rl_held_clock(rl_redis_t* redis, int64_t redis_now_us) noexcept;
// The request was admitted holding `check`'s slot (its member in Redis): refreshed from now on
// until rl_held_release. nullptr without memory (the slot then expires after hold).
rl_held_t* rl_held_add(rl_redis_t* redis, const rl::RedisCheck& check, uint16_t slot,
                       rl_metrics_zone_t* metrics) noexcept;
// The request is over: its slot goes back (a ZREM at the end of the loop turn, one per key for
// all the slots given back meanwhile, not awaited) and is no longer refreshed.
void rl_held_release(rl_held_t* held) noexcept;
// Worker start and exit.
void rl_held_init(rl_redis_t* redis, ngx_log_t* log) noexcept;
void rl_held_exit(rl_redis_t* redis) noexcept;
