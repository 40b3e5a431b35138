#include "classic/launcher.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <deque>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <thread>

#include "classic/dashboard_snapshot.h"
#include "classic/episode_runner.h"
#include "classic/experiment_dir.h"
#include "classic/markdown_tables.h"
#include "classic/metrics.h"
#include "classic/run_metrics.h"
#include "classic/sampling_check.h"
#include "classic/swarm_child.h"
#include "classic/task_mix.h"
#include "classic/workflow.h"
#include "client/swarm_client.h"
#include "common/clock.h"
#include "common/error.h"
#include "common/fs.h"
#include "common/json.h"
#include "common/log.h"
#include "common/mix.h"
#include "config/load.h"
#include "tasks/cocktail.h"
#include "tasks/reader.h"

namespace ajet::classic {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

namespace {

uint64_t mix(uint64_t a, uint64_t b) {  // splitmix-style combination for per-episode env seeds
  return splitmix64_finalize(a * kGoldenGamma + b + 0x632BE59BD9B4E5ULL);
}

uint64_t hash_text(const std::string& s) {
  uint64_t h = 1469598103934665603ULL;
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ULL;
  return h;
}

fs::path resolve_path(const fs::path& p, const fs::path& config_dir) {
  if (p.empty() || p.is_absolute()) return p;
  if (fs::exists(p)) return fs::absolute(p).lexically_normal();
  fs::path beside = config_dir / p;
  if (fs::exists(beside)) return fs::absolute(beside).lexically_normal();
  return fs::absolute(p).lexically_normal();
}

// --resume with `experiment_name: read_yaml_name` ({stem}_{YYYYMMDD_HHMM}, a new name every minute):
// the newest such experiment under `base` that holds a run, by its name's time stamp.
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

}  // namespace

PreparedConfig prepare_config(const LaunchOptions& options) {
  if (options.conf.empty()) invalid_argument("--conf: a config file is required (see examples/configs/default.yaml)");
  if (!fs::exists(options.conf)) fail(ErrorCode::kNotFound, "--conf: no such file: " + options.conf.string());
  const std::string source = options.conf.string();
  config::LoadedConfig loaded = config::load_config_file(options.conf);
  PreparedConfig p;
  p.warnings = loaded.warnings;
  p.config = loaded.config;
  p.config_dir = fs::absolute(options.conf).parent_path();
  config::Config& c = p.config;
  if (!options.backbone.empty()) {
    if (options.backbone != "torch" && options.backbone != "async" && options.backbone != "debug") {
      invalid_argument("--backbone: unknown backbone '" + options.backbone + "' (expected torch, async or debug)");
    }
    config::set_config_value(c, "backbone", options.backbone);
  }
  for (const auto& o : options.overrides) {
    const size_t eq = o.find('=');
    if (eq == std::string::npos || eq == 0) invalid_argument("--set '" + o + "': expected KEY=VALUE, e.g. ajet.engine.seed=2");
    std::string key = o.substr(0, eq);
    if (key.rfind("ajet.", 0) != 0) key = "ajet." + key;
    try {
      config::set_config_value(c, key, o.substr(eq + 1));
    } catch (const Error& e) {
      throw Error(e.code(), "--set " + o + ": " + e.what());
    }
  }
  if (c.model.path.empty()) invalid_argument(source + ": ajet.model.path is required (a Hugging Face model directory)");
  c.model.path = resolve_path(c.model.path, p.config_dir).string();
  const bool remote = !options.swarm_url.empty();
  if (!remote && !fs::is_directory(c.model.path)) {
    fail(ErrorCode::kNotFound, source + ": ajet.model.path: no such directory: " + c.model.path +
                                   " (create one with `ajet model init --preset tiny --tokenizer DIR --out DIR`)");
  }
  if (!c.task_reader.cocktail.tasks.empty()) {
    if (c.task_reader.type != "random_dummy") {
      p.warnings.push_back("ajet.task_reader.type " + c.task_reader.type +
                           " is not used: ajet.task_reader.cocktail "
                           "lists the task sources");
    }
  } else if (c.task_reader.type == "random_dummy") {
    invalid_argument(
        source +
        ": ajet.task_reader.type is random_dummy (no tasks); classic mode needs tasks: use "
        "builtin or jsonl_dataset_file (or ajet.task_reader.cocktail)");
  }
  if (options.resume && c.experiment_name == "read_yaml_name" && c.experiment_dir == "auto") {
    c.experiment_name = newest_timestamped_run(options.exp_base_dir, options.conf.stem().string()).value_or(c.experiment_name);
  }
  config::resolve_auto_names(c, options.conf.string(), std::chrono::system_clock::now(), options.exp_base_dir);
  c.experiment_dir = fs::absolute(c.experiment_dir).lexically_normal().string();
  const std::string configured_checkpoint_dir = c.trainer_common.checkpoint_base_dir;
  // Checkpoints belong to the experiment (a relative checkpoint_base_dir is under its directory), so
  // experiments never share a checkpoint directory nor rotate each other's checkpoints away.
  if (!fs::path(c.trainer_common.checkpoint_base_dir).is_absolute()) {
    c.trainer_common.checkpoint_base_dir =
        (fs::path(c.experiment_dir) / c.trainer_common.checkpoint_base_dir).lexically_normal().string();
  }
  config::validate(c, source);
  // The truncated-sampling warning depends on values --backbone and --set may have changed: the one
  // loading gave (about the file's values) is replaced by the one the final config calls for, if any.
  if (auto loaded_w = config::truncated_rollout_warning(loaded.config, source)) {
    p.warnings.erase(std::remove(p.warnings.begin(), p.warnings.end(), *loaded_w), p.warnings.end());
  }
  if (auto w = config::truncated_rollout_warning(c, source)) p.warnings.push_back(std::move(*w));
  p.exp_dir = c.experiment_dir;
  if (c.swarm_mode_sample_collection_method == "rollout_until_finish_enough_non_dummy_tasks") {
    // The launcher knows every group's rewards, so it decides when the batch is full and says so. On
    // every backbone: with async the launcher closes each step's batch too, so steps and batches stay
    // one to one while the next step rolls out beside the training of this one.
    p.dynamic_sampling = true;
    c.swarm_mode_sample_collection_method = "rollout_until_any_client_agree_sync_weight";
    // The launcher is the only client and waits on global_step, not on the boundary's status: a
    // dwell would idle every step (2 s a step, a fifth of the main command's RL time).
    c.swarm_mode_agree_boundary_dwell = 0;
  }
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

namespace {

class Job {
 public:
  Job(const LaunchOptions& options, const std::atomic<bool>& stop, const std::function<void(const std::string&)>& out)
      : options_(options), stop_(stop), out_(out), resume_(options.resume) {}

  RunResult run();

 private:
  void say(const std::string& line) { out_(line); }
  // After the record's numbers went to the front (post_metrics): metrics.jsonl, and the dashboard
  // snapshot rewritten from the front's history.
  void record(Json r) {
    if (jsonl_) append_jsonl(prepared_.exp_dir / "metrics.jsonl", r);
    result_.records.push_back(std::move(r));
    write_snapshot();
  }
  void write_snapshot();
  void validate(int64_t step);
  // A step's rollout and its record before training (the trainer's numbers and the staleness come in
  // finish_step). With async, steps wait in pending_ while their batches train.
  struct PendingStep {
    int64_t step = 0;
    bool rolled_out = false;  // false: stopped during the rollout
    Clock::time_point started, rollout_ended;
    Json record;
    std::string markdown;  // the step's section of train_print_to_markdown_file_path
    bool judged = false;   // some episode reported is_success
  };
  void train_step(int64_t step);
  PendingStep roll_out_step(int64_t step);
  void finish_step(PendingStep& pending);
  void finish_trained_steps();
  void finish_all_steps();
  void wait_for_batch_closed(int64_t step);
  Json batch_staleness(const Json& status_body, int64_t version);
  void wait_for_global_step(int64_t target);
  void load_task_sources();
  Json cocktail_step_json(int64_t step, const std::vector<EpisodeResult>& results,
                          int64_t gen_batches) const;
  void restore_task_cursor(int64_t done);
  void claim_experiment_dir();
  void move_earlier_run_aside_and_say();
  // The front: a child `ajet-swarm start` (local), or the --swarm-url one after checking it answers.
  void connect_front();
  // --swarm-url: the engine the given front runs is stopped, so this run's config can be synced: one
  // an earlier run of this experiment left (killed before its end), or with --force-restart any.
  // Another experiment's engine is refused otherwise.
  void free_remote_engine();
  // Does the front's experiment directory (GET /get_server_experiment_dir) belong to this experiment?
  bool is_this_experiment(const std::string& front_dir) const;
  // Stops the engine this run started (engine_run_), not one another client started since: the front
  // refuses that, and the run says so and leaves it running.
  void stop_engine_of_this_run(double max_wait);
  // Fails the run when the front's engine (status `s`) is no longer the one this run started, while it
  // waits for a step to train. (Its claims name that engine, so a rollout finds out from the front:
  // SwarmClient::follow_engine_run.)
  void check_engine_is_ours(const client::EngineStatus& s);
  // --swarm-url --resume: does the front's newest checkpoint belong to this run?
  bool remote_checkpoint_is_ours();
  void boot_engine();
  int64_t resume_point();
  void finish();
  // POST /log_metrics to the front (the store and TensorBoard); a refusal is logged, never fatal.
  void post_metrics(int64_t step, const Json& metrics);
  // An ajet.trainer_common.*_print_to_markdown_file_path: "" when unset, relative under exp_dir.
  fs::path markdown_path(const std::optional<std::string>& configured) const;
  void append_markdown_section(const fs::path& path, const std::string& section);

  bool remote() const { return !options_.swarm_url.empty(); }
  // The front's experiment directory for messages: "" when the front does not say (or answer).
  std::string front_experiment_dir_for_messages();
  std::string front_exit_lines() const { return swarm_ && swarm_->exited() ? "\n" + swarm_->last_lines(10) : ""; }

  const LaunchOptions& options_;
  const std::atomic<bool>& stop_;
  const std::function<void(const std::string&)>& out_;
  // --resume, until a remote front turns out to hold no checkpoint of this run (then a new run).
  bool resume_ = false;
  // The engine this run started: start_engine answered (started), with its "engine_run" ("" from a
  // front that names none: then stop_engine stops whatever runs); replaced: another client stopped it
  // and started its own, which the end of this run leaves alone.
  bool engine_started_ = false;
  std::string engine_run_;
  bool engine_replaced_ = false;
  std::string front_run_dir_;  // --swarm-url: this run's experiment directory on the front
  std::string front_url_;
  PreparedConfig prepared_;
  // The task sources: ajet.task_reader (one, named "tasks") or the tasks of a cocktail, and the
  // mix that draws each step's batch from their training streams.
  std::vector<tasks::CocktailSource> sources_;
  size_t training_tasks_ = 0, validation_tasks_ = 0;
  std::unique_ptr<TaskMix> mix_;
  std::unique_ptr<ExperimentLock> lock_;
  std::unique_ptr<SwarmChild> swarm_;
  std::unique_ptr<client::SwarmClient> client_;
  std::unique_ptr<Workflow> workflow_;
  RunResult result_;
  std::deque<PendingStep> pending_;  // async: steps rolled out whose batches have not trained yet
  int64_t total_steps_ = 0;
  int64_t start_global_step_ = 0;
  int64_t first_step_ = 1;  // > 1 when --resume continues after step first_step_ - 1
  Clock::time_point t0_ = Clock::now();
  bool console_ = true;  // ajet.trainer_common.logger console: the per-step and validation lines
  bool jsonl_ = true;    // ajet.trainer_common.logger jsonl: metrics.jsonl
  bool post_warned_ = false;
  bool snapshot_warned_ = false;
};

// reward_curve.html: the front's dashboard with every series inlined. A front that does not answer
// leaves the previous page in place (said once).
void Job::write_snapshot() {
  try {
    write_dashboard_snapshot(
        prepared_.exp_dir / "reward_curve.html",
        fetch_dashboard_snapshot(*client_, prepared_.config.experiment_name + " (" + prepared_.config.backbone + ")"));
  } catch (const std::exception& e) {
    if (!snapshot_warned_) log().warn("classic: reward_curve.html not updated: {}", e.what());
    snapshot_warned_ = true;
  }
}

void Job::post_metrics(int64_t step, const Json& metrics) {
  if (metrics.empty()) return;
  try {
    client_->log_metrics(step, metrics);
  } catch (const std::exception& e) {
    if (!post_warned_) log().warn("classic: POST /log_metrics failed ({}); these numbers miss the front's store", e.what());
    post_warned_ = true;
  }
}

fs::path Job::markdown_path(const std::optional<std::string>& configured) const {
  if (!configured || configured->empty()) return {};
  const fs::path p = *configured;
  return p.is_absolute() ? p : prepared_.exp_dir / p;
}

void Job::append_markdown_section(const fs::path& path, const std::string& section) {
  if (path.empty()) return;
  try {
    append_markdown(path, section);
  } catch (const std::exception& e) {
    log().warn("classic: {}", e.what());
  }
}

// The front's record of the batch formed at `global_step` (GET /get_engine_status `recent_batches`,
// newest last), or null when it is not among them. With torch a batch trains from the step it was
// formed at; with async batches form while earlier ones train, so several may share one.
const Json* batch_outcome(const Json& status_body, int64_t global_step) {
  auto it = status_body.find("recent_batches");
  if (it == status_body.end() || !it->is_array()) return nullptr;
  for (auto b = it->rbegin(); b != it->rend(); ++b) {
    if (b->is_object() && b->value("global_step", int64_t{-1}) == global_step) return &*b;
  }
  return nullptr;
}

// The newest record of recent_batches, or null.
const Json* newest_outcome(const Json& status_body) {
  auto it = status_body.find("recent_batches");
  if (it == status_body.end() || !it->is_array() || it->empty() || !it->back().is_object()) return nullptr;
  return &it->back();
}

// The front's record of the batch whose training made policy version `version` (its stats carry the
// version the engine then served); for a synchronous backbone also the batch formed at version - 1
// (an engine whose reply names no version).
const Json* trained_batch(const Json& status_body, int64_t version, bool synchronous) {
  auto it = status_body.find("recent_batches");
  if (it == status_body.end() || !it->is_array()) return nullptr;
  for (auto b = it->rbegin(); b != it->rend(); ++b) {
    if (!b->is_object() || !b->value("trained", false) || !b->contains("stats")) continue;
    const Json& stats = (*b)["stats"];
    if (stats.is_object() && stats.value("policy_version", int64_t{-1}) == version) return &*b;
  }
  if (!synchronous) return nullptr;
  const Json* formed = batch_outcome(status_body, version - 1);
  return formed != nullptr && formed->value("trained", false) && formed->contains("stats") ? formed : nullptr;
}

void Job::wait_for_global_step(int64_t target) {
  const auto deadline = Clock::now() + std::chrono::hours(2);
  auto refused_since = Clock::time_point::max();
  while (!stop_) {
    client::EngineStatus s = client_->get_engine_status();
    check_engine_is_ours(s);
    if (s.global_step >= target) return;
    if (s.status == client::kOffline || s.status == client::kCannotConnect) {
      fail(ErrorCode::kUnavailable, "the engine is " + s.status + " while training step " + std::to_string(target) +
                                        ": " + s.detail + front_exit_lines());
    }
    // The front says why the step's batch was not trained (its newest record of that step): an engine
    // without train_step answered not_found, which no retry changes; any other refusal (a batch it could
    // not train, an engine that went away and is restarted) fails the run when no later batch is being
    // trained within 10 s.
    // async: batches are not numbered by steps, and a batch that failed leaves global_step short of
    // every later target, so the newest record says it.
    const Json* outcome = prepared_.config.backbone == "async" ? newest_outcome(s.body) : batch_outcome(s.body, target - 1);
    if (outcome != nullptr && !outcome->value("trained", false) && s.status != client::kWeightSyncing) {
      const Json error = outcome->value("error", Json::object());
      const std::string code = error.value("code", "");
      if (refused_since == Clock::time_point::max()) refused_since = Clock::now();
      if (code == "not_found" || Clock::now() - refused_since > std::chrono::seconds(10)) {
        fail(ErrorCode::kFailedPrecondition, "the front cannot train (" + code + ": " + error.value("message", "") +
                                                 "); run with --backbone debug to roll out without training");
      }
    } else {
      refused_since = Clock::time_point::max();
    }
    if (Clock::now() > deadline) fail(ErrorCode::kUnavailable, "training step " + std::to_string(target) + " never finished");
    std::this_thread::sleep_for(std::chrono::milliseconds(100));  // polling an observable status, not synchronising
  }
}

// Greedy, T=1 and pass@k on each source's held-out tasks (at most val_max_num_task_each_validation
// per source); a cocktail's record also holds each task's own summary under "cocktail".
void Job::validate(int64_t step) {
  const config::Config& c = prepared_.config;
  if (validation_tasks_ == 0 || stop_) return;
  const auto t0 = Clock::now();
  const Json greedy_sampling{
      {"temperature", c.rollout.val_kwargs.do_sample ? c.rollout.val_kwargs.temperature : 0.0},
      {"top_p", c.rollout.val_kwargs.top_p}};
  const Json sampled{{"temperature", c.rollout.temperature}, {"top_p", c.rollout.top_p}};
  const int64_t k = std::max<int64_t>(0, c.trainer_common.val_pass_n);
  // 1. Jobs, source after source: one greedy episode per task, and k sampled ones.
  std::vector<EpisodeJob> greedy_jobs, sampled_jobs;
  std::vector<size_t> greedy_end, sampled_end;  // where each source's jobs end
  for (const tasks::CocktailSource& source : sources_) {
    size_t n = source.sets.validation.size();
    if (const auto cap = c.trainer_common.val_max_num_task_each_validation; cap && *cap > 0) {
      n = std::min(n, size_t(*cap));
    }
    for (size_t i = 0; i < n; ++i) {
      const tasks::Task* t = &source.sets.validation[i];
      const uint64_t seed = hash_text(t->task_id);
      greedy_jobs.push_back(EpisodeJob{t, "eval", greedy_sampling, seed, 0});
      for (int64_t j = 0; j < k; ++j) {
        sampled_jobs.push_back(EpisodeJob{t, "eval", sampled, mix(seed, uint64_t(j + 1)), j + 1});
      }
    }
    greedy_end.push_back(greedy_jobs.size());
    sampled_end.push_back(sampled_jobs.size());
  }
  // 2. All of them in one pool.
  std::vector<EpisodeJob> all = greedy_jobs;
  all.insert(all.end(), sampled_jobs.begin(), sampled_jobs.end());
  EpisodeRunner runner(*client_, *workflow_, RunnerOptions{c.rollout.max_env_worker, 600, 3}, stop_);
  std::vector<EpisodeResult> results = runner.run(all);
  if (stop_) return;
  // 3. The summary of every task, and of each source of a cocktail.
  const auto greedy_begin = results.begin(),
             sampled_begin = results.begin() + long(greedy_jobs.size());
  std::vector<EpisodeResult> g(greedy_begin, sampled_begin);
  std::vector<EpisodeResult> s(sampled_begin, results.end());
  ValidationSummary v = summarize_validation(g, s, k);
  Json r{{"kind", "validation"}, {"step", step}, {"elapsed_s", seconds_since(t0_)}, {"time_s", seconds_since(t0)},
         {"validation", validation_json(v)}, {"greedy_rollout", rollout_json(summarize(g))}};
  std::vector<std::pair<std::string, PassTable>> tables = {{"all", pass_table(g, s)}};
  if (mix_->is_cocktail()) {
    Json per_task = Json::object();
    for (size_t i = 0; i < sources_.size(); ++i) {
      const size_t g0 = i == 0 ? 0 : greedy_end[i - 1], s0 = i == 0 ? 0 : sampled_end[i - 1];
      const std::vector<EpisodeResult> gi(greedy_begin + long(g0),
                                          greedy_begin + long(greedy_end[i]));
      const std::vector<EpisodeResult> si(sampled_begin + long(s0),
                                          sampled_begin + long(sampled_end[i]));
      per_task[sources_[i].name] = validation_json(summarize_validation(gi, si, k));
      tables.emplace_back(sources_[i].name, pass_table(gi, si));
    }
    r["cocktail"] = per_task;
  }
  if (console_) say(validation_line(r));
  if (console_ && mix_->is_cocktail()) say(cocktail_validation_line(r));
  append_markdown_section(markdown_path(c.trainer_common.val_print_to_markdown_file_path),
                          validation_markdown(step, tables));
  // Validation after step s evaluates the policy version those s steps made: metrics step start + s.
  Json metrics = validation_metrics(r, tables);
  // 4. Sampled episodes that ran greedy (an agent that ignores AJET_SAMPLING): a warning and a metric.
  if (k > 0 && c.rollout.temperature > 0) {
    const double absent = c.rollout.val_kwargs.do_sample ? c.rollout.val_kwargs.temperature : 0.0;
    const SamplingCheck check = check_sampled_requests(*client_, s, absent);
    r["sampled_requests"] = Json{{"episodes", check.episodes}, {"calls", check.calls},
                                 {"sampled_calls", check.sampled_calls}};
    if (check.calls > 0) metrics["val/sampled_request_share"] = check.sampled_share();
    if (check.all_greedy()) say("warning: " + greedy_validation_warning(check, c.rollout.temperature));
  }
  post_metrics(start_global_step_ + step, metrics);
  record(std::move(r));
}

// What each task of a cocktail had in this step: its share, its tasks, its episodes' reward and
// success, and its stream's cursor after the step (what --resume restores).
Json Job::cocktail_step_json(int64_t step, const std::vector<EpisodeResult>& results,
                             int64_t gen_batches) const {
  const std::vector<double> shares = mix_->shares(step);
  const std::vector<int64_t> counts = mix_->counts(step);
  std::vector<std::vector<EpisodeResult>> by_source(mix_->sources());
  for (const EpisodeResult& r : results) {
    by_source[mix_->source_of(r.job.task->task_id)].push_back(r);
  }
  const Json cursors = mix_->cursors();
  Json out = Json::object();
  for (size_t i = 0; i < mix_->sources(); ++i) {
    const RolloutSummary summary = summarize(by_source[i]);
    // A task with no share this step has no reward (null, not 0).
    const bool ran = summary.episodes > 0;
    out[mix_->name(i)] = Json{{"share", shares[i]},
                              {"tasks_per_batch", counts[i]},
                              {"tasks", counts[i] * gen_batches},
                              {"episodes", summary.episodes},
                              {"reward_mean", ran ? Json(summary.reward_mean) : Json(nullptr)},
                              {"success_rate", ran ? Json(summary.success_rate) : Json(nullptr)},
                              {"cursor", cursors[mix_->name(i)]}};
  }
  return out;
}

// The rollout of one step: its episodes, and its record up to what training adds (finish_step).
Job::PendingStep Job::roll_out_step(int64_t step) {
  const config::Config& c = prepared_.config;
  const auto t0 = Clock::now();
  PendingStep pending;
  pending.step = step;
  pending.started = t0;
  // One task batch, or with dynamic sampling as many as it takes (at most max_num_gen_batches) for
  // train_batch_size groups whose rewards differ.
  // A step's tasks are distinct, so it cannot sample more batches than the training tasks fill.
  const int64_t max_gen_batches =
      prepared_.dynamic_sampling
          ? std::clamp<int64_t>(mix_->max_batches(step), 1,
                                c.trainer_common.algorithm.max_num_gen_batches)
          : 1;
  std::deque<std::vector<tasks::Task>> task_batches;  // the jobs point into these
  std::set<std::string> ids;
  std::vector<EpisodeResult> results;
  int64_t done = 0, tokens = 0, submitted = 0, gen_batches = 0, groups = 0, informative = 0;
  double reward_sum = 0;
  auto draw = [&](bool final_line) {
    double tps = double(tokens) / std::max(1e-3, seconds_since(t0));
    std::string bar = progress_bar(step, total_steps_, done, submitted, done ? reward_sum / double(done) : 0.0, tps);
    if (options_.interactive) {
      std::fprintf(stderr, "\r%s%s", bar.c_str(), final_line ? "\n" : "");
      std::fflush(stderr);
    } else if (final_line) {
      say(bar);
    }
  };
  while (gen_batches < max_gen_batches && !stop_) {
    std::vector<tasks::Task>& batch = task_batches.emplace_back(mix_->draw(step, ids));
    std::vector<EpisodeJob> jobs;
    for (size_t i = 0; i < batch.size(); ++i) {
      for (int64_t rep = 0; rep < c.rollout.num_repeat; ++rep) {
        const uint64_t index = uint64_t(gen_batches) * 1000000 + i * 1000 + uint64_t(rep);
        jobs.push_back(EpisodeJob{&batch[i], "train", Json::object(),
                                  mix(mix(uint64_t(c.task_reader.shuffle_seed), uint64_t(step)), index), rep});
      }
    }
    submitted += int64_t(jobs.size());
    EpisodeRunner runner(*client_, *workflow_, RunnerOptions{c.rollout.max_env_worker, 600, 3}, stop_);
    std::vector<EpisodeResult> round = runner.run(jobs, [&](const EpisodeResult& r) {
      if (!r.ended) return;
      done += 1;
      tokens += r.report.completion_tokens;
      reward_sum += r.report.output.reward;
      draw(false);
    });
    gen_batches += 1;
    const GroupCounts counted = count_groups(round);
    groups += counted.groups;
    informative += counted.informative;
    results.insert(results.end(), std::make_move_iterator(round.begin()), std::make_move_iterator(round.end()));
    if (informative >= c.data.train_batch_size) break;
  }
  if (prepared_.dynamic_sampling && !stop_) {
    if (informative < c.data.train_batch_size) {
      log().info("classic: step {}: {} of {} groups carry a signal after {} task batches (max_num_gen_batches); "
                 "training on them",
                 step, informative, c.data.train_batch_size, gen_batches);
    }
    client_->agree_sync_weight(true);  // the batch is full: the front's trigger is agree-based
  }
  const double rollout_s = seconds_since(t0);
  draw(true);
  if (stop_) return pending;
  RolloutSummary rollout = summarize(results);
  if (rollout.failed > 0) {
    fail(ErrorCode::kUnavailable, fmt::format("step {}: {} episodes could not be stored (first: {}); the batch cannot "
                                              "complete",
                                              step, rollout.failed, [&] {
                                                for (const auto& r : results) {
                                                  if (!r.ended) return r.error;
                                                }
                                                return std::string();
                                              }()));
  }
  // Everything that depends on the task streams is taken now: with async the next step draws its
  // tasks before this one's record is finished.
  pending.record = Json{
      {"kind", "train"},
      {"step", step},
      {"rollout_time_s", rollout_s},
      {"tokens_per_s", double(rollout.completion_tokens) / std::max(1e-3, rollout_s)},
      {"epoch", mix_->epoch()},
      {"rollout", rollout_json(rollout)},
      {"sampling",
       Json{{"gen_batches", gen_batches}, {"groups", groups}, {"informative_groups", informative}}}};
  if (mix_->is_cocktail()) pending.record["cocktail"] = cocktail_step_json(step, results, gen_batches);
  std::vector<std::pair<std::string, RolloutTable>> tables = {{"all", rollout_table(results)}};
  if (mix_->is_cocktail()) {
    std::vector<std::vector<EpisodeResult>> by_source(mix_->sources());
    for (const EpisodeResult& e : results) by_source[mix_->source_of(e.job.task->task_id)].push_back(e);
    for (size_t i = 0; i < mix_->sources(); ++i) tables.emplace_back(mix_->name(i), rollout_table(by_source[i]));
  }
  pending.markdown = train_markdown(step, tables);
  pending.judged = std::any_of(results.begin(), results.end(),
                               [](const EpisodeResult& e) { return e.ended && e.report.output.is_success; });
  pending.rolled_out = true;
  return pending;
}

void Job::train_step(int64_t step) {
  const config::Config& c = prepared_.config;
  if (c.backbone == "async") {
    // Tokens sampled at policy version v may train at most max_staleness versions later. Step s's batch
    // trains from version start + s - 1, so its rollout may begin once version start + s - 1 -
    // max_staleness is served; until then the batches before it are training (the rollout of step s
    // overlaps the training of steps s - max_staleness .. s - 1).
    const auto t_wait = Clock::now();
    wait_for_global_step(start_global_step_ + step - 1 - c.async.max_staleness);
    const double waited = seconds_since(t_wait);
    finish_trained_steps();
    if (stop_) return;
    PendingStep pending = roll_out_step(step);
    if (!pending.rolled_out) return;
    pending.record["train_wait_s"] = waited;
    pending.rollout_ended = Clock::now();
    // The step's episodes are one batch: the next step claims only after the front closed this one
    // (with max_staleness > 1 the front may still hold an earlier batch for the trainer, and a batch
    // closes only when that one is taken).
    wait_for_batch_closed(step);
    pending_.push_back(std::move(pending));
    return;
  }
  PendingStep pending = roll_out_step(step);
  if (!pending.rolled_out) return;
  const auto t_train = Clock::now();
  if (c.backbone != "debug") wait_for_global_step(start_global_step_ + step);
  pending.record["train_wait_s"] = seconds_since(t_train);
  pending.rollout_ended = t_train;
  finish_step(pending);
}

// async: the records of the steps whose batches have trained, in step order.
void Job::finish_trained_steps() {
  while (!pending_.empty() && !stop_) {
    const client::EngineStatus status = client_->get_engine_status();
    if (status.global_step < start_global_step_ + pending_.front().step) return;
    finish_step(pending_.front());
    pending_.pop_front();
  }
}

// async, before validation and at the end: every step rolled out so far trained, and recorded.
void Job::finish_all_steps() {
  if (pending_.empty()) return;
  wait_for_global_step(start_global_step_ + pending_.back().step);
  finish_trained_steps();
}

void Job::wait_for_batch_closed(int64_t step) {
  const auto deadline = Clock::now() + std::chrono::hours(2);
  while (!stop_) {
    const Json pool = client_->get_rollout_stat();
    // An unreachable front answers {}; the next step's claims will say what is wrong.
    if (!pool.is_object() || pool.value("completed_episodes", int64_t(0)) == 0) return;
    if (Clock::now() > deadline) {
      fail(ErrorCode::kUnavailable, fmt::format("step {}: the front never closed the step's batch", step));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));  // polling an observable status, not synchronising
  }
}

// The staleness of the batch trained into policy version `version`: the front's record of it
// (recent_batches: its policy_version, staleness_max) and the mean over its episodes from the
// metrics it stored at step version - 1 (the store may take a moment to have it).
Json Job::batch_staleness(const Json& status_body, int64_t version) {
  const Json* outcome = trained_batch(status_body, version, false);
  if (outcome == nullptr) return Json(nullptr);
  const Json rollout = (*outcome)["stats"].value("rollout", Json::object());
  if (!rollout.contains("staleness_max")) return Json(nullptr);
  Json out{{"trained_from", rollout.value("policy_version", Json(nullptr))},
           {"max", rollout["staleness_max"]},
           {"mean", Json(nullptr)},
           {"allowed", prepared_.config.async.max_staleness}};
  const auto deadline = Clock::now() + std::chrono::seconds(5);
  while (!stop_) {
    try {
      const Json history = client_->get_metrics_history({"rollout/staleness_mean"}, version - 2);
      for (const Json& point : history.value("series", Json::object()).value("rollout/staleness_mean", Json::array())) {
        if (point.is_array() && point.size() >= 2 && point[0] == version - 1) {
          out["mean"] = point[1];
          return out;
        }
      }
    } catch (const std::exception& e) {
      log().warn("classic: staleness of step {}: {}", version, e.what());
      return out;
    }
    if (Clock::now() > deadline) return out;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));  // the store writes behind the status
  }
  return out;
}

