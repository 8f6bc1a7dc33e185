// The Prometheus text exposition format (version 0.0.4): families with # HELP and # TYPE,
// samples with escaped label values, histograms with cumulative buckets.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string_view>

namespace rl {

struct MetricLabel {
    std::string_view name;
    std::string_view value;  // any bytes: escaped as the format requires
};

// Writes into a caller's buffer without allocating: what does not fit is dropped, but
// length() counts it, so a caller whose buffer was too small knows the size to retry with.
class MetricsWriter {
public:
    MetricsWriter(char* buf, size_t cap) : buf_(buf), cap_(cap) {}

    // # HELP and # TYPE lines; type is counter, gauge or histogram.
    void family(std::string_view name, std::string_view help, std::string_view type);
    void sample(std::string_view name, const MetricLabel* labels, size_t n, uint64_t value);
    void sample(std::string_view name, const MetricLabel* labels, size_t n, int64_t value);
    // A histogram's samples from per-bucket counts: counts[i] observations <= bounds[i] (and
    // above bounds[i - 1]), counts[nbounds] above the last bound. Buckets are written
    // cumulative, then +Inf, _sum and _count. At most 8 labels besides le.
    void histogram(std::string_view name, const MetricLabel* labels, size_t n, const double* bounds,
                   const uint64_t* counts, size_t nbounds, double sum);

    size_t length() const { return len_; }
    bool complete() const { return len_ <= cap_; }

private:
    void put(std::string_view s);
    void put_escaped(std::string_view s, bool help);
    void put_value(uint64_t value);
    void series(std::string_view name, std::string_view suffix, const MetricLabel* labels, size_t n);
    char* buf_;
    size_t cap_;
    size_t len_ = 0;
};

// The shortest decimal text that reads back as `v` (Prometheus's own style: 0.00025, 1e-05,
// +Inf); `out` has room for 32 bytes. Returns the bytes written.
size_t format_metric_double(char* out, double v);

}  // namespace rl
