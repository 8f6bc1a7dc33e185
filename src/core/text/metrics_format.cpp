#include "core/text/metrics_format.h"

#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace rl {

size_t format_metric_double(char* out, double v) {
    if (std::isnan(v)) return static_cast<size_t>(std::snprintf(out, 32, "NaN"));
    if (std::isinf(v)) return static_cast<size_t>(std::snprintf(out, 32, v > 0 ? "+Inf" : "-Inf"));
    int n = 0;
    for (int precision = 1; precision <= 17; precision++) {
        n = std::snprintf(out, 32, "%.*g", precision, v);
        if (std::strtod(out, nullptr) == v) break;
    }
    return static_cast<size_t>(n);
}

void MetricsWriter::put(std::string_view s) {
    if (len_ < cap_) std::memcpy(buf_ + len_, s.data(), s.size() <= cap_ - len_ ? s.size() : cap_ - len_);
    len_ += s.size();
}

// Label values escape \, " and newline; HELP text escapes \ and newline only.
void MetricsWriter::put_escaped(std::string_view s, bool help) {
    size_t from = 0;
    for (size_t i = 0; i < s.size(); i++) {
        const char* esc = s[i] == '\\' ? "\\\\" : s[i] == '\n' ? "\\n" : (s[i] == '"' && !help) ? "\\\"" : nullptr;
        if (esc == nullptr) continue;
        put(s.substr(from, i - from));
        put(esc);
        from = i + 1;
    }
    put(s.substr(from));
}

void MetricsWriter::family(std::string_view name, std::string_view help, std::string_view type) {
    put("# HELP ");
    put(name);
    put(" ");
    put_escaped(help, true);
    put("\n# TYPE ");
    put(name);
    put(" ");
    put(type);
    put("\n");
}

void MetricsWriter::series(std::string_view name, std::string_view suffix, const MetricLabel* labels, size_t n) {
    put(name);
    put(suffix);
    for (size_t i = 0; i < n; i++) {
        put(i == 0 ? "{" : ",");
        put(labels[i].name);
        put("=\"");
        put_escaped(labels[i].value, false);
        put("\"");
    }
    put(n ? "} " : " ");
}

void MetricsWriter::put_value(uint64_t value) {
    char text[24];
    int len = std::snprintf(text, sizeof(text), "%" PRIu64 "\n", value);
    put(std::string_view(text, static_cast<size_t>(len)));
}

void MetricsWriter::sample(std::string_view name, const MetricLabel* labels, size_t n, uint64_t value) {
    series(name, "", labels, n);
    put_value(value);
}

void MetricsWriter::sample(std::string_view name, const MetricLabel* labels, size_t n, int64_t value) {
    char text[24];
    int len = std::snprintf(text, sizeof(text), "%" PRId64 "\n", value);
    series(name, "", labels, n);
    put(std::string_view(text, static_cast<size_t>(len)));
}

void MetricsWriter::histogram(std::string_view name, const MetricLabel* labels, size_t n, const double* bounds,
                              const uint64_t* counts, size_t nbounds, double sum) {
    constexpr size_t kMaxLabels = 8;
    MetricLabel with_le[kMaxLabels + 1];
    if (n > kMaxLabels) n = kMaxLabels;
    for (size_t i = 0; i < n; i++) with_le[i] = labels[i];
    char le[32];
    uint64_t total = 0;
    for (size_t b = 0; b <= nbounds; b++) {
        total += counts[b];
        size_t len = format_metric_double(le, b < nbounds ? bounds[b] : HUGE_VAL);
        with_le[n] = MetricLabel{"le", std::string_view(le, len)};
        series(name, "_bucket", with_le, n + 1);
        put_value(total);
    }
    char text[40];
    size_t slen = format_metric_double(text, sum);
    text[slen++] = '\n';
    series(name, "_sum", labels, n);
    put(std::string_view(text, slen));
    series(name, "_count", labels, n);
    put_value(total);
}

}  // namespace rl