void Job::finish_step(PendingStep& pending) {
  const config::Config& c = prepared_.config;
  const int64_t step = pending.step;
  const int64_t version = start_global_step_ + step;  // what this step's batch trained into
  client::EngineStatus status = client_->get_engine_status();
  Json pool = client_->get_rollout_stat();
  Json trainer = c.backbone == "async" ? Json::object() : trainer_metrics(status.body, pool);
  if (trainer.empty() && c.backbone != "debug") {
    // The trainer's statistics of this step's batch, as the front reports them (recent_batches; the
    // front records them in the same update that advances global_step).
    const Json* outcome = trained_batch(status.body, version, c.backbone != "async");
    if (outcome != nullptr && outcome->contains("stats")) {
      trainer = trainer_metrics(Json{{"last_train_stats", (*outcome)["stats"]}}, Json::object());
    }
  }
  Json& r = pending.record;
  r["global_step"] = c.backbone == "async" ? version : status.global_step;
  r["elapsed_s"] = seconds_since(t0_);
  // async: the launcher's time on the step (waiting for the staleness bound, then the rollout); its
  // training overlapped the next step's rollout.
  r["step_time_s"] = c.backbone == "async"
                         ? r.value("train_wait_s", 0.0) + r.value("rollout_time_s", 0.0)
                         : seconds_since(pending.started);
  r["trainer"] = trainer;
  if (c.backbone == "async") r["staleness"] = batch_staleness(status.body, version);
  Json finished = std::move(r);
  if (console_) say(step_line(finished, total_steps_));
  if (console_ && mix_->is_cocktail()) say(cocktail_step_line(finished));
  append_markdown_section(markdown_path(c.trainer_common.train_print_to_markdown_file_path), pending.markdown);
  // The front records the step's batch (rollout/reward_mean, train/loss …) at the batch's global step,
  // start + step - 1; the launcher's own numbers go next to them. Its success rate only where no
  // episode reported is_success (the front's rollout/success_rate counts reported ones).
  post_metrics(start_global_step_ + step - 1, train_step_metrics(finished, !pending.judged));
  record(std::move(finished));
  result_.steps_done = step;
}

