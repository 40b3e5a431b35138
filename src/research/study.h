// A research study (`ajet research run STUDY.yaml`): the question, the base classic config, the
// search space mapped onto config keys, the objective, the early-stopping rules, the budgets and
// where the trials run. Parsing only: every error names the study file, the key and what was
// expected; nothing here starts a process or touches the journal.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "common/json.h"

namespace ajet::research {

// One searched parameter. `key` is a dotted classic config key (`ajet.trainer_common.optim.lr`).
struct Param {
  enum class Kind { kChoice, kUniform, kLogUniform, kInt };
  std::string name;  // the study's short name (`lr`), used in tables and plots
  std::string key;
  Kind kind = Kind::kChoice;
  std::vector<Json> choices;  // kChoice: scalars (numbers, strings, booleans)
  double low = 0, high = 0;   // kUniform, kLogUniform, kInt (inclusive)
};

// A trial's parameters: name -> value (a JSON scalar).
using Params = std::map<std::string, Json>;

struct Objective {
  std::string metric =
      "val/sampled_success";  // a val/ name (docs/operations.md) of the validation record
  int64_t step = 0;           // the RL step at which it counts (the trials' last step)
  bool maximize = true;
};

struct EarlyStopping {
  std::vector<int64_t> rungs;      // RL steps (< objective.step) where successive halving decides
  int64_t eta = 2;                 // at a rung, a trial continues when among the top 1/eta so far
  int64_t plateau_patience = 0;    // stop after this many validations without improvement (0: off)
  double plateau_min_delta = 0.0;  // what counts as an improvement
};

struct Budget {
  int64_t trials = 8;                // search trials (confirmation runs and retries not counted)
  double wall_seconds = 3600;        // the controller's own running time, summed over resumes
  double trial_seconds = 900;        // one trial's running time, summed over its launches
  int64_t max_attempts = 2;          // launches of a crashing trial before it is recorded as failed
  double unreachable_seconds = 600;  // how long an unreachable trial server is waited out
};

struct Runner {
  // local: classic runs (`ajet --conf`) as child processes, each with its own front; remote: the
  // same runs driving running swarm servers (`ajet --conf ... --swarm-url URL`), one trial per
  // server.
  std::string type = "local";
  std::vector<std::string> servers;     // remote: the swarm servers' URLs (http://HOST:PORT)
  std::vector<std::string> ajet_flags;  // extra flags for every trial, e.g. ["--backbone", "debug"]
};

struct Study {
  std::filesystem::path file;  // the study file as given
  std::string question;
  std::filesystem::path base;     // the base classic config (absolute)
  std::filesystem::path workdir;  // where trials run: relative paths in the base resolve from here
  std::vector<Param> space;
  std::map<std::string, Json> fixed;  // config key -> value for every trial (base runs included)
  Objective objective;
  EarlyStopping stopping;
  Budget budget;
  int64_t parallel = 1;
  int64_t round_size = 4;   // candidates per round (the first round includes the base)
  int64_t search_seed = 1;  // the seed of every search trial
  std::vector<int64_t> confirm_seeds = {2,
                                        3};  // fresh seeds for the best and the base (empty: skip)
  std::vector<std::string> seed_keys = {"ajet.engine.seed", "ajet.task_reader.shuffle_seed"};
  int64_t proposer_seed = 1;
  Runner runner;
};

// Reads and checks a study file. `workdir_default`: where trials run when the file has no
// `workdir`. Throws Error(kInvalidArgument) naming the file and key (unknown keys with "did you
// mean"), and checks every searched key and value against the base config (config::set_config_value
// + validate).
Study load_study(const std::filesystem::path& file, const std::filesystem::path& workdir_default);
// A study file's text for parse_study: one over 1 MiB is refused before it is read.
std::string read_study_file(const std::filesystem::path& file);
Study parse_study(const std::string& yaml_text, const std::filesystem::path& file,
                  const std::filesystem::path& workdir_default);

// The config overrides of one trial: fixed keys, the parameters, the seed keys. Values as YAML text
// (what `ajet --set KEY=VALUE` takes).
std::vector<std::pair<std::string, std::string>> trial_overrides(const Study& study,
                                                                 const Params& params,
                                                                 int64_t seed);

// Throws Error(kInvalidArgument) naming the parameter when `params` is not a point of the space (a
// name missing or unknown, a value outside its range or list, an int that is not whole).
void check_params(const Study& study, const Params& params);

// The validation steps every trial must report: 0, the rungs, the objective step (what test_freq is
// chosen for: their greatest common divisor).
int64_t validation_interval(const Study& study);

// A value as YAML scalar text ("0.0001", "true", "\"echo 1\"").
std::string yaml_scalar(const Json& value);
// A value for tables: numbers in short form (1e-4, 0.5), strings as they are.
std::string value_text(const Json& value);

}  // namespace ajet::research
