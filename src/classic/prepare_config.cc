// prepare_config: the config of a classic run, from the file, --backbone and --set (launcher.h).
#include <algorithm>
#include <chrono>
#include <optional>

#include "classic/launcher.h"
#include "common/error.h"
#include "config/backbone.h"
#include "config/load.h"

namespace ajet::classic {

namespace fs = std::filesystem;

namespace {

fs::path resolve_path(const fs::path& p, const fs::path& config_dir) {
  if (p.empty() || p.is_absolute()) return p;
  if (fs::exists(p)) return fs::absolute(p).lexically_normal();
  fs::path beside = config_dir / p;
  if (fs::exists(beside)) return fs::absolute(beside).lexically_normal();
  return fs::absolute(p).lexically_normal();
}

// --resume with `experiment_name: read_yaml_name` ({stem}_{YYYYMMDD_HHMM}, a new name every
// minute): the newest such experiment under `base` that holds a run, by its name's time stamp.
std::optional<std::string> newest_timestamped_run(const fs::path& base, const std::string& stem) {
  std::optional<std::string> newest;
  const std::string prefix = (stem.empty() ? std::string("experiment") : stem) + "_";
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(base, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.size() != prefix.size() + 13 || name.compare(0, prefix.size(), prefix) != 0) continue;
    if (name.find_first_not_of("0123456789_", prefix.size()) != std::string::npos) continue;
    if (!fs::exists(entry.path() / "swarm" / "swarm.sqlite")) continue;
    if (!newest || name > *newest) newest = name;
  }
  return newest;
}

// --backbone and --set, in order, over the file's values.
void apply_command_line(const LaunchOptions& options, config::Config& c) {
  if (!options.backbone.empty()) {
    try {
      config::parse_backbone(options.backbone);
    } catch (const Error&) {
      invalid_argument("--backbone: unknown backbone '" + options.backbone +
                       "' (expected torch, async or debug)");
    }
    config::set_config_value(c, "backbone", options.backbone);
  }
  for (const auto& o : options.overrides) {
    const size_t eq = o.find('=');
    if (eq == std::string::npos || eq == 0)
      invalid_argument("--set '" + o + "': expected KEY=VALUE, e.g. ajet.engine.seed=2");
    std::string key = o.substr(0, eq);
    if (key.rfind("ajet.", 0) != 0) key = "ajet." + key;
    try {
      config::set_config_value(c, key, o.substr(eq + 1));
    } catch (const Error& e) {
      throw Error(e.code(), "--set " + o + ": " + e.what());
    }
  }
}

// Classic mode needs tasks: a cocktail, or a task reader that yields some.
void check_task_source(const config::Config& c, const std::string& source,
                       std::vector<std::string>& warnings) {
  if (!c.task_reader.cocktail.tasks.empty()) {
    if (c.task_reader.type != "random_dummy") {
      warnings.push_back("ajet.task_reader.type " + c.task_reader.type +
                         " is not used: ajet.task_reader.cocktail lists the task sources");
    }
  } else if (c.task_reader.type == "random_dummy") {
    invalid_argument(
        source +
        ": ajet.task_reader.type is random_dummy (no tasks); classic mode needs tasks: use "
        "builtin or jsonl_dataset_file (or ajet.task_reader.cocktail)");
  }
}

// rollout_until_finish_enough_non_dummy_tasks: the launcher knows every group's rewards, so it
// decides when the batch is full and says so. On every backbone: with async the launcher closes
// each step's batch too, so steps and batches stay one to one while the next step rolls out beside
// the training of this one. The front's trigger becomes agree-based.
bool take_over_dynamic_sampling(config::Config& c) {
  if (c.swarm_mode_sample_collection_method != "rollout_until_finish_enough_non_dummy_tasks")
    return false;
  c.swarm_mode_sample_collection_method = "rollout_until_any_client_agree_sync_weight";
  // The launcher is the only client and waits on global_step, not on the boundary's status: a dwell
  // would idle every step (2 s a step, a fifth of the main command's RL time).
  c.swarm_mode_agree_boundary_dwell = 0;
  return true;
}

}  // namespace

PreparedConfig prepare_config(const LaunchOptions& options) {
  if (options.conf.empty())
    invalid_argument("--conf: a config file is required (see examples/configs/default.yaml)");
  if (!fs::exists(options.conf))
    fail(ErrorCode::kNotFound, "--conf: no such file: " + options.conf.string());
  const std::string source = options.conf.string();
  config::LoadedConfig loaded = config::load_config_file(options.conf);
  PreparedConfig p;
  p.warnings = loaded.warnings;
  p.config = loaded.config;
  p.config_dir = fs::absolute(options.conf).parent_path();
  config::Config& c = p.config;
  apply_command_line(options, c);
  if (c.model.path.empty())
    invalid_argument(source + ": ajet.model.path is required (a Hugging Face model directory)");
  c.model.path = resolve_path(c.model.path, p.config_dir).string();
  const bool remote = !options.swarm_url.empty();
  if (!remote && !fs::is_directory(c.model.path)) {
    fail(ErrorCode::kNotFound,
         source + ": ajet.model.path: no such directory: " + c.model.path +
             " (create one with `ajet model init --preset tiny --tokenizer DIR --out DIR`)");
  }
  check_task_source(c, source, p.warnings);
  if (options.resume && c.experiment_name == "read_yaml_name" && c.experiment_dir == "auto") {
    c.experiment_name = newest_timestamped_run(options.exp_base_dir, options.conf.stem().string())
                            .value_or(c.experiment_name);
  }
  config::resolve_auto_names(c, options.conf.string(), std::chrono::system_clock::now(),
                             options.exp_base_dir);
  c.experiment_dir = fs::absolute(c.experiment_dir).lexically_normal().string();
  const std::string configured_checkpoint_dir = c.trainer_common.checkpoint_base_dir;
  // Checkpoints belong to the experiment (a relative checkpoint_base_dir is under its directory),
  // so experiments never share a checkpoint directory nor rotate each other's checkpoints away.
  if (!fs::path(c.trainer_common.checkpoint_base_dir).is_absolute()) {
    c.trainer_common.checkpoint_base_dir =
        (fs::path(c.experiment_dir) / c.trainer_common.checkpoint_base_dir)
            .lexically_normal()
            .string();
  }
  config::validate(c, source);
  // The truncated-sampling warning depends on values --backbone and --set may have changed: the one
  // loading gave (about the file's values) is replaced by the one the final config calls for, if
  // any.
  if (auto loaded_w = config::truncated_rollout_warning(loaded.config, source)) {
    p.warnings.erase(std::remove(p.warnings.begin(), p.warnings.end(), *loaded_w),
                     p.warnings.end());
  }
  if (auto w = config::truncated_rollout_warning(c, source)) p.warnings.push_back(std::move(*w));
  p.exp_dir = c.experiment_dir;
  p.dynamic_sampling = take_over_dynamic_sampling(c);
  if (remote) {
    // The front's engine writes where the front keeps its experiments, not into this machine's
    // experiment directory (another machine may not have it; the same machine must not mix them).
    config::Config sent = c;
    sent.experiment_dir = "auto";
    sent.trainer_common.checkpoint_base_dir = configured_checkpoint_dir;
    p.yaml = config::to_yaml(sent);
  } else {
    p.yaml = config::to_yaml(c);
  }
  return p;
}

}  // namespace ajet::classic
