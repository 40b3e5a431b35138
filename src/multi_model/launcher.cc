#include "multi_model/launcher.h"

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include <chrono>
#include <cmath>
#include <mutex>
#include <set>
#include <thread>

#include "classic/experiment_dir.h"
#include "classic/http_chat_model.h"
#include "classic/metrics.h"
#include "classic/swarm_child.h"
#include "client/multi_episode.h"
#include "common/error.h"
#include "common/fs.h"
#include "common/log.h"
#include "config/load.h"
#include "multi_model/duo.h"
#include "tasks/reader.h"

namespace ajet::multi_model {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

namespace {

constexpr size_t kMaxSpecBytes = 1 << 20;
constexpr size_t kMaxModels = 8;

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

std::string spec_field(const YAML::Node& node, const std::string& key, const std::string& where) {
  const YAML::Node v = node[key];
  if (!v || !v.IsScalar() || v.as<std::string>().empty()) {
    invalid_argument(where + "." + key + " must be a non-empty string");
  }
  return v.as<std::string>();
}

}  // namespace

std::optional<MultiModelSpec> read_multi_model_spec(const fs::path& conf) {
  std::error_code ec;
  if (!fs::is_regular_file(conf, ec)) return std::nullopt;  // classic mode names the missing file
  const std::string text = read_file(conf);
  if (text.size() > kMaxSpecBytes) {
    invalid_argument(conf.string() + ": larger than " + std::to_string(kMaxSpecBytes) + " bytes");
  }
  YAML::Node root;
  try {
    root = YAML::Load(text);
  } catch (const YAML::Exception& e) {
    invalid_argument(conf.string() + ": " + e.what());
  }
  if (!root.IsMap() || !root["ajet"] || !root["ajet"].IsMap() || !root["ajet"]["multi_model"]) return std::nullopt;
  const YAML::Node mm = root["ajet"]["multi_model"];
  const std::string where = conf.string() + ": ajet.multi_model";
  if (!mm.IsMap()) invalid_argument(where + " must be a mapping with workflow and models");
  MultiModelSpec spec;
  if (mm["workflow"]) spec.workflow = spec_field(mm, "workflow", where);
  if (spec.workflow != "calc_duo") {
    invalid_argument(where + ".workflow: unknown multi-model workflow '" + spec.workflow + "' (known: calc_duo)");
  }
  const YAML::Node models = mm["models"];
  if (!models || !models.IsSequence() || models.size() > kMaxModels) {
    invalid_argument(where + ".models must be a list of at most " + std::to_string(kMaxModels) + " {name, path}");
  }
  std::set<std::string> names;
  for (size_t i = 0; i < models.size(); ++i) {
    const std::string at = where + ".models[" + std::to_string(i) + "]";
    if (!models[i].IsMap()) invalid_argument(at + " must be a mapping {name, path}");
    ModelSpec m{spec_field(models[i], "name", at), spec_field(models[i], "path", at)};
    if (m.name.find_first_not_of("abcdefghijklmnopqrstuvwxyz0123456789_-") != std::string::npos) {
      invalid_argument(at + ".name '" + m.name + "' may only hold a-z, 0-9, _ and - (it names a directory)");
    }
    if (!names.insert(m.name).second) invalid_argument(at + ".name '" + m.name + "' is used twice");
    spec.models.push_back(std::move(m));
  }
  if (spec.models.size() != 2) {
    invalid_argument(where + ".models: calc_duo needs exactly two models (the caller, then the answerer), got " +
                     std::to_string(spec.models.size()));
  }
  return spec;
}

namespace {

// The newest batch id a front handed to its trainer (GET /get_engine_status `recent_batches`); 0 if none.
int64_t newest_batch_id(const Json& status_body) {
  int64_t newest = 0;
  for (const Json& b : status_body.value("recent_batches", Json::array())) {
    newest = std::max(newest, b.value("batch_id", int64_t(0)));
  }
  return newest;
}

// One model: its config, its front and its client.
struct Member {
  ModelSpec spec;
  classic::PreparedConfig prepared;
  std::unique_ptr<classic::SwarmChild> child;
  std::unique_ptr<client::SwarmClient> client;
  int64_t last_batch_id = 0;  // the newest batch of its front whose outcome the launcher has read
};

struct PlayedEpisode {
  DuoOutcome outcome;
  bool ended = false;  // the group was committed on every server (train) or played (eval)
  std::string error;
};

class MultiJob {
 public:
  MultiJob(const classic::LaunchOptions& options, const MultiModelSpec& spec, const std::atomic<bool>& stop,
           const std::function<void(const std::string&)>& out)
      : options_(options), spec_(spec), stop_(stop), out_(out) {}

  classic::RunResult run();