// The experiment directory becomes this run's: the lock, leftovers of an earlier run stopped, and
// (a new run) the earlier run's files moved aside or (--resume) kept to continue.
void Job::claim_experiment_dir() {
  const fs::path& dir = prepared_.exp_dir;
  lock_ = std::make_unique<ExperimentLock>(dir);
  if (!remote()) {
    stop_leftovers(find_leftovers(dir), std::chrono::seconds(30), [this](const std::string& line) { say(line); });
  } else {
    // This run starts no process, so it stops none either: a front it did not start is not its own.
    for (const Leftover& l : find_leftovers(dir)) {
      say(fmt::format("ajet: {} pid {} runs on {}; left alone (--swarm-url: this run starts and signals no process)",
                      l.program, l.pid, dir.string()));
    }
  }
  if (resume_) {
    const bool earlier = remote() ? fs::exists(dir / "metrics.jsonl") : fs::exists(dir / "swarm" / "swarm.sqlite");
    if (!earlier) say("ajet: --resume: " + dir.string() + " holds no earlier run; starting a new one");
    return;
  }
  move_earlier_run_aside_and_say();
}

void Job::move_earlier_run_aside_and_say() {
  const fs::path& dir = prepared_.exp_dir;
  if (const fs::path moved = move_earlier_run_aside(dir); !moved.empty()) {
    say("ajet: " + dir.string() + " held an earlier run; its files (metrics.jsonl, checkpoints, logs, store) are now in " +
        moved.string() + " (to continue that run instead, move them back and rerun with --resume)");
  }
}

