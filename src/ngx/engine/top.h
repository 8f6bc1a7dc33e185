// The keys each zone rejects most, lately (top=K; the summary is core/keys/top_keys.h, in the
// zone's shared memory: stores/table.cpp): counted from a verdict's rejections (decide.cpp), read
// and dropped by an operator's API. Each call takes the zone's lock. Every host counts the
// rejections it decides or hears from Redis (a Redis or sync zone's summary is this host's).
#pragma once

#include "ngx/limits/context.h"

#include "core/keys/top_keys.h"

// ctx was rejected: each result that rejected it (blocked ones too, dry run's too) counts one
// against its key in its zone's summary. Not called for an admitted request.
void rl_top_record(const rl_ctx_t* ctx) noexcept;
// The window of `zone`'s summary at `now_us` and its `n` largest keys into out[0..return), largest
// first; 0 when top is off (w zeroed).
size_t rl_top_read(rl_zone_t* zone, int64_t now_us, rl::TopItem* out, size_t n, rl::TopWindow* w) noexcept;
// The key leaves `zone`'s summary (its reset); true if it was there.
bool rl_top_drop(rl_zone_t* zone, const rl::KeyHash& hash) noexcept;
// At configuration: a front end applies `zone` (key=$ratelimit_client_prefix) where the prefix
// lengths are these; its keys show them when every such place has the same.
void rl_top_prefix(rl_zone_t* zone, unsigned v4_bits, unsigned v6_bits) noexcept;
// The summaries' clock: unix microseconds, nginx's cached time.
int64_t rl_top_now_us() noexcept;
