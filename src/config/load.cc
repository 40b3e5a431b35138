#include "config/load.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cctype>
#include <ctime>
#include <map>
#include <set>

#include "common/error.h"
#include "common/fs.h"
#include "common/json.h"
#include "common/strings.h"
#include "config/schema.h"
#include "config/yaml_reader.h"

namespace ajet::config {

namespace {

// A config is kilobytes; a text over 16 MiB is a mistake, refused before yaml-cpp builds its tree.
constexpr size_t kMaxConfigBytes = size_t(16) << 20;

// Parsing context: the shared reader (source:line in every message) plus what only the typed
// config has: warnings, the schema's type names, and who reads the config.
struct Ctx {
  YamlReader reader;
  std::vector<std::string>* warnings;
  ConfigUse use = ConfigUse::kClassic;

  const std::string& source() const { return reader.source(); }
  std::string at(const YAML::Node& node) const { return reader.at(node); }
  [[noreturn]] void type_error(const Field& f, const YAML::Node& node,
                               std::string_view expected = {}) const {
    std::string want(expected.empty() ? field_type_name(f.target) : expected);
    invalid_argument(at(node) + ": " + f.key + " must be " + want + ", got " + describe(node));
  }
  void warn(std::string message) const { warnings->push_back(std::move(message)); }
};

std::string canonical_choice(const Field& f, const std::string& value, const YAML::Node& node,
                             const Ctx& ctx) {
  for (const auto& [given, canonical] : f.aliases) {
    if (value == given) {
      ctx.warn(ctx.at(node) + ": " + f.key + ": '" + given + "' is upstream's name; using '" +
               canonical + "'");
      return canonical;
    }
  }
  if (!f.choices.empty() && !f.choice_checked_when_used &&
      std::find(f.choices.begin(), f.choices.end(), value) == f.choices.end()) {
    std::string allowed;
    for (const auto& c : f.choices) allowed += (allowed.empty() ? "" : ", ") + c;
    invalid_argument(ctx.at(node) + ": " + f.key + " must be one of [" + allowed + "], got '" +
                     value + "'");
  }
  return value;
}

std::string scalar_string(const Field& f, const YAML::Node& node, const Ctx& ctx) {
  if (!node.IsScalar()) ctx.type_error(f, node);
  return node.Scalar();
}

int64_t as_int(const Field& f, const YAML::Node& node, const Ctx& ctx) {
  if (!node.IsScalar()) ctx.type_error(f, node);
  if (f.auto_value && ascii_lower(node.Scalar()) == "auto") return *f.auto_value;
  auto v = scalar_int(node.Scalar());
  if (!v) ctx.type_error(f, node, f.auto_value ? "an integer or `auto`" : "an integer");
  return *v;
}

double as_double(const Field& f, const YAML::Node& node, const Ctx& ctx) {
  if (!node.IsScalar()) ctx.type_error(f, node);
  auto v = scalar_double(node.Scalar());
  if (!v) ctx.type_error(f, node, "a finite number");
  return *v;
}

void assign_cocktail_tasks(const Field& f, const YAML::Node& node, const Ctx& ctx,
                           std::vector<CocktailTaskConfig>* out);

// Stores `node` into the member `f` points at.
void assign(const Field& f, const YAML::Node& node, const Ctx& ctx) {
  bool nullable = std::holds_alternative<std::optional<int64_t>*>(f.target) ||
                  std::holds_alternative<std::optional<double>*>(f.target) ||
                  std::holds_alternative<std::optional<std::string>*>(f.target);
  if (node.IsNull() && !nullable) {
    ctx.warn(ctx.at(node) + ": " + f.key + " is null; keeping the default");
    return;
  }
  struct Visitor {
    const Field& f;
    const YAML::Node& node;
    const Ctx& ctx;
    void operator()(bool* out) const {
      auto v = node.IsScalar() ? scalar_bool(node.Scalar()) : std::nullopt;
      if (!v) ctx.type_error(f, node);
      *out = *v;
    }
    void operator()(int64_t* out) const { *out = as_int(f, node, ctx); }
    void operator()(double* out) const { *out = as_double(f, node, ctx); }
    void operator()(std::string* out) const {
      *out = canonical_choice(f, scalar_string(f, node, ctx), node, ctx);
    }
    void operator()(std::vector<std::string>* out) const {
      std::vector<std::string> items;
      if (node.IsScalar()) {
        items.push_back(node.Scalar());  // upstream writes `target_modules: all-linear`
      } else if (node.IsSequence()) {
        for (const auto& item : node) {
          if (!item.IsScalar()) ctx.type_error(f, node);
          items.push_back(item.Scalar());
        }
      } else {
        ctx.type_error(f, node);
      }
      *out = std::move(items);
    }
    void operator()(std::vector<double>* out) const {
      if (!node.IsSequence()) ctx.type_error(f, node);
      std::vector<double> items;
      for (const auto& item : node) items.push_back(as_double(f, item, ctx));
      *out = std::move(items);
    }
    void operator()(std::optional<int64_t>* out) const {
      if (node.IsNull()) {
        out->reset();
      } else {
        *out = as_int(f, node, ctx);
      }
    }
    void operator()(std::optional<double>* out) const {
      if (node.IsNull()) {
        out->reset();
      } else {
        *out = as_double(f, node, ctx);
      }
    }
    void operator()(std::vector<CocktailTaskConfig>* out) const {
      assign_cocktail_tasks(f, node, ctx, out);
    }
    void operator()(std::optional<std::string>* out) const {
      if (node.IsNull()) {
        out->reset();
      } else {
        *out = canonical_choice(f, scalar_string(f, node, ctx), node, ctx);
      }
    }
    void operator()(Json* out) const {
      if (f.json_list ? !node.IsSequence() : !node.IsMap()) ctx.type_error(f, node);
      *out = ctx.reader.to_json(node, f.key);  // refuses alias bombs and deep nesting
    }
  };
  std::visit(Visitor{f, node, ctx}, f.target);
}

struct KeyIndex {
  std::map<std::string, const Field*> fields;
  std::set<std::string> sections;  // every proper prefix of a key: "ajet", "ajet.rollout", …