// --resume: the step the earlier run got to, from the front (trained steps: the checkpoint the engine
// resumed from) or, for the debug backbone (nothing trained), from metrics.jsonl. Also reloads the
// earlier records up to that step for the summary and the reward curve.
int64_t Job::resume_point() {
  const config::Config& c = prepared_.config;
  const fs::path metrics = prepared_.exp_dir / "metrics.jsonl";
  std::vector<Json> earlier;
  if (fs::exists(metrics)) {
    std::istringstream in(read_file(metrics));
    std::string line;
    while (std::getline(in, line)) {
      std::optional<Json> r = try_parse_json(line);
      if (r && r->is_object()) earlier.push_back(std::move(*r));
    }
  }
  int64_t step = 0;
  if (c.backbone == "debug") {
    for (const auto& r : earlier) {
      if (r.value("kind", "") == "train") step = std::max(step, r.value("step", int64_t(0)));
    }
  } else {
    step = client_->get_engine_status().global_step;
  }
  for (auto& r : earlier) {
    const std::string kind = r.value("kind", "");
    if ((kind == "train" || kind == "validation") && r.value("step", int64_t(0)) <= step) {
      result_.records.push_back(std::move(r));
    }
  }
  return step;
}

void Job::connect_front() {
  client::SwarmClientOptions copts;
  copts.client_uuid = "ajet-classic";
  if (!remote()) {
    std::vector<std::string> swarm_flags = options_.swarm_flags;
    swarm_flags.push_back(resume_ ? "--resume" : "--fresh");
    // This launcher is its own front's only client and runs max_env_worker episodes at once.
    swarm_flags.insert(swarm_flags.end(), {"--max-claims-per-client", "-1"});
    swarm_ = std::make_unique<SwarmChild>(SwarmChildOptions{options_.swarm_binary, prepared_.exp_dir / "swarm",
                                                            prepared_.exp_dir / "swarm.log", swarm_flags});
    lock_->set_front_pid(swarm_->pid());
    front_url_ = swarm_->url();
    say("ajet: front at " + front_url_ + " (log: " + (prepared_.exp_dir / "swarm.log").string() + ")");
  } else {
    front_url_ = options_.swarm_url;
    while (!front_url_.empty() && front_url_.back() == '/') front_url_.pop_back();
    try {
      client_ = std::make_unique<client::SwarmClient>(front_url_, copts);
      client_->get_global_step();  // throws when nothing answers there
    } catch (const client::SwarmError& e) {
      fail(ErrorCode::kUnavailable, "--swarm-url " + options_.swarm_url +
                                        ": the front does not answer (" + e.what() +
                                        "); start one there (`ajet-swarm start`) or check the address");
    }
    say("ajet: front at " + front_url_ + " (--swarm-url: this run starts no front; it stops the front's engine at the end)");
  }
  say("ajet: live dashboard, episodes and tokens: " + front_url_ + "/ui/");
  if (!client_) client_ = std::make_unique<client::SwarmClient>(front_url_, copts);
}