 private:
  void say(const std::string& line) { out_(line); }
  void prepare();
  void start_servers();
  std::vector<PlayedEpisode> play(const std::vector<const tasks::Task*>& tasks, const std::string& type,
                                  const Json& sampling);
  PlayedEpisode play_one(const tasks::Task& task, const std::string& type, const Json& sampling);
  void train_step(int64_t step);
  void validate(int64_t step);
  Json trained_stats(Member& m);
  void record(Json r);
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
  classic::RunResult result_;
  int64_t total_steps_ = 0;
  Clock::time_point t0_ = Clock::now();
};

// Every model gets the shared config with its own model path and experiment subdirectory.
void MultiJob::prepare() {
  for (const ModelSpec& m : spec_.models) {
    classic::LaunchOptions o = options_;
    const fs::path path = m.path.is_absolute() ? m.path : fs::absolute(options_.conf).parent_path() / m.path;
    o.overrides.push_back("ajet.model.path=" + path.lexically_normal().string());
    Member member{m, classic::prepare_config(o), nullptr, nullptr, 0};
    config::Config& c = member.prepared.config;
    if (member.prepared.dynamic_sampling) {
      invalid_argument(options_.conf.string() + ": ajet.swarm_mode_sample_collection_method "
                       "rollout_until_finish_enough_non_dummy_tasks (dynamic sampling) is not supported with "
                       "ajet.multi_model; use rollout_until_finish_enough_tasks");
    }
    if (exp_dir_.empty()) exp_dir_ = member.prepared.exp_dir;
    c.experiment_dir = (exp_dir_ / m.name).string();
    c.trainer_common.checkpoint_base_dir = (exp_dir_ / m.name / "checkpoints").string();
    member.prepared.yaml = config::to_yaml(c);
    for (const auto& w : member.prepared.warnings) {
      if (w.find("multi_model") == std::string::npos) say("warning (" + m.name + "): " + w);
    }
    members_.push_back(std::move(member));
  }
  const config::Config& c = members_.front().prepared.config;
  tasks_ = tasks::load_tasks(c.task_reader, members_.front().prepared.config_dir);
  if (int64_t(tasks_.training.size()) < c.data.train_batch_size) {
    invalid_argument(options_.conf.string() + ": fewer training tasks than ajet.data.train_batch_size");
  }
  stream_ = std::make_unique<tasks::TaskStream>(tasks_.training, c.task_reader.shuffle, uint64_t(c.task_reader.shuffle_seed));
  const int64_t per_epoch = (int64_t(tasks_.training.size()) + c.data.train_batch_size - 1) / c.data.train_batch_size;
  total_steps_ = c.trainer_common.total_training_steps.value_or(c.trainer_common.total_epochs * per_epoch);
}

void MultiJob::start_servers() {
  fs::create_directories(exp_dir_);
  lock_ = std::make_unique<classic::ExperimentLock>(exp_dir_);
  if (auto leftovers = classic::find_leftovers(exp_dir_); !leftovers.empty()) {
    classic::stop_leftovers(leftovers, std::chrono::seconds(15), [this](const std::string& l) { say("ajet: " + l); });
  }
  if (const fs::path moved = classic::move_earlier_run_aside(exp_dir_); !moved.empty()) {
    say("ajet: the earlier run's files were moved to " + moved.string());
  }
  std::vector<std::pair<client::SwarmClient*, std::string>> boot;
  for (Member& m : members_) {
    std::vector<std::string> flags = options_.swarm_flags;
    flags.push_back("--fresh");
    // The launcher is each front's only client; the first front coordinates every episode group, so
    // the others may dial it (--peer).
    flags.insert(flags.end(), {"--max-claims-per-client", "-1"});
    if (&m != &members_.front()) flags.insert(flags.end(), {"--peer", members_.front().child->url()});
    m.child = std::make_unique<classic::SwarmChild>(classic::SwarmChildOptions{
        options_.swarm_binary, exp_dir_ / m.spec.name / "swarm", exp_dir_ / m.spec.name / "swarm.log", flags});
    client::SwarmClientOptions copts;
    copts.client_uuid = "ajet-multi-model";
    m.client = std::make_unique<client::SwarmClient>(m.child->url(), copts);
    boot.emplace_back(m.client.get(), m.prepared.yaml);
    say(fmt::format("ajet: model {} ({}) at {}", m.spec.name, m.prepared.config.model.path, m.child->url()));
  }
  client::SwarmClient::start_multi_engine(boot, false, 600.0);
  for (Member& m : members_) m.last_batch_id = newest_batch_id(m.client->get_engine_status().body);
}

PlayedEpisode MultiJob::play_one(const tasks::Task& task, const std::string& type, const Json& sampling) {
  std::vector<client::SwarmClient*> servers;
  for (Member& m : members_) servers.push_back(m.client.get());
  client::ClaimOptions claim;
  claim.episode_type = type;
  claim.discard_episode_timeout = 600;
  claim.max_wait = 600;
  PlayedEpisode played;
  for (int attempt = 0; attempt < 3 && !stop_; ++attempt) {
    try {
      client::MultiEpisode group = client::MultiEpisode::begin(servers, claim);
      classic::HttpChatModel caller(group.episode(0).base_url, group.episode(0).api_key, sampling);
      classic::HttpChatModel answerer(group.episode(1).base_url, group.episode(1).api_key, sampling);
      played.outcome = run_calc_duo(task, caller, answerer);
      if (type == "eval") {
        group.abort();  // evaluation only: nothing is stored or trained
      } else {
        group.end(task.task_id, {played.outcome.caller, played.outcome.answerer});
      }
      played.ended = true;
      played.error.clear();
      return played;
    } catch (const client::WeightUpdatedHalfway& e) {
      played.error = e.what();  // redo the rollout on the new weights
    } catch (const std::exception& e) {
      played.error = e.what();
    }
  }
  return played;
}

std::vector<PlayedEpisode> MultiJob::play(const std::vector<const tasks::Task*>& tasks, const std::string& type,
                                          const Json& sampling) {
  std::vector<PlayedEpisode> results(tasks.size());
  std::atomic<size_t> next{0};
  const config::Config& c = members_.front().prepared.config;
  const size_t workers = std::max<size_t>(1, std::min<size_t>(size_t(c.rollout.max_env_worker), tasks.size()));
  std::vector<std::thread> threads;
  for (size_t w = 0; w < workers; ++w) {
    threads.emplace_back([&] {
      for (size_t i = next++; i < tasks.size() && !stop_; i = next++) results[i] = play_one(*tasks[i], type, sampling);
    });
  }
  for (auto& t : threads) t.join();
  return results;
}

// Waits for the front's outcome of this step's batch — the first batch newer than the last one seen —
// and returns its stats, or {"trained": false, "error"} when the trainer refused it (e.g. a batch of
// the answerer whose episodes never reached its turn: nothing to train on).
Json MultiJob::trained_stats(Member& m) {
  const auto deadline = Clock::now() + std::chrono::hours(1);
  while (!stop_) {
    client::EngineStatus s = m.client->get_engine_status();
    for (const Json& b : s.body.value("recent_batches", Json::array())) {
      if (b.value("batch_id", int64_t(0)) <= m.last_batch_id) continue;
      m.last_batch_id = b.value("batch_id", int64_t(0));
      if (b.value("trained", false)) return b.value("stats", Json::object());
      return Json{{"trained", false}, {"error", b.value("error", Json::object())}};
    }
    if (s.status == client::kOffline || s.status == client::kCannotConnect || Clock::now() > deadline) {
      fail(ErrorCode::kUnavailable, fmt::format("model {}: the engine is {} while training a step: {}\n{}", m.spec.name,
                                                s.status, s.detail, m.child->last_lines(10)));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));  // polling an observable status
  }
  return Json::object();
}

Json model_stats(const Json& stats) {
  Json out = Json::object();
  if (stats.contains("trained")) return stats;  // refused: {"trained": false, "error"}
  for (const char* key : {"loss", "pg_loss", "kl", "entropy", "grad_norm", "clip_fraction", "lr"}) {
    if (stats.contains(key) && stats[key].is_number()) out[key] = stats[key];
  }
  const Json rollout = stats.value("rollout", Json::object());
  for (const char* key : {"reward_mean", "success_rate", "episodes"}) {
    if (rollout.contains(key) && !rollout[key].is_null()) out[key] = rollout[key];
  }
  return out;
}

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
bool caller_ok(const PlayedEpisode& p) { return p.outcome.caller_right; }

void MultiJob::train_step(int64_t step) {
  const config::Config& c = members_.front().prepared.config;
  const auto t0 = Clock::now();
  std::vector<tasks::Task> batch = stream_->next_batch(size_t(c.data.train_batch_size));
  std::vector<const tasks::Task*> jobs;
  for (const auto& t : batch) {
    for (int64_t r = 0; r < c.rollout.num_repeat; ++r) jobs.push_back(&t);
  }
  std::vector<PlayedEpisode> played = play(jobs, "train", Json::object());
  if (stop_) return;
  int64_t failed = 0;
  for (const auto& p : played) failed += p.ended ? 0 : 1;
  if (failed > 0) {
    const std::string why = [&] {
      for (const auto& p : played) {
        if (!p.ended) return p.error;
      }
      return std::string();
    }();
    fail(ErrorCode::kUnavailable, fmt::format("step {}: {} episodes could not be ended on every model: {}", step,
                                              failed, why));
  }
  Json rec{{"kind", "train"}, {"step", step}, {"pair_success", share(played, pair_ok)},
           {"caller_right", share(played, caller_ok)}, {"episodes", played.size()}};
  if (c.backbone != "debug") {
    for (Member& m : members_) rec[m.spec.name] = model_stats(trained_stats(m));
  }
  rec["step_seconds"] = seconds_since(t0);
  rec["elapsed_seconds"] = seconds_since(t0_);
  record(rec);
  std::string line = fmt::format("step {}/{}  pair success {:.2f}  caller right {:.2f}", step, total_steps_,
                                 rec["pair_success"].get<double>(), rec["caller_right"].get<double>());
  for (Member& m : members_) {
    const Json s = rec.value(m.spec.name, Json::object());
    line += fmt::format("  | {} reward {:.2f} loss {:.4f}", m.spec.name, s.value("reward_mean", 0.0), s.value("loss", 0.0));
  }
  say(line + fmt::format("  ({:.1f} s)", rec["step_seconds"].get<double>()));
}

void MultiJob::validate(int64_t step) {
  const config::Config& c = members_.front().prepared.config;
  size_t n = tasks_.validation.size();
  if (c.trainer_common.val_max_num_task_each_validation && *c.trainer_common.val_max_num_task_each_validation > 0) {
    n = std::min(n, size_t(*c.trainer_common.val_max_num_task_each_validation));
  }
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
  // Each model's front gets the pair's validation (its store and its TensorBoard next to its own curves).
  const Json metrics{{"val/greedy_success", rec["greedy_success"]},
                     {"val/sampled_success", rec["sampled_success"]},
                     {"val/greedy_caller_right", rec["greedy_caller_right"]},
                     {"val/sampled_caller_right", rec["sampled_caller_right"]},
                     {"val/tasks", n}};
  for (Member& m : members_) {
    try {
      m.client->log_metrics(step, metrics);
    } catch (const std::exception& e) {
      log().warn("multi-model: {}: the front did not take the validation metrics: {}", m.spec.name, e.what());
    }
  }
  say(fmt::format("validation at step {}: pair success greedy {:.3f}, T=1 {:.3f} ({} held-out tasks); caller right "
                  "greedy {:.3f}, T=1 {:.3f}",
                  step, rec["greedy_success"].get<double>(), rec["sampled_success"].get<double>(), n,
                  rec["greedy_caller_right"].get<double>(), rec["sampled_caller_right"].get<double>()));
}

void MultiJob::record(Json r) {
  classic::append_jsonl(exp_dir_ / "metrics.jsonl", r);
  result_.records.push_back(std::move(r));
}

void MultiJob::shut_down() {
  for (Member& m : members_) {
    try {
      if (m.client) m.client->stop_engine(true, 60.0);
    } catch (const std::exception& e) {
      say("ajet: stopping model " + m.spec.name + ": " + e.what());
    }
    if (m.child) m.child->stop();
  }
}

classic::RunResult MultiJob::run() {
  prepare();
  const config::Config& c = members_.front().prepared.config;
  result_.exp_dir = exp_dir_;
  say(fmt::format("ajet: multi-model run ({}): {} models, {} backbone, {} training / {} validation tasks, {} steps "
                  "of {} tasks x {} episodes",
                  spec_.workflow, members_.size(), c.backbone, tasks_.training.size(), tasks_.validation.size(),
                  total_steps_, c.data.train_batch_size, c.rollout.num_repeat));
  say("ajet: experiment directory " + exp_dir_.string());
  try {
    start_servers();
    if (c.trainer_common.val_before_train) validate(0);
    const int64_t test_freq = c.trainer_common.test_freq;
    for (int64_t step = 1; step <= total_steps_ && !stop_; ++step) {
      train_step(step);
      result_.steps_done = step;
      const auto budget = c.trainer_common.max_training_seconds;
      const double mean_step = seconds_since(t0_) / double(step);
      const bool out_of_time = budget && step < total_steps_ && seconds_since(t0_) + 2 * mean_step > double(*budget);
      if (!stop_ && test_freq > 0 && (step % test_freq == 0 || step == total_steps_ || out_of_time)) validate(step);
      if (out_of_time) {
        say(fmt::format("ajet: stopping after step {}: max_training_seconds ({:.0f} s) would pass", step, double(*budget)));
        break;
      }
    }
  } catch (...) {
    shut_down();
    throw;
  }
  result_.stopped = stop_;
  shut_down();
  return result_;
}

}  // namespace

classic::RunResult run_multi_model(const classic::LaunchOptions& options, const MultiModelSpec& spec,
                                   const std::atomic<bool>& stop, const std::function<void(const std::string&)>& out) {
  MultiJob job(options, spec, stop, out);
  return job.run();
}

}  // namespace ajet::multi_model
