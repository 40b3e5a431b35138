// The key table of the config: one Field per YAML key, pointing at its member of a Config.
// Parsing, dumping, documentation checks and command-line overrides all walk this one table, so a
// key exists in exactly one place. Never put parsing logic here; see config/load.h.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "config/config.h"

namespace ajet::config {

// The cocktail's task list is one field: each item is parsed against cocktail_task_fields().
using FieldTarget =
    std::variant<bool*, int64_t*, double*, std::string*, std::vector<std::string>*,
                 std::vector<double>*, std::optional<int64_t>*, std::optional<double>*,
                 std::optional<std::string>*, Json*, std::vector<CocktailTaskConfig>*>;

struct Field {
  std::string key;  // full dotted key, e.g. "ajet.rollout.num_repeat"
  FieldTarget target;
  std::string doc;                   // one line for docs and error messages
  std::vector<std::string> choices;  // allowed values (string fields); empty: any
  std::optional<double> min;         // inclusive bounds (numeric fields)
  std::optional<double> max;
  // Accepted values that mean another one (upstream names): {given, canonical}. Using one warns.
  std::vector<std::pair<std::string, std::string>> aliases;
  std::optional<int64_t> auto_value;  // integer fields: the string `auto` means this value
  // A value outside `choices` is an error only when the run would use the key (checked after
  // parsing, load.cc); otherwise a warning, and the default stays. For settings of switched-off
  // features.
  bool choice_checked_when_used = false;
  bool json_list = false;  // Json fields: a list (of mappings) instead of a mapping
};

// The KL estimators the trainer has (ajet.trainer_common.kl_loss_type), the default first: verl's
// names, where k3 is low_var_kl, kl is k1 and k2 is mse (train_data/options.h). verl's `full`
// (every vocabulary logit) is not among them. Checked only when use_kl_loss is on (load.cc), so
// named once here for the schema and that check.
inline const std::vector<std::string> kKlLossTypes = {"low_var_kl", "k3",  "k1", "kl",
                                                      "k2",         "mse", "abs"};

// Every key of `config`, in document order. Targets point into `config`.
std::vector<Field> config_fields(Config& config);

// The keys of item `index` of ajet.task_reader.cocktail.tasks, named
// "ajet.task_reader.cocktail.tasks[index].…": name, weight and the reader keys of ajet.task_reader.
// Targets point into `task`.
std::vector<Field> cocktail_task_fields(CocktailTaskConfig& task, size_t index);

// Upstream AgentJet keys that have no meaning here (vLLM, Ray, FSDP, Hydra, …). A YAML that sets
// one gets a warning that names it and says it is ignored; a subtree entry covers everything below
// it.
const std::vector<std::pair<std::string, std::string>>& ignored_upstream_keys();

// "integer", "number", "boolean", "string", "list of strings", … (for messages and docs).
std::string_view field_type_name(const FieldTarget& target);

}  // namespace ajet::config