std::string Job::front_experiment_dir_for_messages() {
  try {
    return client_->get_server_experiment_dir();
  } catch (const std::exception&) {
    return "";
  }
}

bool Job::is_this_experiment(const std::string& front_dir) const {
  return !front_dir.empty() && fs::path(front_dir).filename() == prepared_.config.experiment_name;
}

void Job::free_remote_engine() {
  const client::EngineStatus s = client_->get_engine_status();
  if (s.status == client::kOffline) return;
  const std::string experiment = front_experiment_dir_for_messages();
  const std::string running = s.status + (experiment.empty() ? "" : " (experiment " + experiment + ")");
  const bool ours = is_this_experiment(experiment);
  if (!ours && !options_.force_restart) {
    fail(ErrorCode::kFailedPrecondition,
         fmt::format("--swarm-url {}: the front's engine is {}, not this run's experiment '{}'; stopping it would end "
                     "that training. Wait until the front's engine is ENGINE.OFFLINE, or pass --force-restart to stop "
                     "it (the front saves its checkpoint first)",
                     front_url_, running, prepared_.config.experiment_name));
  }
  say("ajet: the front's engine is " + running + "; stopping it so this run's config can be synced (" +
      (ours ? "an earlier run of this experiment left it" : "--force-restart") +
      "; the front saves its checkpoint first)");
  client_->stop_engine(true, 120.0, s.engine_run);
}

