// The Prometheus text helpers: escaping (label values and HELP), value formatting, names, the
// histogram's buckets, and the family/sample rules TextBuilder enforces. The whole exposition of a
// running front is parsed strictly by tests/e2e/prometheus_test.cc.
#include "common/prometheus_text.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "common/error.h"

namespace ajet::prometheus {
namespace {

TEST(PrometheusText, LabelValuesEscapeBackslashQuoteAndNewline) {
  EXPECT_EQ(escape_label_value("plain /route/{x}"), "plain /route/{x}");
  EXPECT_EQ(escape_label_value("a\\b"), "a\\\\b");
  EXPECT_EQ(escape_label_value("say \"hi\""), "say \\\"hi\\\"");
  EXPECT_EQ(escape_label_value("two\nlines"), "two\\nlines");
  EXPECT_EQ(escape_label_value("\\\"\n"), "\\\\\\\"\\n");
  EXPECT_EQ(escape_label_value("tab\tand ünïcode stay"), "tab\tand ünïcode stay");
}

TEST(PrometheusText, HelpEscapesBackslashAndNewlineButNotQuotes) {
  EXPECT_EQ(escape_help("a \"quoted\" word"), "a \"quoted\" word");
  EXPECT_EQ(escape_help("C:\\path\nnext"), "C:\\\\path\\nnext");
}

TEST(PrometheusText, ValuesAreIntegersShortestFloatsOrSpecials) {
  EXPECT_EQ(format_value(0), "0");
  EXPECT_EQ(format_value(42), "42");
  EXPECT_EQ(format_value(-7), "-7");
  EXPECT_EQ(format_value(1234567890123.0), "1234567890123");
  EXPECT_EQ(format_value(0.25), "0.25");
  EXPECT_EQ(format_value(0.001), "0.001");
  EXPECT_EQ(format_value(2.5), "2.5");
  EXPECT_EQ(std::stod(format_value(0.1 + 0.2)), 0.1 + 0.2);  // reads back exactly
  EXPECT_EQ(format_value(std::numeric_limits<double>::infinity()), "+Inf");
  EXPECT_EQ(format_value(-std::numeric_limits<double>::infinity()), "-Inf");
  EXPECT_EQ(format_value(std::nan("")), "NaN");
}

TEST(PrometheusText, NamesFollowTheFormat) {
  EXPECT_TRUE(valid_metric_name("ajet_http_requests_total"));
  EXPECT_TRUE(valid_metric_name("job:rate5m"));
  EXPECT_TRUE(valid_metric_name("_x"));
  EXPECT_FALSE(valid_metric_name(""));
  EXPECT_FALSE(valid_metric_name("9lives"));
  EXPECT_FALSE(valid_metric_name("ajet-http"));
  EXPECT_FALSE(valid_metric_name("ajet.http"));
  EXPECT_TRUE(valid_label_name("route"));
  EXPECT_FALSE(valid_label_name("__name__"));  // reserved
  EXPECT_FALSE(valid_label_name("a:b"));       // colons are for metric names only
  EXPECT_FALSE(valid_label_name("1st"));
}

TEST(PrometheusText, HistogramBucketsAreCumulativeAndABoundIsInclusive) {
  Histogram h({0.1, 1, 10});
  for (double v : {0.05, 0.1, 0.5, 1.0, 3.0, 100.0}) h.observe(v);
  EXPECT_EQ(h.cumulative_counts(), (std::vector<uint64_t>{2, 4, 5}));
  EXPECT_EQ(h.count(), 6u);
  EXPECT_DOUBLE_EQ(h.sum(), 104.65);
  EXPECT_THROW(Histogram({1, 1}), Error);
  EXPECT_THROW(Histogram({2, 1}), Error);
  EXPECT_THROW(Histogram({1, std::numeric_limits<double>::infinity()}), Error);
  std::vector<double> latency = latency_buckets_seconds();
  EXPECT_EQ(latency.front(), 0.001);
  EXPECT_EQ(latency.back(), 60);
}

TEST(PrometheusText, BuilderWritesHelpTypeAndEscapedSamples) {
  TextBuilder out;
  out.family("ajet_http_requests_total", Type::kCounter, "Requests.\nBy route.");
  out.sample({{"route", "/a\"b\\c\nd"}, {"code", "200"}}, 3);
  out.family("ajet_up", Type::kGauge, "Up.");
  out.sample({}, 1);
  EXPECT_EQ(out.text(),
            "# HELP ajet_http_requests_total Requests.\\nBy route.\n"
            "# TYPE ajet_http_requests_total counter\n"
            "ajet_http_requests_total{route=\"/a\\\"b\\\\c\\nd\",code=\"200\"} 3\n"
            "# HELP ajet_up Up.\n"
            "# TYPE ajet_up gauge\n"
            "ajet_up 1\n");
}

TEST(PrometheusText, BuilderWritesAHistogramsBucketsSumAndCount) {
  Histogram h({0.5, 2});
  h.observe(0.25);
  h.observe(1);
  h.observe(9);
  TextBuilder out;
  out.family("ajet_x_seconds", Type::kHistogram, "X.");
  out.histogram({{"route", "/r"}}, h);
  EXPECT_EQ(out.text(),
            "# HELP ajet_x_seconds X.\n"
            "# TYPE ajet_x_seconds histogram\n"
            "ajet_x_seconds_bucket{route=\"/r\",le=\"0.5\"} 1\n"
            "ajet_x_seconds_bucket{route=\"/r\",le=\"2\"} 2\n"
            "ajet_x_seconds_bucket{route=\"/r\",le=\"+Inf\"} 3\n"
            "ajet_x_seconds_sum{route=\"/r\"} 10.25\n"
            "ajet_x_seconds_count{route=\"/r\"} 3\n");
}

TEST(PrometheusText, BuilderRefusesMisuse) {
  TextBuilder out;
  EXPECT_THROW(out.sample({}, 1), Error);  // before any family
  EXPECT_THROW(out.family("bad-name", Type::kGauge, "x"), Error);
  out.family("ajet_a", Type::kGauge, "A.");
  EXPECT_THROW(out.sample({{"bad-label", "v"}}, 1), Error);
  EXPECT_THROW(out.family("ajet_a", Type::kGauge, "again"), Error);
  EXPECT_THROW(out.histogram({}, Histogram({1})), Error);  // a gauge family
  out.family("ajet_h", Type::kHistogram, "H.");
  EXPECT_THROW(out.sample({}, 1), Error);
  EXPECT_THROW(out.histogram({{"le", "1"}}, Histogram({1})), Error);
}

}  // namespace
}  // namespace ajet::prometheus
