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

namespace ajet::research {
namespace fs = std::filesystem;
namespace {

// A study file is a few kilobytes; anything far larger is a mistake (or an alias bomb).
constexpr size_t kMaxStudyBytes = 1 << 20;
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

struct Reader {
  std::string source;  // the study file, for messages

  [[noreturn]] void bad(const std::string& key, const std::string& what) const {
    invalid_argument(source + ": " + key + ": " + what);
  }

  void only_keys(const YAML::Node& node, const std::string& where,
                 const std::vector<std::string>& known) const {
    if (!node.IsMap()) bad(where, "expected a mapping");
    for (const auto& kv : node) {
      const std::string k = kv.first.Scalar();
      if (std::find(known.begin(), known.end(), k) != known.end()) continue;
      const std::string near = closest_name(k, known);
      bad(where.empty() ? k : where + "." + k,
          "unknown key" + (near.empty() ? std::string(" (known: ") +
                                              fmt::format("{}", fmt::join(known, ", ")) + ")"
                                        : " (did you mean '" + near + "'?)"));
    }
  }

  double number(const YAML::Node& n, const std::string& key) const {
    if (!n.IsScalar()) bad(key, "expected a number");
    try {
      const double v = n.as<double>();
      if (!std::isfinite(v)) bad(key, "expected a finite number, got '" + n.Scalar() + "'");
      return v;
    } catch (const YAML::Exception&) {
      bad(key, "expected a number, got '" + n.Scalar() + "'");
    }
  }

  int64_t integer(const YAML::Node& n, const std::string& key, int64_t lo, int64_t hi) const {
    if (!n.IsScalar()) bad(key, "expected an integer");
    int64_t v = 0;
    try {
      v = n.as<int64_t>();
    } catch (const YAML::Exception&) {
      bad(key, "expected an integer, got '" + n.Scalar() + "'");
    }
    if (v < lo || v > hi) bad(key, fmt::format("must be between {} and {}, got {}", lo, hi, v));
    return v;
  }

  std::string text(const YAML::Node& n, const std::string& key) const {
    if (!n.IsScalar()) bad(key, "expected text");
    return n.Scalar();
  }

  Json scalar(const YAML::Node& n, const std::string& key) const {
    if (!n.IsScalar()) bad(key, "expected a scalar (number, text or true/false)");
    const std::string& s = n.Scalar();
    if (n.Tag() == "!") return s;  // quoted: text even when it looks like a number
    if (s == "true" || s == "false") return s == "true";
    try {
      size_t used = 0;
      const long long i = std::stoll(s, &used);
      if (used == s.size()) return int64_t(i);
    } catch (const std::exception&) {
    }
    try {
      size_t used = 0;
      const double d = std::stod(s, &used);
      if (used == s.size() && std::isfinite(d)) return d;
    } catch (const std::exception&) {
    }
    return s;
  }