void Job::check_engine_is_ours(const client::EngineStatus& s) {
  if (engine_run_.empty() || s.engine_run.empty() || s.engine_run == engine_run_) return;
  engine_replaced_ = true;
  fail(ErrorCode::kFailedPrecondition,
       "the front's engine is no longer this run's: another client stopped it and started its own (engine_run " +
           s.engine_run + "); this run stops here");
}

void Job::stop_engine_of_this_run(double max_wait) {
  if (remote() && !engine_started_) return;  // this run started no engine there
  if (engine_replaced_) {
    say("ajet: the front's engine is another client's now; left running");
    return;
  }
  try {
    client_->stop_engine(true, max_wait, engine_run_);
  } catch (const client::SwarmError&) {
    // Refused because another engine runs now (the front's status says which), or a failure to report.
    if (const client::EngineStatus s = client_->get_engine_status();
        engine_run_.empty() || s.engine_run.empty() || s.engine_run == engine_run_) {
      throw;
    }
    engine_replaced_ = true;
    say("ajet: the front's engine is no longer this run's (another client stopped it and started its own); left "
        "running");
  }
}

// The front keeps one newest checkpoint (of whatever ran there last). It is this run's when the front's
// last engine ran this experiment (experiment_dir auto: <front dir>/experiments/<experiment_name>) and
// the checkpoint lies under that directory.
bool Job::remote_checkpoint_is_ours() {
  const Json checkpoint = client_->get_engine_status().body.value("latest_checkpoint", Json(nullptr));
  const std::string dir = client_->get_server_experiment_dir();
  const std::string cp = checkpoint.is_string() ? checkpoint.get<std::string>() : "";
  const bool ours = !cp.empty() && is_this_experiment(dir) && cp.rfind(dir + "/", 0) == 0;
  if (!ours) {
    say("ajet: --resume: the front at " + front_url_ + " holds no checkpoint of this run (" +
        (cp.empty() ? std::string("it has none") : "its newest, " + cp + ", is another experiment's") +
        "); starting the run again from step 0");
  }
  return ours;
}

