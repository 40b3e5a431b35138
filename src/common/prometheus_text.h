// The Prometheus text exposition format, version 0.0.4: metric families written as `# HELP`,
// `# TYPE` and sample lines with escaped label values, and the fixed-bucket histogram they report.
// Formatting only: it never reads a clock or a socket, and it never locks (the owner of a Histogram
// guards it). A misuse (an invalid name, a sample outside its family, a family written twice) is a
// bug in the caller and throws Error(kInvalidArgument) naming it.
//
//   prometheus::TextBuilder out;
//   out.family("ajet_http_requests_total", prometheus::Type::kCounter, "HTTP requests answered.");
//   out.sample({{"route", "/health"}, {"code", "200"}}, 3);
//   std::string body = out.take();   // Content-Type: prometheus::kContentType
#pragma once

#include <cstdint>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace ajet::prometheus {

inline constexpr std::string_view kContentType = "text/plain; version=0.0.4; charset=utf-8";

enum class Type { kCounter, kGauge, kHistogram };
std::string_view type_name(Type type);  // "counter" | "gauge" | "histogram"

using Labels = std::vector<std::pair<std::string, std::string>>;

// [a-zA-Z_:][a-zA-Z0-9_:]*
bool valid_metric_name(std::string_view name);
// [a-zA-Z_][a-zA-Z0-9_]*, and not starting with "__" (reserved for Prometheus itself)
bool valid_label_name(std::string_view name);
// A label value inside its double quotes: `\` → `\\`, `"` → `\"`, newline → `\n`.
std::string escape_label_value(std::string_view value);
// A HELP text: `\` → `\\`, newline → `\n` (quotes stay as they are).
std::string escape_help(std::string_view help);
// A sample value: integers without exponent or fraction ("42"), others in the shortest form that
// reads back to the same double ("0.25", "1e-05"), and "+Inf", "-Inf", "NaN".
std::string format_value(double value);

// Counts observations into buckets with fixed upper bounds (seconds, bytes …). Not thread-safe:
// its owner locks. The `+Inf` bucket is implicit (it equals count()).
class Histogram {
 public:
  // Bounds must be finite and strictly increasing (Error(kInvalidArgument) otherwise).
  explicit Histogram(std::vector<double> upper_bounds);

  void observe(double value);

  const std::vector<double>& upper_bounds() const { return bounds_; }
  // Observations <= upper_bounds()[i], cumulative, as exposed in `_bucket{le=...}`.
  std::vector<uint64_t> cumulative_counts() const;
  uint64_t count() const { return count_; }
  double sum() const { return sum_; }

 private:
  std::vector<double> bounds_;
  std::vector<uint64_t>
      counts_;  // per bucket, not cumulative; one more than bounds_ (the +Inf bucket)
  uint64_t count_ = 0;
  double sum_ = 0;
};

// Request latencies from 1 ms to 60 s (seconds): the buckets of ajet's `_duration_seconds`
// histograms.
std::vector<double> latency_buckets_seconds();

class TextBuilder {
 public:
  // Starts a family: its `# HELP` and `# TYPE` lines. Every sample written after it belongs to it.
  void family(std::string_view name, Type type, std::string_view help);
  // A sample of the current counter or gauge family.
  void sample(const Labels& labels, double value);
  // The `_bucket` (one per bound, then le="+Inf"), `_sum` and `_count` samples of one label set of
  // the current histogram family.
  void histogram(const Labels& labels, const Histogram& histogram);

  const std::string& text() const { return out_; }
  std::string take() { return std::move(out_); }

 private:
  void line(std::string_view suffix, const Labels& labels, std::string_view extra_name,
            std::string_view extra_value, double value);

  std::string out_;
  std::string current_;  // the current family's name ("" before the first)
  Type type_ = Type::kGauge;
  std::set<std::string> written_;
};

}  // namespace ajet::prometheus
