#include "swarm/server_context.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <chrono>
#include <ctime>

#include "common/encoding.h"
#include "common/error.h"
#include "common/fs.h"
#include "config/load.h"
#include "engine_control/batch_runner.h"
#include "engine_control/supervisor.h"
#include "episodes/registry.h"
#include "episodes/tracker_map.h"
#include "episodes/verbose_log.h"
#include "rpc/client.h"
#include "rpc/messages.h"
#include "store/store.h"
#include "train_data/options.h"

namespace ajet::swarm {

namespace fs = std::filesystem;

namespace {

constexpr const char* kStateSyncedCodeRoot = "synced_code_root";
// How each named adapter was made ([[name, POST /adapters body], ...]): a resumed front makes them
// again on its engine.
constexpr const char* kStateAdapterSpecs = "adapter_specs";
constexpr const char* kStateEngineRun = "engine_run";

std::string timestamp_micro() {
  auto now = std::chrono::system_clock::now();
  std::time_t t = std::chrono::system_clock::to_time_t(now);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char stamp[32];
  std::strftime(stamp, sizeof stamp, "%Y%m%d_%H%M%S", &tm);
  auto micros =
      std::chrono::duration_cast<std::chrono::microseconds>(now.time_since_epoch()).count() %
      1000000;
  return fmt::format("{}_{:06d}", stamp, micros);
}

// A model path that is no directory on this machine fails only at start_engine; say so at sync
// time. An "org/name" path is a Hugging Face hub id (upstream's default Qwen/Qwen2.5-7B-Instruct),
// which this server cannot download.
std::string model_path_note(const std::string& path) {
  std::error_code ec;
  if (path.empty() || fs::is_directory(path, ec)) return "";
  const bool hub_id = path.find('/') != std::string::npos && path.front() != '/' &&
                      path.front() != '.' && path.find('/') == path.rfind('/');
  if (hub_id) {
    return "ajet.model.path '" + path +
           "' looks like a Hugging Face hub id: this server loads a model only from a "
           "local directory in Hugging Face layout (config.json, tokenizer.json, *.safetensors) "
           "and cannot download "
           "one; copy the model to this machine and give its path before start_engine";
  }
  return "ajet.model.path '" + path +
         "' is not a directory on this machine; start_engine will fail until it is";
}

}  // namespace

TrainState SyncedTrain::get() const {
  std::lock_guard<std::mutex> lock(mu_);
  return state_;
}

engine_control::TrainSettings SyncedTrain::settings() const {
  std::lock_guard<std::mutex> lock(mu_);
  engine_control::TrainSettings s;
  if (!state_.config) return s;
  s.save_freq = state_.config->trainer_common.save_freq;
  fs::path dir = state_.config->trainer_common.checkpoint_base_dir;
  if (dir.is_relative() && !state_.experiment_dir.empty()) dir = state_.experiment_dir / dir;
  s.checkpoint_dir = dir;
  // The engine derives its advantage settings from the same config; the split must agree with them.
  // A config the trainer refuses never gets an engine running; its batches fail there, not here.
  try {
    s.advantage = train_data::TrainerOptions::from_config(*state_.config).advantage;
  } catch (const Error&) {
  }
  const config::Config& c = *state_.config;
  const config::MadnessConfig& md = c.rollout.madness;
  s.madness.action = md.action == "drop"   ? engine_control::MadnessAction::kDrop
                     : md.action == "keep" ? engine_control::MadnessAction::kKeep
                                           : engine_control::MadnessAction::kPenalize;
  s.madness.reward = c.rollout.agent_madness_reward;
  s.madness_detection =
      md.repeat_tokens > 0 || md.entropy_window > 0 || md.garbage_run > 0 || md.switch_run > 0;
  s.per_role_advantages = c.trainer_common.algorithm.per_role_advantages;
  s.deterministic = c.deterministic != "false";
  if (c.trainer_common.record_rollouts && !state_.experiment_dir.empty()) {
    s.record_dir = state_.experiment_dir / "rollouts";
    s.record_header = Json{{"format", "ajet rollout record 1"},
                           {"model_path", fs::absolute(c.model.path).lexically_normal().string()},
                           {"config_yaml", config::to_yaml(c)}};
  }
  if (c.distillation.enabled()) {
    const config::DistillationConfig& d = c.distillation;
    engine_control::TeacherOptions t;
    t.base_url = d.base_url;
    t.api_key = d.api_key;
    t.model = d.model;
    t.timeout_s = d.timeout;
    t.concurrency = int(d.concurrency);
    t.top_k = int(d.top_k);
    s.teacher = std::move(t);
  }
  return s;
}

std::shared_ptr<const episodes::ModelContext> SyncedTrain::model() const {
  std::lock_guard<std::mutex> lock(mu_);
  return state_.model;
}

void SyncedTrain::update(const std::function<void(TrainState&)>& change) {
  std::lock_guard<std::mutex> lock(mu_);
  change(state_);
}

ServerContext::ServerContext(const FrontOptions& options_in, std::string base_url_in,
                             store::Store& store_in, episodes::Registry& registry_in,
                             episodes::VerboseLog& verbose_in, WorkPool& pool_in,
                             engine_control::EngineSupervisor& supervisor_in,
                             episodes::TrackerMap& trackers_in, openai::LatestCall& latest_in,
                             SyncedTrain& synced_in, engine_control::BatchRunner& batches_in)
    : options(options_in),
      store(store_in),
      registry(registry_in),
      verbose(verbose_in),
      pool(pool_in),
      supervisor(supervisor_in),
      trackers(trackers_in),
      latest(latest_in),
      synced(synced_in),
      batches(batches_in),
      base_url(std::move(base_url_in)),
      router(options_in.route) {
  supervisor.set_before_ready([this](rpc::Client& engine) { return restore_adapters(engine); });
}

episodes::RegistryOptions registry_options_for(const FrontOptions& front,
                                               const config::Config* config, std::string base_url) {
  episodes::RegistryOptions o =
      config != nullptr ? episodes::RegistryOptions::from_config(*config, std::move(base_url))
                        : episodes::RegistryOptions{};
  o.max_claims_per_client = front.max_claims_per_client;
  o.max_discard_episode_timeout = front.max_discard_episode_timeout_s;
  o.resolve_backoff_min = std::max(front.janitor_interval_s, 0.01);
  o.resolve_give_up = front.group_resolve_give_up_s;
  return o;
}

bool ServerContext::admin_token_given(const http::RequestHead& request) const {
  return !options.admin_token.empty() && admin_ok(request);
}

bool ServerContext::is_peer(const std::string& coordinator_url) const {
  return std::find(options.peers.begin(), options.peers.end(), coordinator_url) !=
         options.peers.end();
}

bool ServerContext::inference_key_ok(std::optional<std::string_view> key) const {
  if (options.inference_key.empty() || !key) return false;
  std::string_view k = *key;
  if (k.size() >= 7 && http::iequals(k.substr(0, 7), "Bearer ")) k.remove_prefix(7);
  while (!k.empty() && k.front() == ' ') k.remove_prefix(1);
  return constant_time_equal(k, options.inference_key);
}

bool ServerContext::admin_ok(const http::RequestHead& request) const {
  if (options.admin_token.empty()) return true;
  std::string_view auth = request.headers.get("Authorization").value_or("");
  if (auth.size() < 7 || !http::iequals(auth.substr(0, 7), "Bearer ")) return false;
  auth.remove_prefix(7);
  while (!auth.empty() && auth.front() == ' ') auth.remove_prefix(1);
  return constant_time_equal(auth, options.admin_token);
}

void ServerContext::require_offline(const char* what) const {
  episodes::EnginePhase status = registry.engine_status();
  if (status != episodes::EnginePhase::kOffline) {
    fail(ErrorCode::kFailedPrecondition,
         fmt::format("{} is only allowed in ENGINE.OFFLINE (current status: [{}]). Call "
                     "`stop_engine` first.",
                     what, episodes::engine_phase_name(status)));
  }
}

void ServerContext::check_teacher_allowed(const config::Config& config) const {
  swarm::check_teacher_allowed(options.teacher_urls, config);
}

void check_teacher_allowed(const std::vector<std::string>& teacher_urls,
                           const config::Config& config) {
  const std::string& url = config.distillation.base_url;
  if (url.empty()) return;
  auto bare = [](std::string u) {
    while (!u.empty() && u.back() == '/') u.pop_back();
    return u;
  };
  for (const std::string& allowed : teacher_urls) {
    if (bare(allowed) == bare(url)) return;
  }
  fail(ErrorCode::kInvalidArgument,
       fmt::format("ajet.distillation.base_url {} is not a teacher this front may dial: start it "
                   "with --teacher-url {} (the operator names the addresses a front connects to)",
                   url, bare(url)));
}

std::vector<std::string> ServerContext::sync_train_config(const std::string& yaml,
                                                          const std::string& source) {
  std::lock_guard<std::mutex> lifecycle(lifecycle_mu_);
  require_offline("sync_train_config");
  config::LoadedConfig loaded =
      config::parse_config(yaml, source.empty() ? "sync_train_config yaml_as_string" : source,
                           config::ConfigUse::kSwarmServer);
  if (std::string note = model_path_note(loaded.config.model.path); !note.empty())
    loaded.warnings.push_back(note);
  check_teacher_allowed(loaded.config);
  (void)episodes::RegistryOptions::from_config(loaded.config,
                                               base_url);  // backbone and batch trigger names
  store.put_state(store::kStateTrainConfigYaml, yaml).get();
  synced.update([&](TrainState& t) {
    t.yaml = yaml;
    t.config = loaded.config;
    t.warnings = loaded.warnings;
  });
  verbose.add(
      "swarm",
      fmt::format("train config synced: model {}, backbone {}, {}{}", loaded.config.model.path,
                  loaded.config.backbone, loaded.config.swarm_mode_sample_collection_method,
                  loaded.warnings.empty()
                      ? ""
                      : "; warnings: " + fmt::format("{}", fmt::join(loaded.warnings, "; "))));
  return loaded.warnings;
}

engine_control::UnpackedTree ServerContext::sync_train_code(std::string_view archive) {
  std::lock_guard<std::mutex> lifecycle(lifecycle_mu_);
  require_offline("sync_train_code");
  const fs::path dest = options.server_dir / "synced_code" / timestamp_micro();
  engine_control::UnpackedTree tree =
      engine_control::unpack_source_zip(archive, dest, options.archive_limits);
  store.put_state(kStateSyncedCodeRoot, tree.root.string()).get();
  synced.update([&](TrainState& t) {
    t.code_root = tree.root;
    t.code_build = dest / "build";
  });
  verbose.add(
      "swarm",
      fmt::format(
          "synced code: {} files ({} bytes) unpacked into {}; the next start_engine builds it",
          tree.files, tree.bytes, tree.root.string()));
  return tree;
}

int64_t ServerContext::start_engine(const std::string& reason, bool from_checkpoint) {
  std::lock_guard<std::mutex> lifecycle(lifecycle_mu_);
  return start_engine_locked(reason, nullptr, from_checkpoint);
}

int64_t ServerContext::start_engine_locked(const std::string& reason,
                                           const store::RecoveredState* resumed,
                                           bool from_checkpoint) {
  TrainState t = train();
  if (!t.config) {
    fail(ErrorCode::kFailedPrecondition,
         "No train config has been synced: call sync_train_config first.");
  }
  require_offline("start_engine");
  config::Config cfg = *t.config;
  std::shared_ptr<const episodes::ModelContext> model = episodes::ModelContext::load(cfg);
  config::resolve_auto_names(cfg, "swarm", std::chrono::system_clock::now(),
                             options.server_dir / "experiments");
  const fs::path run_dir = fs::absolute(cfg.experiment_dir);
  fs::create_directories(run_dir);
  // The engine gets the config as this server read it (every key known, the unused sections at
  // their defaults, the auto names resolved), not the client's text: an upstream YAML's task reader
  // or judge would be errors to a reader that uses them.
  write_file_atomic(run_dir / "train_config.yaml", config::to_yaml(cfg));
  registry.configure(registry_options_for(options, &cfg, base_url));
  // A front restarted with its store resumes the same run: the engine keeps its name.
  std::string engine_run = resumed != nullptr ? store.get_state(kStateEngineRun).value_or("") : "";
  if (engine_run.empty()) {
    engine_run = new_uuid_hex();
    store.put_state(kStateEngineRun, engine_run).get();
  }
  synced.update([&](TrainState& t) {
    t.model = model;
    t.experiment_dir = run_dir;
    t.engine_run = engine_run;
  });
  trackers.clear();
  if (resumed != nullptr) {
    for (const auto& claimed : resumed->claimed) {
      try {
        std::shared_ptr<tracking::EpisodeTracker> tracker =
            tracking::EpisodeTracker::restore(claimed.episode.uuid, *model->format, claimed.calls);
        trackers.put(claimed.episode.uuid, episodes::TrackedEpisode{model, std::move(tracker)});
      } catch (const std::exception& e) {
        verbose.add(
            "swarm",
            fmt::format(
                "episode {}: its stored calls could not be restored ({}); later calls start "
                "a new history",
                claimed.episode.uuid, e.what()));
      }
    }
  }
  // A crashed engine, a restarted front and start_engine {"from_checkpoint": true} continue from
  // the newest checkpoint; a fresh start_engine starts from ajet.model.path.
  fs::path checkpoint;
  if (resumed != nullptr || from_checkpoint) {
    if (auto stored = store.get_state(store::kStateLatestCheckpoint);
        stored && fs::is_directory(*stored)) {
      checkpoint = *stored;
    } else if (from_checkpoint) {
      verbose.add(
          "swarm",
          "start_engine: from_checkpoint, but no checkpoint is stored; the engine loads the model");
    }
  } else {
    store.put_state(store::kStateLatestCheckpoint, "");
  }
  supervisor.set_latest_checkpoint(checkpoint);
  registry.start_booting(reason, resumed != nullptr || from_checkpoint);
  engine_control::EngineLaunch launch{cfg, run_dir / "train_config.yaml", t.code_root, t.code_build,
                                      run_dir};
  int64_t pid = 0;
  try {
    pid = supervisor.start(std::move(launch));
  } catch (const std::exception& e) {
    registry.stop(std::string("the engine could not be started: ") + e.what());
    throw;
  }
  batches.notify();
  verbose.add(
      "swarm",
      fmt::format(
          "start_engine: {} (engine pid {}; experiment dir {}; {})", reason,
          pid > 0 ? std::to_string(pid) : std::string("pending build"), run_dir.string(),
          checkpoint.empty() ? "from the model" : "from checkpoint " + checkpoint.string()));
  return pid;
}

std::string ServerContext::running_engine_run() const {
  return registry.engine_status() == episodes::EnginePhase::kOffline ? std::string()
                                                                     : train().engine_run;
}

bool ServerContext::engine_replaced(const std::string& engine_run) const {
  const std::string running = running_engine_run();
  return !engine_run.empty() && !running.empty() && running != engine_run;
}

void ServerContext::stop_engine(const std::string& reason, const std::string& engine_run) {
  std::lock_guard<std::mutex> lifecycle(lifecycle_mu_);
  if (engine_replaced(engine_run)) {
    fail(ErrorCode::kFailedPrecondition,
         fmt::format("stop_engine: the engine running ({}) is engine_run {}, not {}: another "
                     "start_engine replaced that "
                     "one since; left running",
                     episodes::engine_phase_name(registry.engine_status()), running_engine_run(),
                     engine_run));
  }
  try {
    batches.save_checkpoint("stop_engine");  // steps trained since the last checkpoint are kept
  } catch (const std::exception& e) {
    verbose.add("swarm", std::string("stop_engine: the final checkpoint failed: ") + e.what());
  }
  std::vector<std::string> dropped = registry.stop(reason);
  supervisor.stop();
  trackers.clear();
  {
    std::lock_guard lock(adapters_mu_);
    adapter_specs_.clear();
    adapter_names_.clear();
    persist_adapter_specs_locked();
  }
  verbose.add("swarm",
              fmt::format("stop_engine: {} ({} running episodes dropped)", reason, dropped.size()));
}

void ServerContext::resume(const store::RecoveredState& recovered) {
  std::lock_guard<std::mutex> lifecycle(lifecycle_mu_);
  if (auto specs = store.get_state(kStateAdapterSpecs)) {
    // Written by this front: a broken value only loses the adapters, which is said.
    std::optional<Json> parsed = try_parse_json(*specs);
    std::lock_guard lock(adapters_mu_);
    adapter_specs_.clear();
    if (parsed && parsed->is_array()) {
      for (const Json& spec : *parsed) {
        if (spec.is_array() && spec.size() == 2 && spec[0].is_string() && spec[1].is_object())
          adapter_specs_.emplace_back(spec[0].get<std::string>(), spec[1]);
      }
    } else {
      verbose.add("swarm", "the store's adapter list is unreadable: adapters are not made again");
    }
  }
  if (auto root = store.get_state(kStateSyncedCodeRoot); root && fs::is_directory(*root)) {
    fs::path dest = fs::path(*root).parent_path();
    if (dest.filename() == "tree") dest = dest.parent_path();
    synced.update([&](TrainState& t) {
      t.code_root = *root;
      t.code_build = dest / "build";
    });
  }
  if (!recovered.train_config_yaml.empty()) {
    try {
      config::LoadedConfig loaded = config::parse_config(
          recovered.train_config_yaml, "stored train config", config::ConfigUse::kSwarmServer);
      registry.configure(registry_options_for(options, &loaded.config, base_url));
      synced.update([&](TrainState& t) {
        t.yaml = recovered.train_config_yaml;
        t.config = loaded.config;
        t.warnings = loaded.warnings;
      });
    } catch (const std::exception& e) {
      verbose.add("swarm",
                  std::string("the stored train config does not load any more: ") + e.what());
    }
  }
  registry.restore(recovered);
  const bool was_running =
      !recovered.engine_status.empty() &&
      recovered.engine_status != episodes::engine_phase_name(episodes::EnginePhase::kOffline);
  if (!was_running) return;
  if (!train().config) {
    verbose.add(
        "swarm",
        "the engine was running before the restart, but no train config is stored; stay OFFLINE");
    return;
  }
  try {
    start_engine_locked(
        fmt::format("resuming after a restart of the front ({} claimed episodes kept)",
                    recovered.claimed.size()),
        &recovered);
  } catch (const std::exception& e) {
    std::string detail =
        std::string("could not restart the engine after a restart of the front: ") + e.what();
    verbose.add("swarm", detail);
    registry.stop(detail);  // restored episodes cannot continue without an engine
  }
}

std::vector<std::string> ServerContext::adapter_names() const {
  std::lock_guard lock(adapters_mu_);
  return adapter_names_;
}

void ServerContext::set_adapter_names(std::vector<std::string> names) {
  std::lock_guard lock(adapters_mu_);
  adapter_names_ = std::move(names);
}

std::string ServerContext::adapter_of_model(const std::string& model_field,
                                            const std::string& served_name) const {
  if (model_field.empty()) return "";
  const size_t colon = model_field.rfind(':');
  if (colon != std::string::npos && model_field.compare(0, colon, served_name) == 0 &&
      colon == served_name.size()) {
    std::string adapter = model_field.substr(colon + 1);
    if (std::string why = rpc::adapter_name_problem(adapter); !why.empty()) {
      invalid_argument("request body: field 'model' = '" + model_field + "': the adapter name " +
                       why);
    }
    std::lock_guard lock(adapters_mu_);
    if (std::find(adapter_names_.begin(), adapter_names_.end(), adapter) == adapter_names_.end()) {
      std::string served;
      for (const std::string& name : adapter_names_) served += (served.empty() ? "" : ", ") + name;
      fail(ErrorCode::kNotFound,
           "request body: field 'model' = '" + model_field + "': no adapter '" + adapter +
               "' (served: " + (served.empty() ? "none" : served) + "; GET /adapters)");
    }
    return adapter;
  }
  std::lock_guard lock(adapters_mu_);
  for (const std::string& name : adapter_names_) {
    if (name == model_field) return name;
  }
  return "";
}

void ServerContext::remember_adapter(const std::string& name, Json create_body) {
  std::lock_guard lock(adapters_mu_);
  for (auto& [n, body] : adapter_specs_) {
    if (n == name) {
      body = std::move(create_body);
      persist_adapter_specs_locked();
      return;
    }
  }
  adapter_specs_.emplace_back(name, std::move(create_body));
  persist_adapter_specs_locked();
}

void ServerContext::persist_adapter_specs_locked() {
  Json specs = Json::array();
  for (const auto& [name, body] : adapter_specs_) specs.push_back(Json::array({name, body}));
  store.put_state(kStateAdapterSpecs, specs.dump());
}

void ServerContext::forget_adapter(const std::string& name) {
  std::lock_guard lock(adapters_mu_);
  std::erase_if(adapter_specs_, [&](const auto& spec) { return spec.first == name; });
  persist_adapter_specs_locked();
}

bool ServerContext::restore_adapters(rpc::Client& engine) {
  std::vector<std::pair<std::string, Json>> specs;
  {
    std::lock_guard lock(adapters_mu_);
    specs = adapter_specs_;
  }
  if (specs.empty()) return false;
  // The newest adapters checkpoint (save_freq) holding each adapter.
  const fs::path dir = synced.settings().checkpoint_dir;
  std::vector<std::pair<int64_t, fs::path>> saved;
  std::error_code ec;
  if (!dir.empty() && fs::is_directory(dir, ec)) {
    for (const auto& entry : fs::directory_iterator(dir, ec)) {
      const std::string name = entry.path().filename().string();
      if (name.rfind("adapters_step_", 0) != 0) continue;
      try {
        saved.emplace_back(std::stoll(name.substr(14)), entry.path());
      } catch (const std::exception&) {
      }
    }
  }
  std::sort(saved.rbegin(), saved.rend());
  std::vector<std::string> names;
  for (const auto& [name, body] : specs) {
    Json create = body;
    for (const auto& [step, path] : saved) {
      if (fs::exists(path / name / "adapter_config.json", ec)) {
        create = Json{{"name", name}, {"path", (path / name).string()}};
        if (body.contains("seed")) create["seed"] = body["seed"];
        break;
      }
    }
    rpc::Frame request;
    request.method = std::string(rpc::kMethodAdapterCreate);
    request.body = create;
    try {
      engine.call(std::move(request), std::chrono::minutes(10));
      names.push_back(name);
      verbose.add("engine", fmt::format("adapter '{}' served again ({})", name,
                                        create.value("path", std::string("as first made"))));
    } catch (const std::exception& e) {
      verbose.add("engine", fmt::format("adapter '{}' not served again: {}", name, e.what()));
    }
  }
  set_adapter_names(std::move(names));
  return true;
}

}  // namespace ajet::swarm
