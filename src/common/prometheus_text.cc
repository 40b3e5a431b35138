#include "common/prometheus_text.h"

#include <fmt/format.h>

#include <cmath>

#include "common/error.h"

namespace ajet::prometheus {

namespace {

bool name_start(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool name_rest(char c) { return name_start(c) || (c >= '0' && c <= '9'); }

}  // namespace

std::string_view type_name(Type type) {
  switch (type) {
    case Type::kCounter: return "counter";
    case Type::kGauge: return "gauge";
    case Type::kHistogram: return "histogram";
  }
  return "untyped";
}

bool valid_metric_name(std::string_view name) {
  if (name.empty() || !(name_start(name[0]) || name[0] == ':')) return false;
  for (char c : name) {
    if (!(name_rest(c) || c == ':')) return false;
  }
  return true;
}

bool valid_label_name(std::string_view name) {
  if (name.empty() || !name_start(name[0]) || name.rfind("__", 0) == 0) return false;
  for (char c : name) {
    if (!name_rest(c)) return false;
  }
  return true;
}

std::string escape_label_value(std::string_view value) {
  std::string out;
  out.reserve(value.size());
  for (char c : value) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '"') {
      out += "\\\"";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

std::string escape_help(std::string_view help) {
  std::string out;
  out.reserve(help.size());
  for (char c : help) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

std::string format_value(double value) {
  if (std::isnan(value)) return "NaN";
  if (std::isinf(value)) return value > 0 ? "+Inf" : "-Inf";
  // Counts are the common case: "42", never "42.0" or "4.2e+01" (exact up to 2^53).
  if (value == std::floor(value) && std::fabs(value) < 9007199254740992.0) {
    return fmt::format("{}", static_cast<int64_t>(value));
  }
  return fmt::format("{}", value);  // shortest text that reads back to the same double
}

Histogram::Histogram(std::vector<double> upper_bounds) : bounds_(std::move(upper_bounds)) {
  for (size_t i = 0; i < bounds_.size(); ++i) {
    if (!std::isfinite(bounds_[i]))
      invalid_argument(fmt::format("histogram bound {} is not finite", i));
    if (i > 0 && !(bounds_[i] > bounds_[i - 1])) {
      invalid_argument(fmt::format("histogram bounds must increase: bound {} ({}) follows {}", i,
                                   bounds_[i], bounds_[i - 1]));
    }
  }
  counts_.assign(bounds_.size() + 1, 0);
}

void Histogram::observe(double value) {
  size_t i = 0;
  while (i < bounds_.size() && value > bounds_[i])
    ++i;  // le: a value on a bound counts in that bucket
  counts_[i] += 1;
  count_ += 1;
  sum_ += value;
}

std::vector<uint64_t> Histogram::cumulative_counts() const {
  std::vector<uint64_t> out(bounds_.size());
  uint64_t running = 0;
  for (size_t i = 0; i < bounds_.size(); ++i) {
    running += counts_[i];
    out[i] = running;
  }
  return out;
}

std::vector<double> latency_buckets_seconds() {
  return {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 30, 60};
}

void TextBuilder::family(std::string_view name, Type type, std::string_view help) {
  if (!valid_metric_name(name))
    invalid_argument("metric name '" + std::string(name) + "' is not valid");
  if (!written_.insert(std::string(name)).second) {
    invalid_argument("metric family '" + std::string(name) + "' is written twice");
  }
  current_ = std::string(name);
  type_ = type;
  out_ +=
      fmt::format("# HELP {} {}\n# TYPE {} {}\n", name, escape_help(help), name, type_name(type));
}

void TextBuilder::line(std::string_view suffix, const Labels& labels, std::string_view extra_name,
                       std::string_view extra_value, double value) {
  for (const auto& [name, v] : labels) {
    if (!valid_label_name(name))
      invalid_argument("label name '" + name + "' of " + current_ + " is not valid");
  }
  out_ += current_;
  out_ += suffix;
  if (!labels.empty() || !extra_name.empty()) {
    out_ += '{';
    bool first = true;
    auto add = [&](std::string_view name, std::string_view v) {
      if (!first) out_ += ',';
      first = false;
      out_ += name;
      out_ += "=\"";
      out_ += escape_label_value(v);
      out_ += '"';
    };
    for (const auto& [name, v] : labels) add(name, v);
    if (!extra_name.empty()) add(extra_name, extra_value);
    out_ += '}';
  }
  out_ += ' ';
  out_ += format_value(value);
  out_ += '\n';
}

void TextBuilder::sample(const Labels& labels, double value) {
  if (current_.empty()) invalid_argument("a sample was written before its metric family");
  if (type_ == Type::kHistogram)
    invalid_argument("histogram " + current_ + " takes histogram(), not sample()");
  line("", labels, "", "", value);
}

void TextBuilder::histogram(const Labels& labels, const Histogram& histogram) {
  if (current_.empty() || type_ != Type::kHistogram) {
    invalid_argument("histogram samples need a histogram family (current: '" + current_ + "')");
  }
  for (const auto& [name, v] : labels) {
    if (name == "le") invalid_argument("histogram " + current_ + " cannot take a label named 'le'");
  }
  const std::vector<uint64_t> cumulative = histogram.cumulative_counts();
  for (size_t i = 0; i < cumulative.size(); ++i) {
    line("_bucket", labels, "le", format_value(histogram.upper_bounds()[i]), double(cumulative[i]));
  }
  line("_bucket", labels, "le", "+Inf", double(histogram.count()));
  line("_sum", labels, "", "", histogram.sum());
  line("_count", labels, "", "", double(histogram.count()));
}

}  // namespace ajet::prometheus
