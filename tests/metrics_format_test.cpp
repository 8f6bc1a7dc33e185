#include "core/text/metrics_format.h"

#include <gtest/gtest.h>

#include <cmath>
#include <string>

namespace {

using rl::MetricLabel;
using rl::MetricsWriter;

std::string text(const MetricsWriter& w, const char* buf) { return std::string(buf, w.length()); }

TEST(MetricsFormat, FamilyHasHelpAndType) {
    char buf[256];
    MetricsWriter w(buf, sizeof(buf));
    w.family("nginx_x_total", "Requests \\ by\nresult \"quoted\"", "counter");
    EXPECT_TRUE(w.complete());
    // HELP escapes backslash and newline, not quotes.
    EXPECT_EQ(text(w, buf), "# HELP nginx_x_total Requests \\\\ by\\nresult \"quoted\"\n# TYPE nginx_x_total counter\n");
}

TEST(MetricsFormat, LabelValuesAreEscaped) {
    char buf[256];
    MetricsWriter w(buf, sizeof(buf));
    MetricLabel labels[] = {{"zone", "a\"b\\c\nd"}, {"result", "passed"}};
    w.sample("m", labels, 2, uint64_t{42});
    EXPECT_EQ(text(w, buf), "m{zone=\"a\\\"b\\\\c\\nd\",result=\"passed\"} 42\n");
}

TEST(MetricsFormat, SamplesWithoutLabelsAndNegativeGauges) {
    char buf[256];
    MetricsWriter w(buf, sizeof(buf));
    w.sample("g", nullptr, 0, int64_t{-3});
    w.sample("c", nullptr, 0, uint64_t{18446744073709551615u});
    EXPECT_EQ(text(w, buf), "g -3\nc 18446744073709551615\n");
}

TEST(MetricsFormat, HistogramBucketsAreCumulativeWithInfSumAndCount) {
    char buf[1024];
    MetricsWriter w(buf, sizeof(buf));
    MetricLabel labels[] = {{"redis", "main"}};
    double bounds[] = {0.0001, 0.00025, 1};
    uint64_t counts[] = {2, 0, 5, 1};  // the last: above 1 s
    w.histogram("h_seconds", labels, 1, bounds, counts, 3, 1.5);
    EXPECT_EQ(text(w, buf),
              "h_seconds_bucket{redis=\"main\",le=\"0.0001\"} 2\n"
              "h_seconds_bucket{redis=\"main\",le=\"0.00025\"} 2\n"
              "h_seconds_bucket{redis=\"main\",le=\"1\"} 7\n"
              "h_seconds_bucket{redis=\"main\",le=\"+Inf\"} 8\n"
              "h_seconds_sum{redis=\"main\"} 1.5\n"
              "h_seconds_count{redis=\"main\"} 8\n");
}

TEST(MetricsFormat, TooSmallABufferCountsWhatDidNotFit) {
    char big[256];
    MetricsWriter full(big, sizeof(big));
    MetricLabel labels[] = {{"zone", "z"}};
    full.family("m", "help", "counter");
    full.sample("m", labels, 1, uint64_t{7});

    char small[10];
    MetricsWriter cut(small, sizeof(small));
    cut.family("m", "help", "counter");
    cut.sample("m", labels, 1, uint64_t{7});
    EXPECT_FALSE(cut.complete());
    EXPECT_EQ(cut.length(), full.length());
    EXPECT_EQ(std::string(small, sizeof(small)), std::string(big, sizeof(small)));

    MetricsWriter none(nullptr, 0);  // measuring only
    none.family("m", "help", "counter");
    none.sample("m", labels, 1, uint64_t{7});
    EXPECT_EQ(none.length(), full.length());
}

TEST(MetricsFormat, DoublesAreShortAndExact) {
    char out[32];
    auto f = [&](double v) { return std::string(out, rl::format_metric_double(out, v)); };
    EXPECT_EQ(f(0.0001), "0.0001");
    EXPECT_EQ(f(0.00025), "0.00025");
    EXPECT_EQ(f(0.1), "0.1");
    EXPECT_EQ(f(1), "1");
    EXPECT_EQ(f(0), "0");
    EXPECT_EQ(f(1.0 / 3), "0.3333333333333333");
    EXPECT_EQ(f(HUGE_VAL), "+Inf");
    EXPECT_EQ(f(-HUGE_VAL), "-Inf");
    EXPECT_EQ(f(NAN), "NaN");
}

}  // namespace
