#include "multi_model/launcher.h"

#include <fmt/format.h>

#include <chrono>
#include <thread>

#include "classic/dashboard_snapshot.h"
#include "classic/experiment_dir.h"
#include "classic/front_session.h"
#include "classic/http_chat_model.h"
#include "classic/metrics.h"
#include "classic/run_loop.h"
#include "client/multi_episode.h"
#include "common/clock.h"
#include "common/error.h"
#include "common/fs.h"
#include "common/log.h"
#include "config/backbone.h"
#include "config/load.h"
#include "multi_model/duo.h"
#include "tasks/reader.h"

namespace ajet::multi_model {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

std::optional<MultiModelSpec> read_multi_model_spec(const fs::path& conf) {
  std::error_code ec;
  if (!fs::is_regular_file(conf, ec)) return std::nullopt;  // classic mode names the missing file
  const config::LoadedConfig loaded = config::load_config_file(conf);
  const config::MultiModelConfig& mm = loaded.config.multi_model;
  if (!mm.enabled()) return std::nullopt;
  MultiModelSpec spec;
  spec.workflow = mm.workflow;
  try {
    for (config::MultiModelMember& m : config::multi_model_members(mm))
      spec.models.push_back({m.name, m.path, m.adapter});
  } catch (const Error& e) {
    throw Error(e.code(), conf.string() + ": " + e.what());
  }
  return spec;
}

namespace {

// One model: its config, its front session (a local `ajet-swarm` child) and what the launcher has
// read.
struct Member {
  ModelSpec spec;
  classic::LaunchOptions options;  // the run's, with this model's path and, past the first, --peer
  classic::PreparedConfig prepared;
  std::unique_ptr<classic::FrontSession> front;
  int64_t last_batch_id = 0;  // the newest batch of its front whose outcome the launcher has read
};

struct PlayedEpisode {
  DuoOutcome outcome;
  bool ended = false;  // the group was committed on every server (train) or played (eval)
  std::string error;
};

double share(const std::vector<PlayedEpisode>& played, bool (*pick)(const PlayedEpisode&)) {
  int64_t n = 0, yes = 0;
  for (const auto& p : played) {
    if (!p.ended) continue;
    ++n;
    yes += pick(p) ? 1 : 0;
  }
  return n > 0 ? double(yes) / double(n) : 0.0;
}

bool pair_ok(const PlayedEpisode& p) { return p.outcome.pair_success; }

// Role i's workflow output of a played pair (0: the caller, 1: the answerer).
const client::WorkflowOutput& output_of(const PlayedEpisode& p, size_t role) {
  return role == 0 ? p.outcome.caller : p.outcome.answerer;
}
bool caller_ok(const PlayedEpisode& p) { return p.outcome.caller_right; }

Json model_stats(const Json& stats) {
  if (stats.contains("trained")) return stats;  // refused: {"trained": false, "error"}
  Json out = Json::object();
  for (const char* key : {"loss", "pg_loss", "kl", "entropy", "grad_norm", "clip_fraction", "lr"}) {
    if (stats.contains(key) && stats[key].is_number()) out[key] = stats[key];
  }
  const Json rollout = stats.value("rollout", Json::object());
  for (const char* key : {"reward_mean", "success_rate", "episodes"}) {
    if (rollout.contains(key) && !rollout[key].is_null()) out[key] = rollout[key];
  }
  return out;
}

class MultiJob : public classic::StepPipeline {
 public:
  MultiJob(const classic::LaunchOptions& options, const MultiModelSpec& spec,
           const std::atomic<bool>& stop, const std::function<void(const std::string&)>& out)
      : options_(options), spec_(spec), stop_(stop), out_(out) {}

  classic::RunResult run();
  void run_step(int64_t step) override;

