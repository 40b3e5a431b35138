#include "research/study.h"

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include <cmath>
#include <numeric>
#include <set>

#include "common/error.h"
#include "common/fs.h"
#include "common/strings.h"
#include "config/load.h"
#include "config/yaml_reader.h"

namespace ajet::research {
namespace fs = std::filesystem;
namespace {

// A study file is a few kilobytes; anything far larger is a mistake. It has no free-form part, so
// the loader expands its aliases up front and refuses one that grows past 16 MiB (an alias bomb)
// before any of it is read.
constexpr size_t kMaxStudyBytes = 1 << 20;
constexpr config::YamlLimits kStudyLimits{kMaxStudyBytes, "a study file",
                                          config::kMaxExpandedBytes};
constexpr size_t kMaxParams = 32;
constexpr size_t kMaxChoices = 64;
constexpr int64_t kMaxTrials = 10000;
constexpr int64_t kMaxParallel = 64;

// Keys the controller sets itself for every trial.
const std::set<std::string> kControllerKeys = {"ajet.experiment_name",
                                               "ajet.experiment_dir",
                                               "ajet.trainer_common.total_training_steps",
                                               "ajet.trainer_common.test_freq",
                                               "ajet.trainer_common.save_freq",
                                               "ajet.trainer_common.val_before_train",
                                               "ajet.trainer_common.max_training_seconds"};

using config::YamlReader;

// The study file's nodes that check_against_base names in its errors, by dotted key
// ("search.lr", "fixed.ajet.x", "seeds.keys"), so those errors carry their line too.
using Places = std::map<std::string, YAML::Node>;

// The node of `key`, or one without a position (a default such as seeds.keys is in no line).
YAML::Node place(const Places& places, const std::string& key) {
  const auto it = places.find(key);
  return it == places.end() ? YAML::Node() : it->second;
}

// A config key as written, or with the "ajet." it may leave out.
std::string config_key(std::string key) { return key.rfind("ajet.", 0) == 0 ? key : "ajet." + key; }

void parse_choices(const YamlReader& r, const YAML::Node& c, const std::string& where, Param& p) {
  p.kind = Param::Kind::kChoice;
  if (!c.IsSequence() || c.size() == 0 || c.size() > kMaxChoices) {
    r.fail(c, where + ".choice", fmt::format("expected a list of 1 to {} values", kMaxChoices));
  }
  for (size_t i = 0; i < c.size(); ++i) {
    const std::string key = fmt::format("{}.choice[{}]", where, i);
    Json v = r.scalar(c[i], key);
    if (std::find(p.choices.begin(), p.choices.end(), v) != p.choices.end())
      r.fail(c[i], key, "repeats " + value_text(v));
    p.choices.push_back(std::move(v));
  }
}

void parse_range(const YamlReader& r, const YAML::Node& node, const std::string& where, Param& p) {
  const char* kind_key = node["uniform"] ? "uniform" : node["log_uniform"] ? "log_uniform" : "int";
  p.kind = node["uniform"]       ? Param::Kind::kUniform
           : node["log_uniform"] ? Param::Kind::kLogUniform
                                 : Param::Kind::kInt;
  const YAML::Node range = node[kind_key];
  const std::string rkey = where + "." + kind_key;
  if (!range.IsSequence() || range.size() != 2) r.fail(range, rkey, "expected [low, high]");
  if (p.kind == Param::Kind::kInt) {
    constexpr int64_t kLimit = int64_t(1) << 40;
    p.low = double(r.integer(range[0], rkey + "[0]", -kLimit, kLimit));
    p.high = double(r.integer(range[1], rkey + "[1]", -kLimit, kLimit));
  } else {
    p.low = r.number(range[0], rkey + "[0]");
    p.high = r.number(range[1], rkey + "[1]");
  }
  if (!(p.low < p.high))
    r.fail(range, rkey, fmt::format("low ({}) must be below high ({})", p.low, p.high));
  if (p.kind == Param::Kind::kLogUniform && p.low <= 0)
    r.fail(range, rkey, "a log-uniform range must be above 0");
}

Param parse_param(const YamlReader& r, const std::string& name, const YAML::Node& node) {
  const std::string where = "search." + name;
  r.only_keys(node, where, {"key", "choice", "uniform", "log_uniform", "int"});
  Param p;
  p.name = name;
  if (!node["key"])
    r.fail(node, where, "needs `key`, the config key it sets (e.g. ajet.trainer_common.optim.lr)");
  p.key = config_key(r.text(node["key"], where + ".key"));
  int kinds = 0;
  for (const char* k : {"choice", "uniform", "log_uniform", "int"}) kinds += node[k] ? 1 : 0;
  if (kinds != 1) {
    r.fail(node, where,
           "needs exactly one of choice: [..], uniform: [low, high], log_uniform: [low, high], "
           "int: [low, high]");
  }
  if (const YAML::Node c = node["choice"]) {
    parse_choices(r, c, where, p);
  } else {
    parse_range(r, node, where, p);
  }
  return p;
}

// Every searched and fixed value must make a valid config with the base: checked here, at the
// start, not when a trial fails hours later.
void check_against_base(const Study& s, const YamlReader& r, const Places& places) {
  config::LoadedConfig base = config::load_config_file(s.base);
  for (const auto& [key, value] : s.fixed) {
    try {
      config::set_config_value(base.config, key, yaml_scalar(value));
    } catch (const Error& e) {
      r.fail(place(places, "fixed." + key), "fixed." + key, e.what());
    }
  }
  auto try_value = [&](const Param& p, const Json& v) {
    config::Config c = base.config;
    try {
      config::set_config_value(c, p.key, yaml_scalar(v));
      config::validate(c, "the base config with search." + p.name + " = " + value_text(v));
    } catch (const Error& e) {
      r.fail(place(places, "search." + p.name), "search." + p.name + " (" + p.key + ")", e.what());
    }
  };
  for (const Param& p : s.space) {
    if (kControllerKeys.count(p.key) || std::count(s.seed_keys.begin(), s.seed_keys.end(), p.key)) {
      r.fail(place(places, "search." + p.name), "search." + p.name,
             p.key + " is set by the controller for every trial");
    }
    if (p.kind == Param::Kind::kChoice) {
      for (const Json& v : p.choices) try_value(p, v);
    } else if (p.kind == Param::Kind::kInt) {
      try_value(p, int64_t(p.low));
      try_value(p, int64_t(p.high));
    } else {
      try_value(p, p.low);
      try_value(p, p.high);
    }
  }
  for (const std::string& key : s.seed_keys) {
    config::Config c = base.config;
    try {
      config::set_config_value(c, key, "1");
    } catch (const Error& e) {
      r.fail(place(places, "seeds.keys"), "seeds.keys", e.what());
    }
  }
}

// question, base and workdir (relative to the study file's directory).
void parse_paths(const YamlReader& r, const YAML::Node& root, const fs::path& file,
                 const fs::path& workdir_default, Study& s) {
  const fs::path dir = fs::absolute(file).parent_path();
  if (root["question"]) s.question = r.text(root["question"], "question");
  if (!root["base"]) r.fail(root, "base", "missing: the classic config every trial starts from");
  s.base = (dir / r.text(root["base"], "base")).lexically_normal();
  if (!fs::exists(s.base)) r.fail(root["base"], "base", "no such file: " + s.base.string());
  s.workdir = root["workdir"] ? (dir / r.text(root["workdir"], "workdir")).lexically_normal()
                              : fs::absolute(workdir_default).lexically_normal();
  if (!fs::is_directory(s.workdir)) {
    r.fail(root["workdir"] ? root["workdir"] : root, "workdir",
           "no such directory: " + s.workdir.string());
  }
}

void parse_objective(const YamlReader& r, const YAML::Node& root, Study& s) {
  if (!root["objective"])
    r.fail(root, "objective", "missing: {metric: val/sampled_success, step: N, mode: max}");
  const YAML::Node o = root["objective"];
  r.only_keys(o, "objective", {"metric", "step", "mode"});
  if (o["metric"]) s.objective.metric = r.text(o["metric"], "objective.metric");
  if (s.objective.metric.rfind("val/", 0) != 0) {
    r.fail(o["metric"] ? o["metric"] : o, "objective.metric",
           "must be a validation metric (val/...), e.g. val/sampled_success; got '" +
               s.objective.metric + "'");
  }
  if (!o["step"]) r.fail(o, "objective.step", "missing: the RL step at which the metric counts");
  s.objective.step = r.integer(o["step"], "objective.step", 1, 1000000);
  if (o["mode"]) {
    const std::string mode = r.text(o["mode"], "objective.mode");
    if (mode != "max" && mode != "min")
      r.fail(o["mode"], "objective.mode", "expected max or min, got '" + mode + "'");
    s.objective.maximize = mode == "max";
  }
}

void parse_stopping(const YamlReader& r, const YAML::Node& e, Study& s) {
  r.only_keys(e, "early_stopping", {"rungs", "eta", "plateau_patience", "plateau_min_delta"});
  if (e["rungs"])
    s.stopping.rungs = r.int_list(e["rungs"], "early_stopping.rungs", 1, s.objective.step - 1);
  for (size_t i = 1; i < s.stopping.rungs.size(); ++i) {
    if (s.stopping.rungs[i] <= s.stopping.rungs[i - 1])
      r.fail(e["rungs"], "early_stopping.rungs", "must increase");
  }
  if (e["eta"]) s.stopping.eta = r.integer(e["eta"], "early_stopping.eta", 2, 100);
  if (e["plateau_patience"]) {
    s.stopping.plateau_patience =
        r.integer(e["plateau_patience"], "early_stopping.plateau_patience", 0, 1000);
  }
  if (e["plateau_min_delta"]) {
    s.stopping.plateau_min_delta =
        r.number(e["plateau_min_delta"], "early_stopping.plateau_min_delta");
    if (s.stopping.plateau_min_delta < 0)
      r.fail(e["plateau_min_delta"], "early_stopping.plateau_min_delta", "must be >= 0");
  }
}

void parse_budget(const YamlReader& r, const YAML::Node& b, Study& s) {
  r.only_keys(b, "budget",
              {"trials", "wall_seconds", "trial_seconds", "max_attempts", "unreachable_seconds"});
  if (b["trials"]) s.budget.trials = r.integer(b["trials"], "budget.trials", 1, kMaxTrials);
  auto seconds = [&](const char* k, double& out) {
    if (!b[k]) return;
    out = r.number(b[k], std::string("budget.") + k);
    if (out <= 0) r.fail(b[k], std::string("budget.") + k, "must be above 0 seconds");
  };
  seconds("wall_seconds", s.budget.wall_seconds);
  seconds("trial_seconds", s.budget.trial_seconds);
  seconds("unreachable_seconds", s.budget.unreachable_seconds);
  if (b["max_attempts"])
    s.budget.max_attempts = r.integer(b["max_attempts"], "budget.max_attempts", 1, 20);
}

void parse_seeds(const YamlReader& r, const YAML::Node& sd, Study& s, Places& places) {
  r.only_keys(sd, "seeds", {"search", "confirm", "keys"});
  if (sd["search"]) s.search_seed = r.integer(sd["search"], "seeds.search", 0, int64_t(1) << 31);
  if (sd["confirm"])
    s.confirm_seeds = r.int_list(sd["confirm"], "seeds.confirm", 0, int64_t(1) << 31);
  for (int64_t seed : s.confirm_seeds) {
    if (seed == s.search_seed) {
      r.fail(sd["confirm"], "seeds.confirm",
             fmt::format("seed {} is the search seed; confirmation needs fresh seeds", seed));
    }
  }
  if (std::set<int64_t>(s.confirm_seeds.begin(), s.confirm_seeds.end()).size() !=
      s.confirm_seeds.size()) {
    r.fail(sd["confirm"], "seeds.confirm", "repeats a seed");
  }
  if (const YAML::Node keys = sd["keys"]) {
    if (!keys.IsSequence() || keys.size() == 0)
      r.fail(keys, "seeds.keys", "expected a list of config keys");
    places["seeds.keys"] = keys;
    s.seed_keys.clear();
    for (size_t i = 0; i < keys.size(); ++i)
      s.seed_keys.push_back(config_key(r.text(keys[i], fmt::format("seeds.keys[{}]", i))));
  }
}

void parse_servers(const YamlReader& r, const YAML::Node& sv, Study& s) {
  if (s.runner.type != "remote")
    r.fail(sv, "runner.servers", "only for type: remote (the swarm servers trials run on)");
  if (!sv.IsSequence() || sv.size() == 0) {
    r.fail(sv, "runner.servers",
           "expected a list of swarm server URLs, e.g. [http://10.0.0.5:10086]");
  }
  for (size_t i = 0; i < sv.size(); ++i) {
    const std::string key = fmt::format("runner.servers[{}]", i);
    std::string url = r.text(sv[i], key);
    while (!url.empty() && url.back() == '/') url.pop_back();
    if (url.rfind("http://", 0) != 0 || url.size() <= 7)
      r.fail(sv[i], key, "expected http://HOST:PORT, got '" + url + "'");
    if (std::count(s.runner.servers.begin(), s.runner.servers.end(), url))
      r.fail(sv[i], key, "repeats " + url);
    s.runner.servers.push_back(url);
  }
}

// The flag of ajet_flags[i] that the controller sets itself, or "" when it may be given.
std::string refused_flag(const std::string& flag, const std::string& type) {
  for (const char* own : {"--conf", "--exp-dir", "--resume"}) {
    if (flag.rfind(own, 0) == 0) return std::string(own) + " is set by the controller";
  }
  if (flag.rfind("--swarm-url", 0) == 0) {
    return "--swarm-url is set by the controller: use runner: {type: remote, servers: [URL, "
           "...]}";
  }
  if (flag.rfind("--force-restart", 0) == 0) {
    return "--force-restart is set by the controller (type: remote trials take over their "
           "server's engine; a local trial starts its own front)";
  }
  if (type == "remote" &&
      (flag.rfind("--swarm-binary", 0) == 0 || flag.rfind("--swarm-flag", 0) == 0)) {
    return flag + " starts a front; type: remote trials drive the servers of runner.servers";
  }
  return "";
}

void parse_runner(const YamlReader& r, const YAML::Node& rn, Study& s) {
  r.only_keys(rn, "runner", {"type", "servers", "ajet_flags"});
  if (rn["type"]) s.runner.type = r.text(rn["type"], "runner.type");
  if (s.runner.type != "local" && s.runner.type != "remote") {
    r.fail(rn["type"], "runner.type",
           "expected local (classic runs, each with its own front) or remote (classic runs "
           "driving the swarm servers of runner.servers), got '" +
               s.runner.type + "'");
  }
  if (const YAML::Node sv = rn["servers"]) parse_servers(r, sv, s);
  if (s.runner.type == "remote" && s.runner.servers.empty()) {
    r.fail(rn, "runner.servers",
           "missing: type: remote needs the swarm servers' URLs, e.g. servers: "
           "[http://10.0.0.5:10086]");
  }
  if (const YAML::Node f = rn["ajet_flags"]) {
    if (!f.IsSequence()) r.fail(f, "runner.ajet_flags", "expected a list of flags");
    for (size_t i = 0; i < f.size(); ++i) {
      std::string flag = r.text(f[i], fmt::format("runner.ajet_flags[{}]", i));
      const std::string refused = refused_flag(flag, s.runner.type);
      if (!refused.empty()) r.fail(f[i], "runner.ajet_flags", refused);
      s.runner.ajet_flags.push_back(std::move(flag));
    }
  }
}

void parse_search(const YamlReader& r, const YAML::Node& root, Study& s, Places& places) {
  const YAML::Node search = root["search"];
  if (!search || !search.IsMap() || search.size() == 0) {
    r.fail(search ? search : root, "search",
           "missing: at least one parameter, e.g. lr: {key: ajet.trainer_common.optim.lr, "
           "log_uniform: [1e-5, 1e-3]}");
  }
  if (search.size() > kMaxParams)
    r.fail(search, "search", fmt::format("at most {} parameters", kMaxParams));
  std::set<std::string> keys;
  for (const auto& kv : search) {
    Param p = parse_param(r, kv.first.Scalar(), kv.second);
    if (!keys.insert(p.key).second)
      r.fail(kv.first, "search." + p.name, p.key + " is searched twice");
    places["search." + p.name] = kv.first;
    s.space.push_back(std::move(p));
  }
  if (const YAML::Node f = root["fixed"]) {
    if (!f.IsMap()) r.fail(f, "fixed", "expected a mapping of config keys to values");
    for (const auto& kv : f) {
      const std::string k = config_key(kv.first.Scalar());
      if (keys.count(k)) r.fail(kv.first, "fixed." + k, "is also searched");
      if (kControllerKeys.count(k))
        r.fail(kv.first, "fixed." + k, "is set by the controller for every trial");
      s.fixed[k] = r.scalar(kv.second, "fixed." + k);
      places["fixed." + k] = kv.first;
    }
  }
}

}  // namespace

std::string yaml_scalar(const Json& value) {
  if (value.is_string())
    return Json(value.get<std::string>()).dump();  // a JSON string is a YAML scalar
  if (value.is_number_float()) return fmt::format("{}", value.get<double>());
  return value.dump();
}

std::string value_text(const Json& value) {
  if (value.is_string()) return value.get<std::string>();
  if (value.is_number_float()) return fmt::format("{:.4g}", value.get<double>());
  return value.dump();
}

Study parse_study(const std::string& yaml_text, const fs::path& file,
                  const fs::path& workdir_default) {
  const YamlReader r{file.string()};
  const YAML::Node root = config::load_yaml(yaml_text, r.source(), kStudyLimits);
  if (!root.IsMap()) {
    r.fail(root, "", "a study file is a mapping (question, base, search, objective, ...)");
  }
  r.only_keys(root, "",
              {"question", "base", "workdir", "objective", "early_stopping", "search", "fixed",
               "budget", "parallel", "round_size", "seeds", "proposer", "runner"});
  Study s;
  s.file = file;
  Places places;
  parse_paths(r, root, file, workdir_default, s);
  parse_objective(r, root, s);
  if (const YAML::Node e = root["early_stopping"]) parse_stopping(r, e, s);
  if (const YAML::Node b = root["budget"]) parse_budget(r, b, s);
  if (root["parallel"]) s.parallel = r.integer(root["parallel"], "parallel", 1, kMaxParallel);
  if (root["round_size"]) s.round_size = r.integer(root["round_size"], "round_size", 1, 1000);
  if (const YAML::Node sd = root["seeds"]) parse_seeds(r, sd, s, places);
  if (const YAML::Node p = root["proposer"]) {
    r.only_keys(p, "proposer", {"seed"});
    if (p["seed"]) s.proposer_seed = r.integer(p["seed"], "proposer.seed", 0, int64_t(1) << 31);
  }
  if (const YAML::Node rn = root["runner"]) parse_runner(r, rn, s);
  if (s.runner.type == "remote" && s.parallel > int64_t(s.runner.servers.size())) {
    r.fail(root["parallel"] ? root["parallel"] : root, "parallel",
           fmt::format("{} trials at a time, but runner.servers lists {} server(s): a server "
                       "runs one trial at a time",
                       s.parallel, s.runner.servers.size()));
  }
  parse_search(r, root, s, places);
  check_against_base(s, r, places);
  return s;
}

std::string read_study_file(const fs::path& file) {
  return config::read_yaml_file(file, kStudyLimits);
}

Study load_study(const fs::path& file, const fs::path& workdir_default) {
  return parse_study(read_study_file(file), file, workdir_default);
}

std::vector<std::pair<std::string, std::string>> trial_overrides(const Study& study,
                                                                 const Params& params,
                                                                 int64_t seed) {
  std::vector<std::pair<std::string, std::string>> out;
  for (const auto& [key, value] : study.fixed) out.emplace_back(key, yaml_scalar(value));
  for (const Param& p : study.space) {
    const auto it = params.find(p.name);
    if (it != params.end()) out.emplace_back(p.key, yaml_scalar(it->second));
  }
  for (const std::string& key : study.seed_keys) out.emplace_back(key, std::to_string(seed));
  return out;
}

void check_params(const Study& study, const Params& params) {
  for (const auto& [name, value] : params) {
    if (std::none_of(study.space.begin(), study.space.end(),
                     [&](const Param& p) { return p.name == name; })) {
      invalid_argument("parameter '" + name + "' is not in the search space");
    }
  }
  for (const Param& p : study.space) {
    const auto it = params.find(p.name);
    if (it == params.end()) invalid_argument("parameter '" + p.name + "' is missing");
    const Json& v = it->second;
    if (p.kind == Param::Kind::kChoice) {
      if (std::find(p.choices.begin(), p.choices.end(), v) == p.choices.end()) {
        invalid_argument("parameter '" + p.name + "': " + v.dump() + " is not one of its choices");
      }
      continue;
    }
    if (!v.is_number())
      invalid_argument("parameter '" + p.name + "': expected a number, got " + v.dump());
    const double x = v.get<double>();
    if (p.kind == Param::Kind::kInt && (!v.is_number_integer())) {
      invalid_argument("parameter '" + p.name + "': expected an integer, got " + v.dump());
    }
    // A relative margin: a log-uniform bound written back as decimal text must still pass.
    const double slack = 1e-9 * std::max(std::abs(p.low), std::abs(p.high));
    if (!std::isfinite(x) || x < p.low - slack || x > p.high + slack) {
      invalid_argument(
          fmt::format("parameter '{}': {} is outside [{}, {}]", p.name, v.dump(), p.low, p.high));
    }
  }
}

int64_t validation_interval(const Study& study) {
  int64_t g = study.objective.step;
  for (int64_t r : study.stopping.rungs) g = std::gcd(g, r);
  return g;
}

}  // namespace ajet::research
