#include "tasks/generator.h"

#include <cmath>
#include <cstdio>
#include <unordered_set>

#include "common/error.h"

namespace ajet::tasks {

Params::Params(const OrderedJson& params, std::string task_name, std::vector<std::string> known)
    : params_(params.is_null() ? OrderedJson::object() : params), task_name_(std::move(task_name)) {
  if (!params_.is_object())
    invalid_argument(task_name_ + " params must be a mapping, got " +
                     std::string(params_.type_name()));
  for (const auto& [key, value] : params_.items()) {
    bool ok = false;
    for (const std::string& k : known) ok = ok || k == key;
    if (!ok) {
      std::string list;
      for (const std::string& k : known) list += (list.empty() ? "" : ", ") + k;
      invalid_argument("unknown " + task_name_ + " param '" + key + "' (known: " + list + ")");
    }
  }
}

const OrderedJson* Params::find(std::string_view key) const {
  auto it = params_.find(key);
  if (it == params_.end() || it->is_null()) return nullptr;
  return &*it;
}

void Params::bad(std::string_view key, const std::string& what) const {
  invalid_argument(task_name_ + " param '" + std::string(key) + "' " + what);
}

int64_t Params::get_int(std::string_view key, int64_t fallback, int64_t min, int64_t max) const {
  const OrderedJson* v = find(key);
  int64_t out = fallback;
  if (v != nullptr) {
    if (v->is_number_integer()) {
      out = v->get<int64_t>();
    } else if (v->is_number_float() && std::floor(v->get<double>()) == v->get<double>() &&
               std::fabs(v->get<double>()) < 1e15) {
      out = static_cast<int64_t>(v->get<double>());
    } else {
      bad(key, "must be an integer, got " + v->dump());
    }
  }
  if (out < min || out > max) {
    bad(key, "must be in [" + std::to_string(min) + ", " + std::to_string(max) + "], got " +
                 std::to_string(out));
  }
  return out;
}

double Params::get_number(std::string_view key, double fallback, double min, double max) const {
  const OrderedJson* v = find(key);
  double out = fallback;
  if (v != nullptr) {
    if (!v->is_number()) bad(key, "must be a number, got " + v->dump());
    out = v->get<double>();
  }
  if (!(out >= min && out <= max)) {
    bad(key, "must be in [" + std::to_string(min) + ", " + std::to_string(max) + "], got " +
                 std::to_string(out));
  }
  return out;
}

bool Params::get_bool(std::string_view key, bool fallback) const {
  const OrderedJson* v = find(key);
  if (v == nullptr) return fallback;
  if (!v->is_boolean()) bad(key, "must be true or false, got " + v->dump());
  return v->get<bool>();
}

std::string Params::get_string(std::string_view key, std::string fallback) const {
  const OrderedJson* v = find(key);
  if (v == nullptr) return fallback;
  if (!v->is_string()) bad(key, "must be a string, got " + v->dump());
  return v->get<std::string>();
}

bool in_validation_split(std::string_view key, double holdout_fraction) {
  // 2^53 buckets: the share is exact to double precision and independent of seeds and counts.
  const uint64_t bucket = stable_hash(std::string("split:") + std::string(key)) >> 11;
  return static_cast<double>(bucket) * 0x1.0p-53 < holdout_fraction;
}

std::vector<Task> generate_split(std::string_view task_name, const GenerateOptions& options,
                                 double holdout_fraction,
                                 const std::function<SampledProblem(Rng&)>& sample) {
  if (options.count < 0) invalid_argument(std::string(task_name) + ": task count must be >= 0");
  const bool want_validation = options.split == Split::kValidation;
  if (want_validation && holdout_fraction <= 0 && options.count > 0) {
    invalid_argument(std::string(task_name) +
                     ": holdout_fraction is 0, so there are no validation problems");
  }
  if (!want_validation && holdout_fraction >= 1 && options.count > 0) {
    invalid_argument(std::string(task_name) +
                     ": holdout_fraction is 1, so there are no training problems");
  }
  Rng rng(mix_seed(options.seed, stable_hash(task_name)));
  std::vector<Task> out;
  std::unordered_set<std::string> seen;
  // Enough draws for the rarer split, plus slack for duplicates; a small problem space runs out.
  const double share = want_validation ? holdout_fraction : 1 - holdout_fraction;
  const int64_t max_draws =
      static_cast<int64_t>(static_cast<double>(options.count) / share * 20) + 2000;
  for (int64_t draw = 0; draw < max_draws && static_cast<int64_t>(out.size()) < options.count;
       ++draw) {
    SampledProblem p = sample(rng);
    if (in_validation_split(p.key, holdout_fraction) != want_validation) continue;
    if (!seen.insert(p.key).second) continue;
    char hex[17];
    std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(stable_hash(p.key)));
    p.task.task_id = std::string(task_name) + "-" + std::string(hex, 12);
    p.task.env_type = std::string(task_name);
    p.task.metadata["split"] = std::string(split_name(options.split));
    out.push_back(std::move(p.task));
  }
  if (static_cast<int64_t>(out.size()) < options.count) {
    invalid_argument(
        std::string(task_name) + ": found only " + std::to_string(out.size()) + " distinct " +
        std::string(split_name(options.split)) + " problems of " + std::to_string(options.count) +
        " requested; widen the generator params (more operands, a larger range or map)");
  }
  return out;
}

std::optional<std::string> extract_tagged(std::string_view text, std::string_view open,
                                          std::string_view close, size_t& count) {
  count = 0;
  std::optional<std::string> first;
  size_t pos = 0;
  while (true) {
    size_t b = text.find(open, pos);
    if (b == std::string_view::npos) break;
    size_t e = text.find(close, b + open.size());
    if (e == std::string_view::npos) break;
    ++count;
    if (!first) first = std::string(text.substr(b + open.size(), e - b - open.size()));
    pos = e + close.size();
  }
  return first;
}

std::string trim(std::string_view text) {
  size_t b = 0;
  size_t e = text.size();
  auto space = [](char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; };
  while (b < e && space(text[b])) ++b;
  while (e > b && space(text[e - 1])) --e;
  return std::string(text.substr(b, e - b));
}

}  // namespace ajet::tasks