 private:
  void say(const std::string& line) { out_(line); }
  // Every model a LoRA adapter of the one model a single front and engine serve.
  bool on_adapters() const {
    return !spec_.models.empty() && !spec_.models.front().adapter.is_null();
  }
  // The front that serves role i.
  Member& member_of(size_t role) { return members_.at(on_adapters() ? 0 : role); }
  void make_adapters();
  Json adapter_stats(const Json& stats, size_t role,
                     const std::vector<PlayedEpisode>& played) const;
  void save_adapters();
  const config::Config& config() const { return members_.front().prepared.config; }
  void prepare();
  void prepare_member(const ModelSpec& m);
  void start_servers();
  std::vector<PlayedEpisode> play(const std::vector<const tasks::Task*>& tasks,
                                  const std::string& type, const Json& sampling);
  PlayedEpisode play_one(const tasks::Task& task, const std::string& type, const Json& sampling);
  void fail_on_lost_episodes(int64_t step, const std::vector<PlayedEpisode>& played) const;
  void validate(int64_t step);
  Json trained_stats(Member& m);
  void record(Json r);
  void finish();
  void stop_engine_of(Member& m);
  void shut_down();

  const classic::LaunchOptions& options_;
  const MultiModelSpec& spec_;
  const std::atomic<bool>& stop_;
  const std::function<void(const std::string&)>& out_;
  std::vector<Member> members_;
  fs::path exp_dir_;
  tasks::TaskSets tasks_;
  std::unique_ptr<tasks::TaskStream> stream_;
  std::unique_ptr<classic::ExperimentLock> lock_;
  std::unique_ptr<classic::RunLoop> loop_;
  classic::RunResult result_;
  int64_t total_steps_ = 0;
  Clock::time_point t0_ = Clock::now();
};

// Every model gets the shared config with its own model path and experiment subdirectory.
void MultiJob::prepare_member(const ModelSpec& m) {
  Member member{m, options_, {}, nullptr, 0};
  if (!m.path.empty()) {
    const fs::path path =
        m.path.is_absolute() ? m.path : fs::absolute(options_.conf).parent_path() / m.path;
    member.options.overrides.push_back("ajet.model.path=" + path.lexically_normal().string());
  }
  member.prepared = classic::prepare_config(member.options);
  config::Config& c = member.prepared.config;
  if (member.prepared.dynamic_sampling) {
    invalid_argument(
        options_.conf.string() +
        ": ajet.swarm_mode_sample_collection_method "
        "rollout_until_finish_enough_non_dummy_tasks (dynamic sampling) is not supported with "
        "ajet.multi_model; use rollout_until_finish_enough_tasks");
  }
  if (exp_dir_.empty()) exp_dir_ = member.prepared.exp_dir;
  member.prepared.exp_dir = exp_dir_ / m.name;
  c.experiment_dir = member.prepared.exp_dir.string();
  c.trainer_common.checkpoint_base_dir = (member.prepared.exp_dir / "checkpoints").string();
  c.multi_model = config::MultiModelConfig{};  // each front serves one model
  config::Config served = c;
  if (on_adapters()) {
    // One front for every adapter: a step's batch holds each adapter's tasks ("<task>@<name>").
    served.data.train_batch_size = c.data.train_batch_size * int64_t(spec_.models.size());
  }
  member.prepared.yaml = config::to_yaml(served);
  for (const auto& w : member.prepared.warnings) say("warning (" + m.name + "): " + w);
  members_.push_back(std::move(member));
}

void MultiJob::prepare() {
  if (on_adapters()) {
    prepare_member(ModelSpec{"engine", "", Json()});  // ajet.model.path, one adapter per model
  } else {
    for (const ModelSpec& m : spec_.models) prepare_member(m);
  }
  const config::Config& c = config();
  tasks_ = tasks::load_tasks(c.task_reader, members_.front().prepared.config_dir);
  if (int64_t(tasks_.training.size()) < c.data.train_batch_size) {
    invalid_argument(options_.conf.string() +
                     ": fewer training tasks than ajet.data.train_batch_size");
  }
  stream_ = std::make_unique<tasks::TaskStream>(tasks_.training, c.task_reader.shuffle,
                                                uint64_t(c.task_reader.shuffle_seed));
  const int64_t per_epoch =
      (int64_t(tasks_.training.size()) + c.data.train_batch_size - 1) / c.data.train_batch_size;
  total_steps_ =
      c.trainer_common.total_training_steps.value_or(c.trainer_common.total_epochs * per_epoch);
}

void MultiJob::start_servers() {
  fs::create_directories(exp_dir_);
  lock_ = std::make_unique<classic::ExperimentLock>(exp_dir_);
  if (auto leftovers = classic::find_leftovers(exp_dir_); !leftovers.empty()) {
    classic::stop_leftovers(leftovers, std::chrono::seconds(15),
                            [this](const std::string& l) { say("ajet: " + l); });
  }
  if (const fs::path moved = classic::move_earlier_run_aside(exp_dir_); !moved.empty()) {
    say("ajet: the earlier run's files were moved to " + moved.string());
  }
  std::vector<std::pair<client::SwarmClient*, std::string>> boot;
  for (Member& m : members_) {
    // The first front coordinates every episode group, so the others may dial it (--peer).
    if (&m != &members_.front())
      m.options.swarm_flags.insert(m.options.swarm_flags.end(),
                                   {"--peer", members_.front().front->url()});
    if (on_adapters()) {
      say(fmt::format("ajet: one front and engine for {} adapters of {}", spec_.models.size(),
                      m.prepared.config.model.path));
    } else {
      say(fmt::format("ajet: model {} ({})", m.spec.name, m.prepared.config.model.path));
    }
    m.front = std::make_unique<classic::FrontSession>(m.options, m.prepared, out_);
    m.front->connect(false, [](int) {});
    boot.emplace_back(&m.front->client(), m.prepared.yaml);
  }
  client::SwarmClient::start_multi_engine(boot, false, 600.0);
  if (on_adapters()) make_adapters();
  for (Member& m : members_) {
    for (const client::BatchOutcome& b : m.front->client().get_engine_status().recent_batches) {
      m.last_batch_id = std::max(m.last_batch_id, b.batch_id);
    }
  }
}

// Each model becomes an adapter of the served model, made fresh (or loaded from adapter.path) once
// the engine runs.
void MultiJob::make_adapters() {
  client::SwarmClient& front = members_.front().front->client();
  for (const ModelSpec& m : spec_.models) {
    Json body = m.adapter.is_object() ? m.adapter : Json::object();
    body["name"] = m.name;
    if (body.contains("path")) {
      const fs::path p = body["path"].get<std::string>();
      body["path"] = (p.is_absolute() ? p : fs::absolute(options_.conf).parent_path() / p)
                         .lexically_normal()
                         .string();
    }
    const Json made = front.create_adapter(body);
    say(fmt::format("ajet: model {}: LoRA adapter rank {} alpha {} ({})", m.name,
                    made.value("rank", int64_t(0)), made.value("alpha", 0.0),
                    made.value("source", std::string())));
  }
}

PlayedEpisode MultiJob::play_one(const tasks::Task& task, const std::string& type,
                                 const Json& sampling) {
  std::vector<client::GroupMember> members;
  for (size_t i = 0; i < spec_.models.size(); ++i) {
    client::GroupMember m{&member_of(i).front->client(), {}};
    m.claim.episode_type = type;
    m.claim.discard_episode_timeout = 600;
    m.claim.max_wait = 600;
    if (on_adapters()) m.claim.adapter = spec_.models[i].name;
    members.push_back(std::move(m));
  }
  PlayedEpisode played;
  for (int attempt = 0; attempt < 3 && !stop_; ++attempt) {
    try {
      client::MultiEpisode group = client::MultiEpisode::begin_members(members);
      classic::HttpChatModel caller(group.episode(0).base_url, group.episode(0).api_key, sampling);
      classic::HttpChatModel answerer(group.episode(1).base_url, group.episode(1).api_key,
                                      sampling);
      played.outcome = run_calc_duo(task, caller, answerer);
      if (type == "eval") {
        group.abort();  // evaluation only: nothing is stored or trained
      } else {
        group.end(task.task_id, {played.outcome.caller, played.outcome.answerer});
      }
      played.ended = true;
      played.error.clear();
      return played;
    } catch (const std::exception& e) {
      played.error = e.what();  // WeightUpdatedHalfway too: redo the rollout on the new weights
    }
  }
  return played;
}

std::vector<PlayedEpisode> MultiJob::play(const std::vector<const tasks::Task*>& tasks,
                                          const std::string& type, const Json& sampling) {
  std::vector<PlayedEpisode> results(tasks.size());
  std::atomic<size_t> next{0};
  const size_t workers =
      std::max<size_t>(1, std::min<size_t>(size_t(config().rollout.max_env_worker), tasks.size()));
  std::vector<std::thread> threads;
  for (size_t w = 0; w < workers; ++w) {
    threads.emplace_back([&] {
      for (size_t i = next++; i < tasks.size() && !stop_; i = next++)
        results[i] = play_one(*tasks[i], type, sampling);
    });
  }
  for (auto& t : threads) t.join();
  return results;
}

// Waits for the front's outcome of this step's batch — the first batch newer than the last one seen
// — and returns its stats, or {"trained": false, "error"} when the trainer refused it (e.g. a batch
// of the answerer whose episodes never reached its turn: nothing to train on).
Json MultiJob::trained_stats(Member& m) {
  const auto deadline = Clock::now() + std::chrono::hours(1);
  while (!stop_) {
    const client::EngineStatus s = m.front->client().get_engine_status();
    for (const client::BatchOutcome& b : s.recent_batches) {
      if (b.batch_id <= m.last_batch_id) continue;
      m.last_batch_id = b.batch_id;
      if (b.trained) return b.stats.is_object() ? b.stats : Json::object();
      return Json{{"trained", false}, {"error", b.error}};
    }
    if (s.status == client::kOffline || s.status == client::kCannotConnect ||
        Clock::now() > deadline) {
      fail(ErrorCode::kUnavailable,
           fmt::format("model {}: the engine is {} while training a step: {}{}", m.spec.name,
                       s.status, s.detail, m.front->exit_lines()));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));  // polling an observable status
  }
  return Json::object();
}

// Role i's record of a step on adapters: its adapter's trainer metrics (the step reply's
// "adapters" entry) and its episodes' rewards, as a server's front reports them.
Json MultiJob::adapter_stats(const Json& stats, size_t role,
                             const std::vector<PlayedEpisode>& played) const {
  Json out = Json::object();
  if (stats.contains("trained")) {
    out = stats;  // refused: {"trained": false, "error"}
  } else {
    const Json own = stats.value("adapters", Json::object()).value(spec_.models[role].name, Json());
    for (const char* key :
         {"loss", "pg_loss", "kl", "entropy", "grad_norm", "clip_fraction", "lr"}) {
      if (own.is_object() && own.contains(key) && own[key].is_number()) out[key] = own[key];
    }
  }
  double reward = 0, success = 0;
  int64_t n = 0;
  for (const PlayedEpisode& p : played) {
    if (!p.ended) continue;
    ++n;
    reward += output_of(p, role).reward;
    success += output_of(p, role).is_success ? 1 : 0;
  }
  if (n > 0) {
    out["reward_mean"] = reward / double(n);
    out["success_rate"] = success / double(n);
  }
  out["episodes"] = n;
  return out;
}

void MultiJob::fail_on_lost_episodes(int64_t step, const std::vector<PlayedEpisode>& played) const {
  int64_t failed = 0;
  std::string why;
  for (const auto& p : played) {
    if (p.ended) continue;
    if (failed++ == 0) why = p.error;
  }
  if (failed > 0) {
    fail(ErrorCode::kUnavailable,
         fmt::format("step {}: {} episodes could not be ended on every model: {}", step, failed,
                     why));
  }
}

// One step: train_batch_size tasks × num_repeat pair episodes, then each model's batch trains.
void MultiJob::run_step(int64_t step) {
  const config::Config& c = config();
  const auto t0 = Clock::now();
  std::vector<tasks::Task> batch = stream_->next_batch(size_t(c.data.train_batch_size));
  std::vector<const tasks::Task*> jobs;
  for (const auto& t : batch) {
    for (int64_t r = 0; r < c.rollout.num_repeat; ++r) jobs.push_back(&t);
  }
  std::vector<PlayedEpisode> played = play(jobs, "train", Json::object());
  if (stop_) return;
  fail_on_lost_episodes(step, played);
  Json rec{{"kind", "train"},
           {"step", step},
           {"pair_success", share(played, pair_ok)},
           {"caller_right", share(played, caller_ok)},
           {"episodes", played.size()}};
  if (config::trains(config::backbone_of(c)) && on_adapters()) {
    const Json stats = trained_stats(members_.front());  // one batch trains every adapter
    for (size_t i = 0; i < spec_.models.size(); ++i)
      rec[spec_.models[i].name] = adapter_stats(stats, i, played);
  } else if (config::trains(config::backbone_of(c))) {
    for (Member& m : members_) rec[m.spec.name] = model_stats(trained_stats(m));
  }
  rec["step_seconds"] = seconds_since(t0);
  rec["elapsed_seconds"] = seconds_since(t0_);
  classic::StepProgress progress = loop_->progress();
  progress.step = step;
  std::string line = fmt::format("step {}  pair success {:.1f}%  caller right {:.1f}%",
                                 progress.label(), 100.0 * rec["pair_success"].get<double>(),
                                 100.0 * rec["caller_right"].get<double>());
  for (const ModelSpec& m : spec_.models) {
    const Json s = rec.value(m.name, Json::object());
    line += fmt::format("  | {} reward {:.3f} loss {:.4f}", m.name, s.value("reward_mean", 0.0),
                        s.value("loss", 0.0));
  }
  record(rec);
  result_.steps_done = step;
  say(line + fmt::format("  {:.1f} s", rec["step_seconds"].get<double>()));
}

void MultiJob::validate(int64_t step) {
  const config::Config& c = config();
  size_t n = tasks_.validation.size();
  if (const auto cap = c.trainer_common.val_max_num_task_each_validation; cap && *cap > 0)
    n = std::min(n, size_t(*cap));
  if (n == 0 || stop_) return;
  std::vector<const tasks::Task*> tasks;
  for (size_t i = 0; i < n; ++i) tasks.push_back(&tasks_.validation[i]);
  std::vector<PlayedEpisode> greedy = play(tasks, "eval", Json{{"temperature", 0.0}});
  std::vector<PlayedEpisode> sampled = play(tasks, "eval", Json{{"temperature", 1.0}});
  Json rec{{"kind", "validation"},
           {"step", step},
           {"tasks", n},
           {"greedy_success", share(greedy, pair_ok)},
           {"sampled_success", share(sampled, pair_ok)},
           {"greedy_caller_right", share(greedy, caller_ok)},
           {"sampled_caller_right", share(sampled, caller_ok)},
           {"elapsed_seconds", seconds_since(t0_)}};
  record(rec);
  // Each model's front gets the pair's validation (its store and its TensorBoard next to its own
  // curves).
  const Json metrics{{"val/greedy_success", rec["greedy_success"]},
                     {"val/sampled_success", rec["sampled_success"]},
                     {"val/greedy_caller_right", rec["greedy_caller_right"]},
                     {"val/sampled_caller_right", rec["sampled_caller_right"]},
                     {"val/tasks", n}};
  for (Member& m : members_) {
    try {
      m.front->client().log_metrics(step, metrics);
    } catch (const std::exception& e) {
      log().warn("multi-model: {}: the front did not take the validation metrics: {}", m.spec.name,
                 e.what());
    }
  }
  say(
      fmt::format("val @ step {}  pair greedy {:.1f}%  sampled {:.1f}%  caller right greedy "
                  "{:.1f}%  sampled {:.1f}%  "
                  "({} tasks)",
                  step, 100.0 * rec["greedy_success"].get<double>(),
                  100.0 * rec["sampled_success"].get<double>(),
                  100.0 * rec["greedy_caller_right"].get<double>(),
                  100.0 * rec["sampled_caller_right"].get<double>(), n));
}

void MultiJob::record(Json r) {
  classic::append_jsonl(exp_dir_ / "metrics.jsonl", r);
  result_.records.push_back(std::move(r));
}

// The member's engine stops (saving its last checkpoint); a failure is said, never thrown.
void MultiJob::stop_engine_of(Member& m) {
  try {
    m.front->stop_engine(60.0);
  } catch (const std::exception& e) {
    say("ajet: stopping model " + m.spec.name + ": " + e.what());
  }
}

void MultiJob::shut_down() {
  for (Member& m : members_) {
    if (!m.front) continue;
    stop_engine_of(m);
    m.front->stop_front();
  }
}

// Stops every engine (each saves its last checkpoint) and front, then says where everything is, in
// the words a single-model run uses: the summary, metrics, TensorBoard, reward curves, final
// models.
// Each adapter in PEFT layout under <experiment>/<model>/adapter (a failure is said, never thrown).
void MultiJob::save_adapters() {
  for (const ModelSpec& m : spec_.models) {
    const fs::path dir = exp_dir_ / m.name / "adapter";
    try {
      members_.front().front->client().save_adapter(Json{{"name", m.name}, {"dir", dir.string()}});
      say("ajet: final adapter (" + m.name + "): " + dir.string() + " (PEFT, on the base " +
          config().model.path + ")");
    } catch (const std::exception& e) {
      say("ajet: saving adapter " + m.name + ": " + e.what());
    }
  }
}

void MultiJob::finish() {
  if (on_adapters()) save_adapters();
  std::vector<std::pair<Member*, Json>> last;
  for (Member& m : members_) {
    stop_engine_of(m);
    const client::EngineStatus s = m.front->client().get_engine_status();
    try {
      classic::write_dashboard_snapshot(
          m.prepared.exp_dir / "reward_curve.html",
          classic::fetch_dashboard_snapshot(m.front->client(), m.spec.name));
    } catch (const std::exception& e) {
      log().warn("multi-model: {}: reward_curve.html not written: {}", m.spec.name, e.what());
    }
    m.front->stop_front();
    last.emplace_back(&m, s.body.value("latest_checkpoint", Json(nullptr)));
  }
  say("ajet: metrics: " + (exp_dir_ / "metrics.jsonl").string());
  for (auto& [m, checkpoint] : last) {
    if (config::logger_enabled(m->prepared.config, "tensorboard")) {
      say("ajet: TensorBoard (" + m->spec.name + "): tensorboard --logdir " +
          (m->prepared.exp_dir / "tensorboard").string());
    }
    say("ajet: reward curve (" + m->spec.name +
        "): " + (m->prepared.exp_dir / "reward_curve.html").string());
    if (checkpoint.is_string() && !checkpoint.get<std::string>().empty()) {
      say("ajet: final model (" + m->spec.name +
          "): " + (fs::path(checkpoint.get<std::string>()) / "model").string());
    }
  }
}

classic::RunResult MultiJob::run() {
  prepare();
  const config::Config& c = config();
  result_.exp_dir = exp_dir_;
  say(fmt::format(
      "ajet: multi-model run ({}): {} models, {} backbone, {} training / {} validation tasks, {} "
      "steps "
      "of {} tasks x {} episodes",
      spec_.workflow, spec_.models.size(), c.backbone, tasks_.training.size(),
      tasks_.validation.size(), total_steps_, c.data.train_batch_size, c.rollout.num_repeat));
  say("ajet: experiment directory " + exp_dir_.string());
  classic::RunPlan plan{1, total_steps_, c.trainer_common.test_freq,
                        c.trainer_common.val_before_train, std::nullopt};
  if (c.trainer_common.max_training_seconds)
    plan.max_training_seconds = double(*c.trainer_common.max_training_seconds);
  try {
    start_servers();
    loop_ = std::make_unique<classic::RunLoop>(
        plan, *this,
        classic::RunLoopHooks{[this](int64_t step) { validate(step); },
                              [](int64_t) { return false; }, out_,
                              [this] { return seconds_since(t0_); }},
        stop_);
    loop_->run();
  } catch (...) {
    shut_down();
    throw;
  }
  result_.stopped = stop_;
  finish();
  return result_;
}

}  // namespace

classic::RunResult run_multi_model(const classic::LaunchOptions& options,
                                   const MultiModelSpec& spec, const std::atomic<bool>& stop,
                                   const std::function<void(const std::string&)>& out) {
  MultiJob job(options, spec, stop, out);
  return job.run();
}

}  // namespace ajet::multi_model
