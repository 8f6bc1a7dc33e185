// The metrics' counters: of zones and Redis servers, in a shared-memory zone of the module's own
// (table.h; engine/metrics_zone.cpp makes it when a front end exports metrics). Every worker
// adds to them without a lock; each zone's and Redis's counters are found by name, so they
// survive reloads. Hooks on the request path are one branch when metrics are off.
#pragma once

#include "ngx/ngx_include.h"

// What a request came to in one zone that applied to it (nginx_ratelimit_requests_total).
enum rl_result_kind_e {
    RL_RESULT_PASSED = 0,
    RL_RESULT_REJECTED,
    RL_RESULT_REJECTED_DRY_RUN,
    RL_RESULT_EXEMPT,          // the zone's key was empty
    RL_RESULT_ERROR_ALLOWED,   // Redis did not answer; ratelimit_on_error allow / deny / local
    RL_RESULT_ERROR_DENIED,
    RL_RESULT_ERROR_LOCAL,
    RL_RESULT_DELAYED,         // admitted after a delay (delay=)
    RL_RESULT_DELAYED_DRY_RUN, // would have been delayed; passed at once
    RL_RESULT_BLOCKED,         // rejected by a live block (block=), not by the limit itself
    RL_RESULT_BLOCKED_DRY_RUN, // the same in dry run: passed
    RL_RESULT_N,
};

// Why a Redis command or connection failed (nginx_ratelimit_redis_errors_total).
enum rl_redis_error_e {
    RL_REDIS_ERR_TIMEOUT = 0,  // no reply in time (a request's timeout, or a stuck connection)
    RL_REDIS_ERR_REFUSED,      // connect failed
    RL_REDIS_ERR_RESET,        // read or write failed, closed by the peer
    RL_REDIS_ERR_PROTOCOL,     // a reply that is not RESP or not what was asked for
    RL_REDIS_ERR_ERROR_REPLY,  // an error reply (the handshake's, a script's)
    RL_REDIS_ERR_OVERFLOW,     // max_pending reached
    RL_REDIS_ERR_BOUNDS,       // a sync reply outside what the policy allows (core/reconcile/sync_reply.h), refused
    RL_REDIS_ERR_TLS,          // a TLS handshake failed, or the server's certificate was refused
    RL_REDIS_ERR_N,
    RL_REDIS_ERR_NONE = RL_REDIS_ERR_N,  // not counted (out of memory)
};

constexpr ngx_uint_t kRlRoundTripBuckets = 13;  // 100 µs .. 1 s, then +Inf
inline constexpr uint64_t kRlRoundTripBoundsNs[kRlRoundTripBuckets] = {
    100000, 250000, 500000, 1000000, 2500000, 5000000, 10000000, 25000000, 50000000, 100000000, 250000000,
    500000000, 1000000000,
};

// In shared memory: plain counters, updated with atomic adds.
// A zone's kind, as its counters tell another front end's reader (rl_metrics_zone_t::kind).
constexpr ngx_atomic_uint_t RL_MZ_CONCURRENCY = 1;  // an in-flight zone: its in_flight gauge
constexpr ngx_atomic_uint_t RL_MZ_REDIS = 2;        // decided in Redis per request: its settle failures
constexpr ngx_atomic_uint_t RL_MZ_SYNC = 4;         // a sync zone

struct rl_metrics_zone_t {
    ngx_atomic_t kind;  // RL_MZ_* bits, set by the configuration that names it
    ngx_atomic_t requests[RL_RESULT_N];   // requests (http), connections and UDP sessions (stream)
    ngx_atomic_t datagrams[RL_RESULT_N];  // datagrams of admitted UDP sessions (stream, at=datagram)
    ngx_atomic_t in_flight;  // concurrency zones: slots this host's requests hold (a gauge)
    ngx_atomic_t settle_failures;  // settles Redis did not take, after their second try (stores/redis_settle.cpp)
};

struct rl_metrics_redis_t {
    ngx_atomic_t calls;       // script runs (batches) sent
    ngx_atomic_t checks;      // the checks they carried
    ngx_atomic_t errors[RL_REDIS_ERR_N];
    ngx_atomic_t reconnects;
    ngx_atomic_t in_flight;   // a gauge: workers add and subtract (two's complement)
    ngx_atomic_t moved;
    ngx_atomic_t ask;
    ngx_atomic_t round_trip[kRlRoundTripBuckets + 1];  // per bucket, not cumulative
    ngx_atomic_t round_trip_ns;                         // their sum
};

inline void rl_metrics_add(ngx_atomic_t* counter, ngx_atomic_int_t n) { ngx_atomic_fetch_add(counter, n); }

inline void rl_metrics_count(rl_metrics_zone_t* m, rl_result_kind_e kind) {
    if (m != nullptr) rl_metrics_add(&m->requests[kind], 1);
}

inline void rl_metrics_redis_error(rl_metrics_redis_t* m, rl_redis_error_e why) {
    if (m != nullptr && why < RL_REDIS_ERR_N) rl_metrics_add(&m->errors[why], 1);
}

inline void rl_metrics_in_flight(rl_metrics_redis_t* m, ngx_int_t delta) {
    if (m != nullptr && delta != 0) rl_metrics_add(&m->in_flight, delta);
}

// A batch sent: a script run carrying sizes[0..n) checks.
inline void rl_metrics_batch(rl_metrics_redis_t* m, const uint16_t* sizes, ngx_uint_t n) {
    if (m == nullptr) return;
    ngx_atomic_int_t checks = 0;
    for (ngx_uint_t i = 0; i < n; i++) checks += sizes[i];
    rl_metrics_add(&m->calls, 1);
    rl_metrics_add(&m->checks, checks);
}

inline void rl_metrics_redirect(rl_metrics_redis_t* m, bool ask) {
    if (m != nullptr) rl_metrics_add(ask ? &m->ask : &m->moved, 1);
}

// A monotonic clock in ns, for round trips: 0 when metrics are off (nothing to measure).
uint64_t rl_metrics_now_ns(const rl_metrics_redis_t* m) noexcept;
// A reply came for a command written at `sent_ns` (0: not measured).
void rl_metrics_round_trip(rl_metrics_redis_t* m, uint64_t sent_ns) noexcept;
