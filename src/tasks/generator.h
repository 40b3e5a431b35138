// Shared machinery of the built-in generators: typed reading of generator params (unknown keys and
// out-of-range values are errors naming the key) and the split-aware, deduplicating draw loop that
// gives every built-in task disjoint train/validation splits (see builtin.h).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "tasks/builtin.h"

namespace ajet::tasks {

class Params {
 public:
  // `known` lists every accepted key; any other key in `params` throws Error(kInvalidArgument).
  Params(const OrderedJson& params, std::string task_name, std::vector<std::string> known);

  int64_t get_int(std::string_view key, int64_t fallback, int64_t min, int64_t max) const;
  double get_number(std::string_view key, double fallback, double min, double max) const;
  bool get_bool(std::string_view key, bool fallback) const;
  std::string get_string(std::string_view key, std::string fallback) const;

 private:
  const OrderedJson* find(std::string_view key) const;
  [[noreturn]] void bad(std::string_view key, const std::string& what) const;

  OrderedJson params_;
  std::string task_name_;
};

inline constexpr double kDefaultHoldoutFraction = 0.1;

// True when the problem with this canonical key belongs to the validation split.
bool in_validation_split(std::string_view key, double holdout_fraction);

struct SampledProblem {
  std::string key;  // canonical problem text: identity, split and task_id come from it
  Task task;        // main_query, init_messages, metadata; task_id/env_type are filled in
};

// Draws from `sample` (seeded from options.seed and the task name) until `options.count` distinct
// problems of options.split are found. task_id = "<name>-<12 hex digits of the key's hash>";
// metadata.split is set. Throws when the problem space runs out (naming how many were found).
std::vector<Task> generate_split(std::string_view task_name, const GenerateOptions& options,
                                 double holdout_fraction,
                                 const std::function<SampledProblem(Rng&)>& sample);

// The text between the one `open`...`close` pair in `text`: nullopt when there is none; sets
// `count` to how many pairs there are (judges reject more than one).
std::optional<std::string> extract_tagged(std::string_view text, std::string_view open,
                                          std::string_view close, size_t& count);

std::string trim(std::string_view text);

}  // namespace ajet::tasks