// Syncs the config and starts the engine: from ajet.model.path for a new run, from the newest
// checkpoint for --resume (an engine the front resumed by itself is stopped first, so the config
// synced is this run's).
void Job::boot_engine() {
  bool from_checkpoint = resume_;
  if (remote()) {
    free_remote_engine();
    if (resume_ && prepared_.config.backbone == "debug") {
      from_checkpoint = false;  // nothing was trained: the run continues from metrics.jsonl on the model
    } else if (resume_ && !remote_checkpoint_is_ours()) {
      resume_ = from_checkpoint = false;
      move_earlier_run_aside_and_say();
    }
  } else if (resume_ && client_->get_engine_status().status != client::kOffline) {
    say("ajet: --resume: the front restarted the earlier run's engine; restarting it with this config");
    client_->stop_engine(true, 120.0);
  }
  Json synced;
  try {
    synced = client_->sync_train_config(prepared_.yaml);
  } catch (const client::SwarmError& e) {
    if (e.http_status() != 401) throw;
    fail(ErrorCode::kFailedPrecondition, std::string(e.what()) + " (the front wants its admin token: set AJET_ADMIN_TOKEN)");
  }
  if (!synced.value("success", false)) {
    fail(ErrorCode::kInvalidArgument, "the front refused the config: " + synced.value("error", synced.dump()));
  }
  const auto boot = Clock::now();
  // Not waiting in start_engine: the engine is this run's from its answer on, also when the boot fails.
  engine_run_ = client_->start_engine(false, std::nullopt, from_checkpoint).value("engine_run", "");
  engine_started_ = true;
  client_->follow_engine_run(engine_run_);  // claims refused once another client replaced this engine
  client_->wait_for_status(client::kRolling, 900.0, true);
  if (remote()) front_run_dir_ = front_experiment_dir_for_messages();
  client::EngineStatus status = client_->get_engine_status();
  say(fmt::format("ajet: engine rolling after {:.1f} s (global step {})", seconds_since(boot), status.global_step));
  if (!resume_) {
    start_global_step_ = status.global_step;
    return;
  }
  const int64_t done = resume_point();
  // Launcher steps and global steps agree in a run of this launcher (a new run's store starts at 0).
  start_global_step_ = prepared_.config.backbone == "debug" ? status.global_step : 0;
  first_step_ = done + 1;
  result_.resumed_from_step = done;
  restore_task_cursor(done);
  Json marker{{"kind", "resume"}, {"step", done}, {"global_step", status.global_step}, {"elapsed_s", 0.0}};
  if (jsonl_) append_jsonl(prepared_.exp_dir / "metrics.jsonl", marker);
  say(fmt::format("ajet: --resume: continuing after step {} of {} (global step {}); metrics.jsonl continues after a "
                  "{{\"kind\":\"resume\"}} line",
                  done, total_steps_, status.global_step));
}

// --resume: the task streams continue where step `done` left them. A cocktail's record of that step
// holds each source's cursor; otherwise the step's task batches are drawn again (each step drew the
// batches it recorded: more than one with dynamic sampling, one when its record is missing).
void Job::restore_task_cursor(int64_t done) {
  std::map<int64_t, const Json*> train_records;
  for (const Json& r : result_.records) {
    if (r.value("kind", "") == "train") train_records[r.value("step", int64_t(0))] = &r;
  }
  if (const auto it = train_records.find(done);
      mix_->is_cocktail() && it != train_records.end() && it->second->contains("cocktail")) {
    Json cursors = Json::object();
    for (const auto& [name, task] : (*it->second)["cocktail"].items()) {
      cursors[name] = task.value("cursor", Json());
    }
    mix_->seek(cursors);
    return;
  }
  for (int64_t s = 1; s <= done; ++s) {
    const auto it = train_records.find(s);
    const int64_t batches =
        it == train_records.end()
            ? 1
            : it->second->value("sampling", Json::object()).value("gen_batches", int64_t(1));
    std::set<std::string> ids;
    for (int64_t b = 0; b < batches; ++b) mix_->draw(s, ids);
  }
}

// Stops engine and front, then says where everything is: metrics, reward curve, the final model.
void Job::finish() {
  const config::Config& c = prepared_.config;
  try {
    stop_engine_of_this_run(60.0);  // the front saves a last checkpoint of steps trained since the last one
  } catch (const std::exception& e) {
    log().warn("classic: stop_engine: {}", e.what());
  }
  const client::EngineStatus last = client_->get_engine_status();  // where that checkpoint is
  write_snapshot();  // the last numbers (the front records the last batch as the engine stops)
  if (swarm_) swarm_->stop();
  if (const std::string summary = learning_summary(result_.records); !summary.empty()) say("ajet: " + summary);
  for (const std::string& line : cocktail_learning_summary(result_.records)) say("ajet: " + line);
  if (jsonl_) say("ajet: metrics: " + (prepared_.exp_dir / "metrics.jsonl").string());
  if (config::logger_enabled(c, "tensorboard")) {
    if (!remote()) {
      say("ajet: TensorBoard: tensorboard --logdir " + (prepared_.exp_dir / "tensorboard").string());
    } else {
      const std::string front_dir = front_experiment_dir_for_messages();
      if (!front_dir.empty()) say("ajet: TensorBoard (the front writes it): tensorboard --logdir " + front_dir + "/tensorboard");
    }
  }
  say("ajet: reward curve: " + (prepared_.exp_dir / "reward_curve.html").string());
  const Json checkpoint = last.body.value("latest_checkpoint", Json(nullptr));
  if (engine_replaced_) {
    say("ajet: the front's newest checkpoint is the engine's that replaced this run's; this run's are under " +
        (front_run_dir_.empty() ? std::string("its experiment directory") : front_run_dir_) +
        "/saved_checkpoints on the front");
  } else if (checkpoint.is_string() && !checkpoint.get<std::string>().empty()) {
    result_.final_checkpoint = checkpoint.get<std::string>();
    say("ajet: final model: " + (result_.final_checkpoint / "model").string() + (remote() ? " on the front" : "") +
        " (checkpoint " + result_.final_checkpoint.filename().string() + "; continue this run with --resume)");
  } else if (last.status == client::kCannotConnect) {
    say("ajet: the front did not answer after stop_engine, so where the final checkpoint is is unknown (see " +
        (remote() ? front_url_ + "/ui/" : (prepared_.exp_dir / "swarm").string()) + ")");
  } else if (c.backbone != "debug") {
    say("ajet: no checkpoint was written (no step was trained)");
  }
}

