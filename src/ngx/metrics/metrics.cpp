// Round trips to Redis, measured when metrics are on.
#include "ngx/metrics/metrics.h"

#include <ctime>

uint64_t rl_metrics_now_ns(const rl_metrics_redis_t* m) noexcept {
    if (m == nullptr) return 0;
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return static_cast<uint64_t>(ts.tv_sec) * 1000000000u + static_cast<uint64_t>(ts.tv_nsec);
}

void rl_metrics_round_trip(rl_metrics_redis_t* m, uint64_t sent_ns) noexcept {
    if (m == nullptr || sent_ns == 0) return;
    uint64_t took = rl_metrics_now_ns(m) - sent_ns;
    ngx_uint_t b = 0;
    while (b < kRlRoundTripBuckets && took > kRlRoundTripBoundsNs[b]) b++;
    rl_metrics_add(&m->round_trip[b], 1);
    rl_metrics_add(&m->round_trip_ns, static_cast<ngx_atomic_int_t>(took));
}