  explicit KeyIndex(const std::vector<Field>& all) {
    for (const auto& f : all) {
      fields[f.key] = &f;
      for (size_t dot = f.key.find('.'); dot != std::string::npos; dot = f.key.find('.', dot + 1)) {
        sections.insert(f.key.substr(0, dot));
      }
    }
  }
};

const std::string* ignored_reason(const std::string& key) {
  for (const auto& [prefix, reason] : ignored_upstream_keys()) {
    if (key == prefix ||
        (key.size() > prefix.size() && key.compare(0, prefix.size(), prefix) == 0 &&
         key[prefix.size()] == '.')) {
      return &reason;
    }
  }
  return nullptr;
}

// Sections of the config that belong to the other side of a swarm (ConfigUse): the clients read the
// tasks and judge them, from the same config the classic launcher or a swarm client syncs. The
// swarm server skips them without a word: they are used, only not here, and a warning on every sync
// would tell the user to remove what their clients need.
bool client_side_section(const std::string& key, ConfigUse use) {
  return use == ConfigUse::kSwarmServer && (key == "ajet.task_reader" || key == "ajet.task_judge");
}

void walk(const YAML::Node& map, const std::string& prefix, const KeyIndex& index, const Ctx& ctx) {
  for (const auto& kv : map) {
    if (!kv.first.IsScalar())
      invalid_argument(ctx.at(kv.first) + ": config keys must be plain names");
    std::string key = prefix.empty() ? kv.first.Scalar() : prefix + "." + kv.first.Scalar();
    const YAML::Node& value = kv.second;
    if (client_side_section(key, ctx.use)) continue;
    if (auto it = index.fields.find(key); it != index.fields.end()) {
      assign(*it->second, value, ctx);
    } else if (index.sections.count(key) != 0) {
      if (value.IsMap()) {
        walk(value, key, index, ctx);
      } else if (!value.IsNull()) {
        invalid_argument(ctx.at(value) + ": " + key + " must be a mapping, got " + describe(value));
      }
    } else if (const std::string* reason = ignored_reason(key)) {
      ctx.warn(ctx.at(kv.first) + ": upstream key '" + key + "' is not used here (" + *reason +
               "); ignored");
    } else if (prefix.empty() && (key == "hydra" || key == "defaults")) {
      // Upstream's Hydra preamble: meaningless here and harmless.
    } else {
      std::vector<std::string> known;
      for (const auto& [name, field] : index.fields) known.push_back(name);
      known.insert(known.end(), index.sections.begin(), index.sections.end());
      const std::string near = closest_name(key, known);
      ctx.warn(ctx.at(kv.first) + ": unknown key '" + key + "' (ignored" +
               (near.empty() ? std::string(")") : "; did you mean '" + near + "'?)"));
    }
  }
}

// Each item of ajet.task_reader.cocktail.tasks is walked like a config section of its own, against
// the keys of one cocktail task, so its errors and warnings name "…cocktail.tasks[i].key".
void assign_cocktail_tasks(const Field& f, const YAML::Node& node, const Ctx& ctx,
                           std::vector<CocktailTaskConfig>* out) {
  if (!node.IsSequence()) ctx.type_error(f, node);
  if (node.size() > kMaxCocktailTasks) {
    invalid_argument(fmt::format("{}: {} holds {} tasks; a cocktail mixes at most {}", ctx.at(node),
                                 f.key, node.size(), kMaxCocktailTasks));
  }
  std::vector<CocktailTaskConfig> tasks(node.size());  // sized once: the fields point into it
  for (size_t i = 0; i < node.size(); ++i) {
    const YAML::Node item = node[i];
    const std::string key = fmt::format("{}[{}]", f.key, i);
    if (!item.IsMap()) {
      invalid_argument(ctx.at(item) + ": " + key +
                       " must be a mapping (name, weight, type, builtin, ...), got " +
                       describe(item));
    }
    const std::vector<Field> fields = cocktail_task_fields(tasks[i], i);
    walk(item, key, KeyIndex(fields), ctx);
  }
  *out = std::move(tasks);
}

std::string format_number(double v) { return fmt::format("{}", v); }

void emit_json(YAML::Emitter& out, const Json& value) {
  switch (value.type()) {
    case Json::value_t::object:
      out << YAML::BeginMap;
      for (const auto& [k, v] : value.items()) {
        out << YAML::Key << k << YAML::Value;
        emit_json(out, v);
      }
      out << YAML::EndMap;
      break;
    case Json::value_t::array:
      out << YAML::Flow << YAML::BeginSeq;
      for (const auto& v : value) emit_json(out, v);
      out << YAML::EndSeq;
      break;
    case Json::value_t::string: out << YAML::DoubleQuoted << value.get<std::string>(); break;
    case Json::value_t::boolean: out << (value.get<bool>() ? "true" : "false"); break;
    case Json::value_t::number_integer:
    case Json::value_t::number_unsigned: out << std::to_string(value.get<int64_t>()); break;
    case Json::value_t::number_float: out << format_number(value.get<double>()); break;
    default: out << YAML::Null; break;
  }
}

Json::json_pointer pointer_of(const std::string& dotted) {
  std::string ptr;
  for (char c : dotted) ptr += (c == '.') ? '/' : c;
  return Json::json_pointer("/" + ptr);
}

Json field_value(const FieldTarget& target);

// One cocktail task as nested JSON with keys relative to the item: {name, weight, type, builtin:
// {…}, …}.
Json cocktail_task_json(CocktailTaskConfig task, size_t index) {
  const std::string prefix = fmt::format("ajet.task_reader.cocktail.tasks[{}].", index);
  Json out = Json::object();
  for (const Field& f : cocktail_task_fields(task, index)) {
    out[pointer_of(f.key.substr(prefix.size()))] = field_value(f.target);
  }
  return out;
}

Json field_value(const FieldTarget& target) {
  return std::visit(
      [](auto* p) -> Json {
        using T = std::decay_t<decltype(*p)>;
        if constexpr (std::is_same_v<T, std::optional<int64_t>> ||
                      std::is_same_v<T, std::optional<double>> ||
                      std::is_same_v<T, std::optional<std::string>>) {
          return *p ? Json(**p) : Json(nullptr);
        } else if constexpr (std::is_same_v<T, std::vector<CocktailTaskConfig>>) {
          Json items = Json::array();
          for (size_t i = 0; i < p->size(); ++i) items.push_back(cocktail_task_json((*p)[i], i));
          return items;
        } else {
          return Json(*p);
        }
      },
      target);
}

bool is_kl_loss_type(const std::string& name) {
  return std::find(kKlLossTypes.begin(), kKlLossTypes.end(), name) != kKlLossTypes.end();
}

std::string kl_loss_types_text() { return fmt::format("{}", fmt::join(kKlLossTypes, ", ")); }

// Settings of switched-off features may hold values this build lacks
// (Field::choice_checked_when_used): a warning, and the default stays, so the config still dumps
// and reloads.
void settle_unused_choices(Config& config, const Ctx& ctx) {
  auto& tc = config.trainer_common;
  if (!tc.use_kl_loss && !is_kl_loss_type(tc.kl_loss_type)) {
    ctx.warn(ctx.source() + ": ajet.trainer_common.kl_loss_type '" + tc.kl_loss_type +
             "' is not supported here (" + kl_loss_types_text() +
             "), and use_kl_loss is false: ignored");
    tc.kl_loss_type = kKlLossTypes.front();  // config.h's default
  }
}

bool listed(const std::vector<std::string>& names, const std::string& name) {
  return std::find(names.begin(), names.end(), name) != names.end();
}

// Upstream's loggers this build lacks (swanlab, wandb …) are dropped with a warning. A list that
// held only those becomes the default, so an upstream config still gets its curves (here:
// TensorBoard).
void settle_loggers(Config& config, const Ctx& ctx) {
  std::vector<std::string>& loggers = config.trainer_common.logger;
  std::vector<std::string> kept, dropped;
  for (const std::string& name : loggers)
    (listed(kUnavailableLoggers, name) ? dropped : kept).push_back(name);
  if (dropped.empty()) return;
  std::string message =
      fmt::format("{}: ajet.trainer_common.logger: {} not available here; ignored", ctx.source(),
                  fmt::join(dropped, ", "));
  if (kept.empty()) {
    kept = Config().trainer_common.logger;
    message += fmt::format(" (using the default: {})", fmt::join(kept, ", "));
  }
  ctx.warn(message +
           "; metrics go to the store, and to TensorBoard event files with `tensorboard`");
  loggers = std::move(kept);
}

// Per-key bounds and choices of `fields` (Field::min, max, choices).
void check_bounds(const std::vector<Field>& fields, std::vector<std::string>& problems) {
  for (const Field& f : fields) {
    Json v = field_value(f.target);
    if (v.is_number()) {
      double d = v.get<double>();
      if (f.min && d < *f.min) {
        problems.push_back(fmt::format("{} must be >= {}, got {}", f.key, *f.min, v.dump()));
      }
      if (f.max && d > *f.max) {
        problems.push_back(fmt::format("{} must be <= {}, got {}", f.key, *f.max, v.dump()));
      }
    }
    if (v.is_string() && !f.choices.empty() && !f.choice_checked_when_used &&
        std::find(f.choices.begin(), f.choices.end(), v.get<std::string>()) == f.choices.end()) {
      problems.push_back(f.key + " must be one of the documented values, got " + v.dump());
    }
  }
}

bool is_metric_name(const std::string& name) {
  return !name.empty() && name.size() <= kMaxCocktailNameLength &&
         std::all_of(name.begin(), name.end(), [](char c) {
           return std::isalnum(static_cast<unsigned char>(c)) != 0 || c == '_' || c == '-' ||
                  c == '.';
         });
}

// One cocktail task: bounds of its keys, a source that yields tasks, a usable name.
void check_cocktail_task(const CocktailTaskConfig& task, size_t index,
                         std::vector<std::string>& problems) {
  CocktailTaskConfig copy = task;
  check_bounds(cocktail_task_fields(copy, index), problems);
  const std::string item = fmt::format("ajet.task_reader.cocktail.tasks[{}]", index);
  const TaskSourceConfig& source = task.source;
  if (source.type == "random_dummy") {
    problems.push_back(
        item + ".type must be builtin or jsonl_dataset_file (random_dummy yields no tasks)");
  }
  if (source.type == "jsonl_dataset_file" && source.jsonl_dataset_file.training_file_path.empty()) {
    problems.push_back(item +
                       ".jsonl_dataset_file.training.file_path is empty (type jsonl_dataset_file)");
  }
  const std::string name = cocktail_task_name(task);
  if (name.empty()) {
    problems.push_back(item +
                       ".name is required (only a builtin task defaults to its generator's name)");
  } else if (!is_metric_name(name)) {
    problems.push_back(
        fmt::format("{}.name '{}' must be 1-{} letters, digits, '_', '-' or '.' (it names metrics)",
                    item, name, kMaxCocktailNameLength));
  }
}

// ajet.task_reader.cocktail: 2 to kMaxCocktailTasks tasks with distinct names and weights that can
// fill a batch, and a schedule whose type has the values it needs.
void check_cocktail(const CocktailConfig& cocktail, std::vector<std::string>& problems) {
  const std::string key = "ajet.task_reader.cocktail";
  const CocktailScheduleConfig& s = cocktail.schedule;
  const bool fixed = s.type == "fixed";
  if (cocktail.tasks.empty()) {
    if (!fixed || s.start || s.end || s.end_step) {
      problems.push_back(key + ".schedule is set but " + key + ".tasks is empty");
    }
    return;
  }
  if (cocktail.tasks.size() < 2) {
    problems.push_back(
        key +
        ".tasks holds one task; a cocktail mixes at least two (for one, use ajet.task_reader)");
  }
  if (cocktail.tasks.size() > kMaxCocktailTasks) {
    problems.push_back(fmt::format("{}.tasks holds {} tasks; at most {}", key,
                                   cocktail.tasks.size(), kMaxCocktailTasks));
  }
  std::map<std::string, size_t> first_index;
  double weights = 0, weights_after_first = 0;
  for (size_t i = 0; i < cocktail.tasks.size(); ++i) {
    check_cocktail_task(cocktail.tasks[i], i, problems);
    const std::string name = cocktail_task_name(cocktail.tasks[i]);
    if (auto [it, fresh] = first_index.emplace(name, i); !fresh && !name.empty()) {
      problems.push_back(fmt::format(
          "{}.tasks[{}].name '{}' is also the name of tasks[{}]; give each task its own name", key,
          i, name, it->second));
    }
    weights += cocktail.tasks[i].weight;
    weights_after_first += i > 0 ? cocktail.tasks[i].weight : 0.0;
  }
  if (fixed) {
    if (s.start || s.end || s.end_step) {
      problems.push_back(
          key +
          ".schedule.start, end and end_step need schedule.type constant, linear or cos "
          "(fixed mixes by the weights)");
    }
    if (weights <= 0) problems.push_back(key + ".tasks: the weights must not all be 0");
    return;
  }
  if (!s.start) {
    problems.push_back(key + ".schedule.start is required with schedule.type " + s.type);
  }
  if (s.type != "constant" && (!s.end || !s.end_step)) {
    problems.push_back(key + ".schedule.end and end_step are required with schedule.type " +
                       s.type);
  }
  if (weights_after_first <= 0) {
    problems.push_back(
        key +
        ".tasks: a schedule gives the first task its share and the others the rest by weight, "
        "so the weights of tasks[1] and after must not all be 0");
  }
}

}  // namespace

LoadedConfig parse_config(std::string_view yaml_text, std::string_view source, ConfigUse use) {
  const YAML::Node root = load_yaml(yaml_text, source, {kMaxConfigBytes, "a config"});
  LoadedConfig loaded;
  std::vector<Field> fields = config_fields(loaded.config);
  KeyIndex index(fields);
  Ctx ctx{YamlReader(std::string(source)), &loaded.warnings, use};
  if (root.IsMap()) {
    walk(root, "", index, ctx);
  } else if (root.IsDefined() && !root.IsNull()) {
    invalid_argument(std::string(source) +
                     ": the config must be a mapping with an `ajet` section, got " +
                     describe(root));
  }
  settle_unused_choices(loaded.config, ctx);
  settle_loggers(loaded.config, ctx);
  validate(loaded.config, source);
  if (auto w = truncated_rollout_warning(loaded.config, source)) ctx.warn(std::move(*w));
  return loaded;
}

LoadedConfig load_config_file(const std::filesystem::path& path) {
  return parse_config(read_file(path), path.string());
}

void set_config_value(Config& config, std::string_view dotted_key, std::string_view yaml_value) {
  std::vector<Field> fields = config_fields(config);
  std::string key(dotted_key);
  if (key.rfind("ajet.", 0) != 0) key = "ajet." + key;
  auto it =
      std::find_if(fields.begin(), fields.end(), [&](const Field& f) { return f.key == key; });
  if (it == fields.end()) {
    std::vector<std::string> known;
    for (const auto& f : fields) known.push_back(f.key);
    const std::string near = closest_name(key, known);
    invalid_argument("override: unknown config key '" + key + "'" +
                     (near.empty() ? std::string() : " (did you mean '" + near + "'?)"));
  }
  YAML::Node node;
  try {
    node = YAML::Load(std::string(yaml_value));
  } catch (const YAML::Exception& e) {
    invalid_argument("override " + key + ": invalid YAML value '" + std::string(yaml_value) +
                     "': " + e.msg);
  }
  std::vector<std::string> ignored_warnings;
  assign(*it, node, Ctx{YamlReader("override"), &ignored_warnings});
}

bool valid_device_name(std::string_view device) {
  if (device == "cpu" || device == "cuda" || device == "auto") return true;
  if (device.rfind("cuda:", 0) != 0) return false;
  std::string_view index = device.substr(5);
  if (index.empty() || index.size() > 3) return false;
  for (char ch : index) {
    if (ch < '0' || ch > '9') return false;
  }
  return true;
}

std::optional<std::string> truncated_rollout_warning(const Config& config,
                                                     std::string_view source) {
  const auto& r = config.rollout;
  if (r.top_p >= 1.0 && r.top_k <= 0) return std::nullopt;
  const bool corrected = config.backbone == "async" && config.async.off_policy_correction != "none";
  const bool rollout_old = config.trainer_common.old_logprob_source == "rollout";
  if (!corrected && !rollout_old) return std::nullopt;
  return fmt::format(
      "{}: ajet.rollout.top_p {} / top_k {}: train episodes come from a truncated distribution the "
      "trainer does not form, and {} divides by their logprobs; the ratios carry the difference "
      "(each step's rollout_logprob_diff shows it). Keep top_p 1 and top_k -1 to train on what was "
      "sampled",
      source, r.top_p, r.top_k,
      corrected ? "the async off-policy correction (ajet.async.off_policy_correction)"
                : "ajet.trainer_common.old_logprob_source: rollout");
}

namespace {
// The adapter section of a multi_model member: a mapping of the POST /adapters fields (the engine
// checks the ranges again when it makes the adapter).
void check_adapter_member(const Json& a, const std::string& at, std::vector<std::string>& p) {
  if (!a.is_object()) {
    p.push_back(at +
                " must be a mapping {rank?, alpha?, dropout?, target_modules?, seed?} or "
                "{path}");
    return;
  }
  for (const auto& [key, value] : a.items()) {
    if (key == "rank" || key == "seed") {
      if (!value.is_number_integer() || value.get<int64_t>() < (key == "rank" ? 1 : 0))
        p.push_back(at + "." + key + " must be an integer >= " + (key == "rank" ? "1" : "0"));
    } else if (key == "alpha" || key == "dropout") {
      if (!value.is_number() || value.get<double>() < 0 ||
          (key == "alpha" && value.get<double>() == 0))
        p.push_back(at + "." + key + " must be a number " + (key == "alpha" ? "> 0" : ">= 0"));
    } else if (key == "target_modules") {
      bool ok = value.is_array() && !value.empty();
      for (const Json& t : value) ok = ok && t.is_string();
      if (!ok) p.push_back(at + ".target_modules must be a non-empty list of module names");
    } else if (key == "path") {
      if (!value.is_string() || value.get<std::string>().empty())
        p.push_back(at + ".path must be a non-empty string (a PEFT adapter directory)");
    } else {
      p.push_back(at + "." + key +
                  " is not an adapter field (rank, alpha, dropout, target_modules, seed, path)");
    }
  }
  if (a.contains("path") && a.size() > 1)
    p.push_back(at + ": a saved adapter (path) brings its own rank, alpha, dropout and targets");
}
}  // namespace

std::vector<MultiModelMember> multi_model_members(const MultiModelConfig& mm,
                                                  std::vector<std::string>* problems) {
  std::vector<MultiModelMember> out;
  std::vector<std::string> local;
  std::vector<std::string>& p = problems != nullptr ? *problems : local;
  const std::string where = "ajet.multi_model.models";
  if (!mm.models.is_array() || mm.models.size() > kMaxMultiModelMembers) {
    p.push_back(fmt::format("{} must be a list of at most {} {{name, path}}", where,
                            kMaxMultiModelMembers));
    return out;
  }
  std::set<std::string> names;
  for (size_t i = 0; i < mm.models.size(); ++i) {
    const Json& m = mm.models[i];
    const std::string at = fmt::format("{}[{}]", where, i);
    auto text = [&](const char* key) -> std::string {
      const Json v = m.is_object() ? m.value(key, Json()) : Json();
      if (v.is_string() && !v.get<std::string>().empty()) return v.get<std::string>();
      p.push_back(at + "." + key + " must be a non-empty string");
      return "";
    };
    if (!m.is_object()) {
      p.push_back(at + " must be a mapping {name, path} or {name, adapter}");
      continue;
    }
    for (const auto& [key, value] : m.items()) {
      if (key != "name" && key != "path" && key != "adapter")
        p.push_back(at + "." + key + " is not a key of a member (name, path or adapter)");
    }
    MultiModelMember member;
    member.name = text("name");
    if (m.contains("adapter")) {
      member.adapter = m["adapter"].is_null() ? Json::object() : m["adapter"];
      check_adapter_member(member.adapter, at + ".adapter", p);
      if (m.contains("path"))
        p.push_back(at +
                    ": a member is a server (path: its model) or an adapter of the one served "
                    "model (adapter: its LoRA), not both; an adapter starting from a saved "
                    "one names it as adapter.path");
    } else {
      member.path = text("path");
    }
    if (member.name.find_first_not_of("abcdefghijklmnopqrstuvwxyz0123456789_-") !=
        std::string::npos) {
      p.push_back(at + ".name '" + member.name +
                  "' may only hold a-z, 0-9, _ and - (it names a directory)");
    } else if (!member.name.empty() && !names.insert(member.name).second) {
      p.push_back(at + ".name '" + member.name + "' is used twice");
    }
    out.push_back(std::move(member));
  }
  const auto adapters = std::count_if(out.begin(), out.end(),
                                      [](const MultiModelMember& m) { return m.is_adapter(); });
  if (adapters > 0 && size_t(adapters) != out.size()) {
    p.push_back(where +
                ": either every member is an adapter of the one served model (adapter: ...) or "
                "every member is a server of its own (path: ...); mixing them is not supported");
  }
  if (!mm.models.empty() && mm.workflow == "calc_duo" && mm.models.size() != 2) {
    p.push_back(
        fmt::format("{}: calc_duo needs exactly two models (the caller, then the answerer), got {}",
                    where, mm.models.size()));
  }
  if (problems == nullptr && !local.empty()) invalid_argument(local.front());
  return out;
}

namespace {
void check_multi_model(const MultiModelConfig& mm, std::vector<std::string>& problems) {
  multi_model_members(mm, &problems);
}
}  // namespace

void validate(const Config& config, std::string_view source) {
  Config copy = config;  // config_fields needs mutable targets; the copy is never written
  std::vector<std::string> problems;
  check_bounds(config_fields(copy), problems);
  check_cocktail(config.task_reader.cocktail, problems);
  check_multi_model(config.multi_model, problems);
  const auto& r = config.rollout;
  const auto& d = config.data;
  auto relation = [&](bool ok, std::string message) {
    if (!ok) problems.push_back(std::move(message));
  };
  relation(!config.model.path.empty(),
           "ajet.model.path is required (a model directory in Hugging Face layout)");
  relation(valid_device_name(config.engine.device),
           "ajet.engine.device must be cpu, cuda, cuda:N (N a GPU index, 0-999) or auto, got '" +
               config.engine.device + "'");
  relation(r.max_response_length_in_one_turn <= r.max_model_len,
           fmt::format("ajet.rollout.max_response_length_in_one_turn ({}) must be <= "
                       "ajet.rollout.max_model_len ({})",
                       r.max_response_length_in_one_turn, r.max_model_len));
  relation(r.max_response_length_in_one_turn <= d.max_response_length,
           fmt::format("ajet.rollout.max_response_length_in_one_turn ({}) must be <= "
                       "ajet.data.max_response_length "
                       "({})",
                       r.max_response_length_in_one_turn, d.max_response_length));
  relation(d.max_prompt_length + d.max_response_length <= r.max_model_len,
           fmt::format(
               "ajet.data.max_prompt_length + ajet.data.max_response_length ({} + {}) must be <= "
               "ajet.rollout.max_model_len ({})",
               d.max_prompt_length, d.max_response_length, r.max_model_len));
  for (const auto& [model, agent] : config.context_tracker.model_agents.items()) {
    relation(agent.is_string() && !agent.get<std::string>().empty(),
             fmt::format("ajet.context_tracker.model_agents.{} must be an agent name (a non-empty "
                         "string), got {}",
                         model, agent.dump()));
  }
  const auto& betas = config.trainer_common.optim.betas;
  relation(betas.size() == 2 && betas[0] >= 0 && betas[0] < 1 && betas[1] >= 0 && betas[1] < 1,
           "ajet.trainer_common.optim.betas must be two numbers in [0, 1)");
  relation(config.rollout.top_k != 0 && config.rollout.val_kwargs.top_k != 0,
           "ajet.rollout.top_k and ajet.rollout.val_kwargs.top_k must be -1 (off) or >= 1, got 0");
  relation(config.task_reader.type != "jsonl_dataset_file" ||
               !config.task_reader.jsonl_dataset_file.training_file_path.empty(),
           "ajet.task_reader.type is jsonl_dataset_file but "
           "ajet.task_reader.jsonl_dataset_file.training.file_path is empty");
  relation(
      config.task_judge.judge_type != "builtin" || config.task_judge.judge_protocol.has_value(),
      "ajet.task_judge.judge_type is builtin but ajet.task_judge.judge_protocol is not set");
  const auto& tc = config.trainer_common;
  relation(!tc.use_kl_loss || is_kl_loss_type(tc.kl_loss_type),
           "ajet.trainer_common.kl_loss_type must be one of [" + kl_loss_types_text() +
               "] when use_kl_loss is true, got '" + tc.kl_loss_type + "'");
  for (const std::string& logger : tc.logger) {
    if (listed(kLoggers, logger) || listed(kUnavailableLoggers, logger)) continue;
    const std::string near = closest_name(logger, kLoggers);
    problems.push_back(fmt::format("ajet.trainer_common.logger: unknown logger '{}' (known: {}{})",
                                   logger, fmt::join(kLoggers, ", "),
                                   near.empty() ? "" : "; did you mean '" + near + "'?"));
  }
  relation(config.lora.lora_rank == 0 || config.lora.lora_alpha > 0,
           "ajet.lora.lora_alpha must be > 0 when ajet.lora.lora_rank > 0");
  relation(config.lora.lora_rank == 0 || !config.lora.target_modules.empty(),
           "ajet.lora.target_modules must not be empty when ajet.lora.lora_rank > 0");
  const auto& md = config.rollout.madness;
  relation(
      md.repeat_tokens == 0 || md.repeat_tokens > md.max_period,
      fmt::format("ajet.rollout.madness.repeat_tokens ({}) must exceed max_period ({}): a loop "
                  "is only seen once it has repeated",
                  md.repeat_tokens, md.max_period));
  relation(md.entropy_window != 1, "ajet.rollout.madness.entropy_window must be 0 (off) or >= 2");
  const auto& dist = config.distillation;
  relation(!dist.enabled() || dist.estimator != "topk_forward_kl" ||
               (dist.mode == "loss" && dist.top_k > 0),
           "ajet.distillation.estimator topk_forward_kl needs mode: loss and top_k >= 1");
  relation(!dist.enabled() || dist.base_url.rfind("http://", 0) == 0,
           "ajet.distillation.base_url must be an http:// URL (the teacher's /v1 root), got '" +
               dist.base_url + "'");
  if (problems.empty()) return;
  std::string message = std::string(source) + ": invalid config:";
  for (const auto& p : problems) message += "\n  - " + p;
  invalid_argument(message);
}

Json to_json(const Config& config) {
  Config copy = config;
  Json out = Json::object();
  for (const Field& f : config_fields(copy)) out[pointer_of(f.key)] = field_value(f.target);
  return out;
}

std::string to_yaml(const Config& config) {
  YAML::Emitter out;
  emit_json(out, to_json(config));
  return std::string(out.c_str()) + "\n";
}

void resolve_auto_names(Config& config, std::string_view yaml_path,
                        std::chrono::system_clock::time_point now,
                        const std::filesystem::path& exp_base_dir) {
  if (config.experiment_name == "read_yaml_name") {
    std::time_t t = std::chrono::system_clock::to_time_t(now);
    std::tm tm{};
    gmtime_r(&t, &tm);
    char stamp[32];
    std::strftime(stamp, sizeof stamp, "%Y%m%d_%H%M", &tm);
    std::string stem = std::filesystem::path(yaml_path).stem().string();
    config.experiment_name = (stem.empty() ? std::string("experiment") : stem) + "_" + stamp;
  }
  if (config.experiment_dir == "auto")
    config.experiment_dir = (exp_base_dir / config.experiment_name).string();
}

}  // namespace ajet::config