// The tasks: ajet.task_reader's, or each cocktail task's, and the mix that draws the steps'
// batches.
void Job::load_task_sources() {
  const config::Config& c = prepared_.config;
  const config::TaskReaderConfig& reader = c.task_reader;
  const std::string conf = options_.conf.string();
  if (reader.cocktail.tasks.empty()) {
    sources_.push_back(
        tasks::CocktailSource{"tasks", tasks::load_tasks(reader, prepared_.config_dir)});
  } else {
    sources_ = tasks::load_cocktail(reader.cocktail, prepared_.config_dir);
  }
  for (const tasks::CocktailSource& source : sources_) {
    training_tasks_ += source.sets.training.size();
    validation_tasks_ += source.sets.validation.size();
  }
  if (training_tasks_ == 0 && !c.trainer_common.val_only) {
    invalid_argument(conf + ": ajet.task_reader yields no training tasks (after filters)");
  }
  if (!c.trainer_common.val_only && int64_t(training_tasks_) < c.data.train_batch_size) {
    invalid_argument(fmt::format(
        "{}: ajet.data.train_batch_size ({}) is larger than the number of training tasks ({})",
        conf, c.data.train_batch_size, training_tasks_));
  }
  const uint64_t seed = uint64_t(reader.shuffle_seed);
  mix_ = reader.cocktail.tasks.empty()
             ? std::make_unique<TaskMix>(sources_.front().sets.training, reader.shuffle, seed,
                                         c.data.train_batch_size)
             : std::make_unique<TaskMix>(reader.cocktail, sources_, seed, c.data.train_batch_size);
}

RunResult Job::run() {
  prepared_ = prepare_config(options_);
  const config::Config& c = prepared_.config;
  console_ = config::logger_enabled(c, "console");
  jsonl_ = config::logger_enabled(c, "jsonl");
  for (const auto& w : prepared_.warnings) say("warning: " + w);
  result_.exp_dir = prepared_.exp_dir;
  load_task_sources();
  claim_experiment_dir();
  workflow_ = make_workflow(c, prepared_.config_dir, prepared_.exp_dir);
  const int64_t per_epoch = (int64_t(training_tasks_) + c.data.train_batch_size - 1) /
                            std::max<int64_t>(1, c.data.train_batch_size);
  total_steps_ = c.trainer_common.total_training_steps.value_or(c.trainer_common.total_epochs * per_epoch);
  if (c.trainer_common.val_only) total_steps_ = 0;
  mix_->check_fits(total_steps_);
  say(
      fmt::format("ajet: {} backbone, {} training / {} validation tasks, {} steps of {} tasks x {} "
                  "episodes, {} in "
                  "parallel; workflow: {}",
                  c.backbone, training_tasks_, validation_tasks_, total_steps_,
                  c.data.train_batch_size, c.rollout.num_repeat, c.rollout.max_env_worker,
                  mix_->is_cocktail() &&
                          (c.rollout.user_workflow.empty() || c.rollout.user_workflow == "builtin")
                      ? "built-in agent of each task's env_type"
                      : workflow_->describe()));
  say("ajet: experiment directory " + prepared_.exp_dir.string());
  if (mix_->is_cocktail()) {
    say("ajet: " + cocktail_description(*mix_, c.task_reader.cocktail, sources_, total_steps_));
  }

  connect_front();
  try {
    boot_engine();
    const int64_t test_freq = c.trainer_common.test_freq;
    // The steps validated on schedule (a run that stops early for its time budget also validates there).
    auto scheduled_validation = [&](int64_t step) {
      return test_freq > 0 && (step % test_freq == 0 || step == total_steps_);
    };
    // --resume reloaded the earlier run's records: a validation it already has is not run again, and
    // one it lost (the run was stopped after a step's checkpoint, before that step's validation) is
    // run now, before the next step, so the step's record exists as in an uninterrupted run.
    auto validated = [this](int64_t step) {
      return std::any_of(result_.records.begin(), result_.records.end(), [&](const Json& r) {
        return r.value("kind", "") == "validation" && r.value("step", int64_t(-1)) == step;
      });
    };
    const int64_t resumed_after = first_step_ - 1;
    if (resumed_after == 0) {
      if ((c.trainer_common.val_before_train || c.trainer_common.val_only) && !validated(0)) validate(0);
    } else if (scheduled_validation(resumed_after) && !validated(resumed_after)) {
      say(fmt::format("ajet: --resume: step {} has no validation record (the run stopped between the step and its "
                      "validation); validating it now",
                      resumed_after));
      validate(resumed_after);
    }
    double train_s = 0, last_validation_s = 0;
    for (int64_t step = first_step_; step <= total_steps_ && !stop_; ++step) {
      const auto step_start = Clock::now();
      train_step(step);
      const double step_s = seconds_since(step_start);
      train_s += step_s;
      if (stop_) break;
      // max_training_seconds: would the next step (and a validation after it) end too late? Steps grow
      // longer as a run goes (dynamic sampling needs more task batches once most groups succeed), so
      // the next one is expected to take the longer of the mean and the last.
      bool out_of_time = false;
      if (const auto budget = c.trainer_common.max_training_seconds; budget && step < total_steps_) {
        const double next_step_s = std::max(train_s / double(step - first_step_ + 1), step_s);
        out_of_time = seconds_since(t0_) + next_step_s + last_validation_s > double(*budget);
        if (out_of_time) {
          say(fmt::format("ajet: stopping after step {} of {}: another step (~{:.1f} s) would pass "
                          "max_training_seconds ({:.0f} s, {:.0f} s gone)",
                          step, total_steps_, next_step_s, double(*budget), seconds_since(t0_)));
        }
      }
      const bool validate_now = scheduled_validation(step) || (test_freq > 0 && out_of_time);
      // async runs ahead of training; validation and the end wait until every step so far trained.
      if (c.backbone == "async" && (validate_now || step == total_steps_ || out_of_time)) finish_all_steps();
      if (validate_now) {
        const auto validation_start = Clock::now();
        validate(step);
        last_validation_s = seconds_since(validation_start);
      }
      if (out_of_time) break;
    }
  } catch (...) {
    try {
      stop_engine_of_this_run(30.0);
    } catch (...) {
    }
    if (swarm_) swarm_->stop();
    throw;
  }
  result_.stopped = stop_;
  if (stop_) say(remote() ? "ajet: stop requested; stopping the engine on the front" : "ajet: stop requested; stopping the engine and the front");
  finish();
  return result_;
}

}  // namespace

RunResult run_classic(const LaunchOptions& options, const std::atomic<bool>& stop,
                      const std::function<void(const std::string&)>& out) {
  Job job(options, stop, out);
  return job.run();
}

}  // namespace ajet::classic