  std::vector<int64_t> int_list(const YAML::Node& n, const std::string& key, int64_t lo,
                                int64_t hi) const {
    if (!n.IsSequence()) bad(key, "expected a list of integers");
    std::vector<int64_t> out;
    for (size_t i = 0; i < n.size(); ++i)
      out.push_back(integer(n[i], fmt::format("{}[{}]", key, i), lo, hi));
    return out;
  }
};

Param parse_param(const Reader& r, const std::string& name, const YAML::Node& node) {
  const std::string where = "search." + name;
  r.only_keys(node, where, {"key", "choice", "uniform", "log_uniform", "int"});
  Param p;
  p.name = name;
  if (!node["key"])
    r.bad(where, "needs `key`, the config key it sets (e.g. ajet.trainer_common.optim.lr)");
  p.key = r.text(node["key"], where + ".key");
  if (p.key.rfind("ajet.", 0) != 0) p.key = "ajet." + p.key;
  int kinds = 0;
  for (const char* k : {"choice", "uniform", "log_uniform", "int"}) kinds += node[k] ? 1 : 0;
  if (kinds != 1)
    r.bad(where,
          "needs exactly one of choice: [..], uniform: [low, high], log_uniform: [low, high], int: "
          "[low, high]");
  if (const YAML::Node c = node["choice"]) {
    p.kind = Param::Kind::kChoice;
    if (!c.IsSequence() || c.size() == 0 || c.size() > kMaxChoices) {
      r.bad(where + ".choice", fmt::format("expected a list of 1 to {} values", kMaxChoices));
    }
    for (size_t i = 0; i < c.size(); ++i) {
      Json v = r.scalar(c[i], fmt::format("{}.choice[{}]", where, i));
      if (std::find(p.choices.begin(), p.choices.end(), v) != p.choices.end()) {
        r.bad(fmt::format("{}.choice[{}]", where, i), "repeats " + value_text(v));
      }
      p.choices.push_back(std::move(v));
    }
    return p;
  }
  const char* kind_key = node["uniform"] ? "uniform" : node["log_uniform"] ? "log_uniform" : "int";
  p.kind = node["uniform"]       ? Param::Kind::kUniform
           : node["log_uniform"] ? Param::Kind::kLogUniform
                                 : Param::Kind::kInt;
  const YAML::Node range = node[kind_key];
  const std::string rkey = where + "." + kind_key;
  if (!range.IsSequence() || range.size() != 2) r.bad(rkey, "expected [low, high]");
  if (p.kind == Param::Kind::kInt) {
    p.low = double(r.integer(range[0], rkey + "[0]", -(int64_t(1) << 40), int64_t(1) << 40));
    p.high = double(r.integer(range[1], rkey + "[1]", -(int64_t(1) << 40), int64_t(1) << 40));
  } else {
    p.low = r.number(range[0], rkey + "[0]");
    p.high = r.number(range[1], rkey + "[1]");
  }
  if (!(p.low < p.high))
    r.bad(rkey, fmt::format("low ({}) must be below high ({})", p.low, p.high));
  if (p.kind == Param::Kind::kLogUniform && p.low <= 0)
    r.bad(rkey, "a log-uniform range must be above 0");
  return p;
}

// Every searched and fixed value must make a valid config with the base: checked here, at the
// start, not when a trial fails hours later.
void check_against_base(const Study& s, const std::string& source) {
  config::LoadedConfig base = config::load_config_file(s.base);
  for (const auto& [key, value] : s.fixed) {
    try {
      config::set_config_value(base.config, key, yaml_scalar(value));
    } catch (const Error& e) {
      invalid_argument(source + ": fixed." + key + ": " + e.what());
    }
  }
  auto try_value = [&](const Param& p, const Json& v) {
    config::Config c = base.config;
    try {
      config::set_config_value(c, p.key, yaml_scalar(v));
      config::validate(c, "the base config with search." + p.name + " = " + value_text(v));
    } catch (const Error& e) {
      invalid_argument(source + ": search." + p.name + " (" + p.key + "): " + e.what());
    }
  };
  for (const Param& p : s.space) {
    if (kControllerKeys.count(p.key) || std::count(s.seed_keys.begin(), s.seed_keys.end(), p.key)) {
      invalid_argument(source + ": search." + p.name + ": " + p.key +
                       " is set by the controller for every trial");
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
      invalid_argument(source + ": seeds.keys: " + e.what());
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
  const std::string source = file.string();
  if (yaml_text.size() > kMaxStudyBytes)
    invalid_argument(source + ": a study file must be under 1 MiB");
  YAML::Node root;
  try {
    root = YAML::Load(yaml_text);
  } catch (const YAML::Exception& e) {
    invalid_argument(fmt::format("{}:{}:{}: invalid YAML: {}", source, e.mark.line + 1,
                                 e.mark.column + 1, e.msg));
  }
  Reader r{source};
  if (!root.IsMap())
    invalid_argument(source +
                     ": a study file is a mapping (question, base, search, objective, ...)");
  r.only_keys(root, "",
              {"question", "base", "workdir", "objective", "early_stopping", "search", "fixed",
               "budget", "parallel", "round_size", "seeds", "proposer", "runner"});
  Study s;
  s.file = file;
  const fs::path dir = fs::absolute(file).parent_path();
  if (root["question"]) s.question = r.text(root["question"], "question");
  if (!root["base"]) r.bad("base", "missing: the classic config every trial starts from");
  s.base = (dir / r.text(root["base"], "base")).lexically_normal();
  if (!fs::exists(s.base)) r.bad("base", "no such file: " + s.base.string());
  s.workdir = root["workdir"] ? (dir / r.text(root["workdir"], "workdir")).lexically_normal()
                              : fs::absolute(workdir_default).lexically_normal();
  if (!fs::is_directory(s.workdir)) r.bad("workdir", "no such directory: " + s.workdir.string());

  if (!root["objective"])
    r.bad("objective", "missing: {metric: val/sampled_success, step: N, mode: max}");
  const YAML::Node o = root["objective"];
  r.only_keys(o, "objective", {"metric", "step", "mode"});
  if (o["metric"]) s.objective.metric = r.text(o["metric"], "objective.metric");
  if (s.objective.metric.rfind("val/", 0) != 0) {
    r.bad("objective.metric",
          "must be a validation metric (val/...), e.g. val/sampled_success; got '" +
              s.objective.metric + "'");
  }
  if (!o["step"]) r.bad("objective.step", "missing: the RL step at which the metric counts");
  s.objective.step = r.integer(o["step"], "objective.step", 1, 1000000);
  if (o["mode"]) {
    const std::string mode = r.text(o["mode"], "objective.mode");
    if (mode != "max" && mode != "min")
      r.bad("objective.mode", "expected max or min, got '" + mode + "'");
    s.objective.maximize = mode == "max";
  }

  if (const YAML::Node e = root["early_stopping"]) {
    r.only_keys(e, "early_stopping", {"rungs", "eta", "plateau_patience", "plateau_min_delta"});
    if (e["rungs"])
      s.stopping.rungs = r.int_list(e["rungs"], "early_stopping.rungs", 1, s.objective.step - 1);
    for (size_t i = 1; i < s.stopping.rungs.size(); ++i) {
      if (s.stopping.rungs[i] <= s.stopping.rungs[i - 1])
        r.bad("early_stopping.rungs", "must increase");
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
        r.bad("early_stopping.plateau_min_delta", "must be >= 0");
    }
  }

  if (const YAML::Node b = root["budget"]) {
    r.only_keys(b, "budget",
                {"trials", "wall_seconds", "trial_seconds", "max_attempts", "unreachable_seconds"});
    if (b["trials"]) s.budget.trials = r.integer(b["trials"], "budget.trials", 1, kMaxTrials);
    auto seconds = [&](const char* k, double& out) {
      if (!b[k]) return;
      out = r.number(b[k], std::string("budget.") + k);
      if (out <= 0) r.bad(std::string("budget.") + k, "must be above 0 seconds");
    };
    seconds("wall_seconds", s.budget.wall_seconds);
    seconds("trial_seconds", s.budget.trial_seconds);
    seconds("unreachable_seconds", s.budget.unreachable_seconds);
    if (b["max_attempts"])
      s.budget.max_attempts = r.integer(b["max_attempts"], "budget.max_attempts", 1, 20);
  }
  if (root["parallel"]) s.parallel = r.integer(root["parallel"], "parallel", 1, kMaxParallel);
  if (root["round_size"]) s.round_size = r.integer(root["round_size"], "round_size", 1, 1000);

  if (const YAML::Node sd = root["seeds"]) {
    r.only_keys(sd, "seeds", {"search", "confirm", "keys"});
    if (sd["search"]) s.search_seed = r.integer(sd["search"], "seeds.search", 0, int64_t(1) << 31);
    if (sd["confirm"])
      s.confirm_seeds = r.int_list(sd["confirm"], "seeds.confirm", 0, int64_t(1) << 31);
    for (int64_t seed : s.confirm_seeds) {
      if (seed == s.search_seed)
        r.bad("seeds.confirm",
              fmt::format("seed {} is the search seed; confirmation needs fresh seeds", seed));
    }
    if (std::set<int64_t>(s.confirm_seeds.begin(), s.confirm_seeds.end()).size() !=
        s.confirm_seeds.size()) {
      r.bad("seeds.confirm", "repeats a seed");
    }
    if (sd["keys"]) {
      if (!sd["keys"].IsSequence() || sd["keys"].size() == 0)
        r.bad("seeds.keys", "expected a list of config keys");
      s.seed_keys.clear();
      for (size_t i = 0; i < sd["keys"].size(); ++i) {
        std::string k = r.text(sd["keys"][i], fmt::format("seeds.keys[{}]", i));
        if (k.rfind("ajet.", 0) != 0) k = "ajet." + k;
        s.seed_keys.push_back(k);
      }
    }
  }
  if (const YAML::Node p = root["proposer"]) {
    r.only_keys(p, "proposer", {"seed"});
    if (p["seed"]) s.proposer_seed = r.integer(p["seed"], "proposer.seed", 0, int64_t(1) << 31);
  }
  if (const YAML::Node rn = root["runner"]) {
    r.only_keys(rn, "runner", {"type", "servers", "ajet_flags"});
    if (rn["type"]) s.runner.type = r.text(rn["type"], "runner.type");
    if (s.runner.type != "local" && s.runner.type != "remote") {
      r.bad(
          "runner.type",
          "expected local (classic runs, each with its own front) or remote (classic runs driving "
          "the swarm servers of runner.servers), got '" +
              s.runner.type + "'");
    }
    if (const YAML::Node sv = rn["servers"]) {
      if (s.runner.type != "remote")
        r.bad("runner.servers", "only for type: remote (the swarm servers trials run on)");
      if (!sv.IsSequence() || sv.size() == 0)
        r.bad("runner.servers",
              "expected a list of swarm server URLs, e.g. [http://10.0.0.5:10086]");
      for (size_t i = 0; i < sv.size(); ++i) {
        const std::string key = fmt::format("runner.servers[{}]", i);
        std::string url = r.text(sv[i], key);
        while (!url.empty() && url.back() == '/') url.pop_back();
        if (url.rfind("http://", 0) != 0 || url.size() <= 7)
          r.bad(key, "expected http://HOST:PORT, got '" + url + "'");
        if (std::count(s.runner.servers.begin(), s.runner.servers.end(), url))
          r.bad(key, "repeats " + url);
        s.runner.servers.push_back(url);
      }
    }
    if (s.runner.type == "remote" && s.runner.servers.empty()) {
      r.bad("runner.servers",
            "missing: type: remote needs the swarm servers' URLs, e.g. servers: "
            "[http://10.0.0.5:10086]");
    }
    if (const YAML::Node f = rn["ajet_flags"]) {
      if (!f.IsSequence()) r.bad("runner.ajet_flags", "expected a list of flags");
      for (size_t i = 0; i < f.size(); ++i)
        s.runner.ajet_flags.push_back(r.text(f[i], fmt::format("runner.ajet_flags[{}]", i)));
      for (const std::string& flag : s.runner.ajet_flags) {
        for (const char* own : {"--conf", "--exp-dir", "--resume"}) {
          if (flag.rfind(own, 0) == 0)
            r.bad("runner.ajet_flags", std::string(own) + " is set by the controller");
        }
        if (flag.rfind("--swarm-url", 0) == 0) {
          r.bad("runner.ajet_flags",
                "--swarm-url is set by the controller: use runner: {type: remote, servers: [URL, "
                "...]}");
        }
        if (flag.rfind("--force-restart", 0) == 0) {
          r.bad("runner.ajet_flags",
                "--force-restart is set by the controller (type: remote trials take over their "
                "server's engine; a local trial starts its own front)");
        }
        if (s.runner.type == "remote" &&
            (flag.rfind("--swarm-binary", 0) == 0 || flag.rfind("--swarm-flag", 0) == 0)) {
          r.bad("runner.ajet_flags",
                flag + " starts a front; type: remote trials drive the servers of runner.servers");
        }
      }
    }
    if (s.runner.type == "remote" && s.parallel > int64_t(s.runner.servers.size())) {
      r.bad("parallel",
            fmt::format(
                "{} trials at a time, but runner.servers lists {} server(s): a server runs one "
                "trial at a time",
                s.parallel, s.runner.servers.size()));
    }
  }

  if (!root["search"] || !root["search"].IsMap() || root["search"].size() == 0) {
    r.bad("search",
          "missing: at least one parameter, e.g. lr: {key: ajet.trainer_common.optim.lr, "
          "log_uniform: [1e-5, 1e-3]}");
  }
  if (root["search"].size() > kMaxParams)
    r.bad("search", fmt::format("at most {} parameters", kMaxParams));
  std::set<std::string> keys;
  for (const auto& kv : root["search"]) {
    Param p = parse_param(r, kv.first.Scalar(), kv.second);
    if (!keys.insert(p.key).second) r.bad("search." + p.name, p.key + " is searched twice");
    s.space.push_back(std::move(p));
  }
  if (const YAML::Node f = root["fixed"]) {
    if (!f.IsMap()) r.bad("fixed", "expected a mapping of config keys to values");
    for (const auto& kv : f) {
      std::string k = kv.first.Scalar();
      if (k.rfind("ajet.", 0) != 0) k = "ajet." + k;
      if (keys.count(k)) r.bad("fixed." + k, "is also searched");
      if (kControllerKeys.count(k)) r.bad("fixed." + k, "is set by the controller for every trial");
      s.fixed[k] = r.scalar(kv.second, "fixed." + k);
    }
  }
  check_against_base(s, source);
  return s;
}

Study load_study(const fs::path& file, const fs::path& workdir_default) {
  return parse_study(read_file(file), file, workdir_default);
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
