// Classic mode's wiring (launcher.h): the parts of a run, put together and driven by the run loop.
//   prepare_config.cc  the config (file, --backbone, --set)
//   run_tasks          the task sources and the mix that draws each step's batch
//   front_session      the front (local child or --swarm-url) and the engine this run owns there
//   step_pipeline      one step: sync (torch, debug) or async, chosen once from the backbone
//   step_rollout       a step's episodes and record; validation: the held-out evaluation
//   run_record         metrics.jsonl, Markdown, reward_curve.html, posted metrics, --resume reload
//   run_loop           the recipe: validate, step, check the time budget, finish
#include "classic/launcher.h"

#include <fmt/format.h>

#include "classic/experiment_dir.h"
#include "classic/front_session.h"
#include "classic/metrics.h"
#include "classic/run_loop.h"
#include "classic/run_parts.h"
#include "classic/run_record.h"
#include "classic/run_tasks.h"
#include "classic/step_pipeline.h"
#include "classic/validation.h"
#include "classic/workflow.h"
#include "client/swarm_client.h"
#include "common/clock.h"
#include "common/log.h"
#include "config/backbone.h"

namespace ajet::classic {

namespace fs = std::filesystem;

namespace {

class Job {
 public:
  Job(const LaunchOptions& options, const std::atomic<bool>& stop,
      std::function<void(const std::string&)> out)
      : options_(options),
        stop_(stop),
        say_(std::move(out)),
        prepared_(prepare_config(options)),
        backbone_(config::backbone_of(prepared_.config)),
        resume_(options.resume),
        record_(prepared_, say_),
        front_(options, prepared_, say_) {}

  RunResult run();

 private:
  void say(const std::string& line) { say_(line); }
  void describe(int64_t total_steps);
  void claim_experiment_dir();
  void move_earlier_run_aside_and_say();
  void boot(RunParts& parts, int64_t total_steps);
  int64_t resume_point(int64_t engine_global_step);
  RunPlan plan(int64_t total_steps) const;
  void finish();
  void say_where_the_model_is(const client::EngineStatus& last);

  const LaunchOptions& options_;
  const std::atomic<bool>& stop_;
  std::function<void(const std::string&)> say_;
  PreparedConfig prepared_;
  config::Backbone backbone_;
  bool resume_;  // --resume, until the front turns out to hold no checkpoint of this run
  RunRecord record_;
  FrontSession front_;
  RunTasks tasks_;
  std::unique_ptr<ExperimentLock> lock_;
  std::unique_ptr<Workflow> workflow_;
  RunResult result_;
  int64_t first_step_ = 1;
};

void Job::describe(int64_t total_steps) {
  const config::Config& c = prepared_.config;
  const bool per_task_agent = tasks_.cocktail() && (c.rollout.user_workflow.empty() ||
                                                    c.rollout.user_workflow == "builtin");
  say(fmt::format(
      "ajet: {} backbone, {} training / {} validation tasks, {} steps of {} tasks x {} episodes, "
      "{} in "
      "parallel; workflow: {}",
      c.backbone, tasks_.training, tasks_.validation, total_steps, c.data.train_batch_size,
      c.rollout.num_repeat, c.rollout.max_env_worker,
      per_task_agent ? "built-in agent of each task's env_type" : workflow_->describe()));
  say("ajet: experiment directory " + prepared_.exp_dir.string());
  if (tasks_.cocktail())
    say("ajet: " +
        cocktail_description(*tasks_.mix, c.task_reader.cocktail, tasks_.sources, total_steps));
}

// The experiment directory becomes this run's: the lock, leftovers of an earlier run stopped, and
// (a new run) the earlier run's files moved aside or (--resume) kept to continue.
void Job::claim_experiment_dir() {
  const fs::path& dir = prepared_.exp_dir;
  lock_ = std::make_unique<ExperimentLock>(dir);
  if (!front_.remote()) {
    stop_leftovers(find_leftovers(dir), std::chrono::seconds(30),
                   [this](const std::string& line) { say(line); });
  } else {
    // This run starts no process, so it stops none either: a front it did not start is not its own.
    for (const Leftover& l : find_leftovers(dir)) {
      say(
          fmt::format("ajet: {} pid {} runs on {}; left alone (--swarm-url: this run starts and "
                      "signals no process)",
                      l.program, l.pid, dir.string()));
    }
  }
  if (resume_) {
    const bool earlier = front_.remote() ? fs::exists(dir / "metrics.jsonl")
                                         : fs::exists(dir / "swarm" / "swarm.sqlite");
    if (!earlier)
      say("ajet: --resume: " + dir.string() + " holds no earlier run; starting a new one");
    return;
  }
  move_earlier_run_aside_and_say();
}

void Job::move_earlier_run_aside_and_say() {
  const fs::path& dir = prepared_.exp_dir;
  if (const fs::path moved = move_earlier_run_aside(dir); !moved.empty()) {
    say("ajet: " + dir.string() +
        " held an earlier run; its files (metrics.jsonl, checkpoints, logs, store) are now in " +
        moved.string() + " (to continue that run instead, move them back and rerun with --resume)");
  }
}

// --resume: the step the earlier run got to, from the front (trained steps: the checkpoint the
// engine resumed from) or, for the debug backbone (nothing trained), from metrics.jsonl; the
// earlier records up to that step are kept for the summary and the reward curve.
int64_t Job::resume_point(int64_t engine_global_step) {
  std::vector<Json> earlier = RunRecord::read_earlier(record_.metrics_path());
  int64_t step = engine_global_step;
  if (!config::trains(backbone_)) {
    step = 0;
    for (const auto& r : earlier) {
      if (r.value("kind", "") == "train") step = std::max(step, r.value("step", int64_t(0)));
    }
  }
  record_.keep_earlier(std::move(earlier), step);
  return step;
}

// Syncs the config and starts the engine; a resumed run continues after the step it got to.
void Job::boot(RunParts& parts, int64_t total_steps) {
  const FrontSession::Boot booted = front_.boot(resume_);
  if (resume_ && !booted.resume) move_earlier_run_aside_and_say();
  resume_ = booted.resume;
  if (!resume_) {
    parts.start_global_step = booted.global_step;
    return;
  }
  const int64_t done = resume_point(booted.global_step);
  // Launcher steps and global steps agree in a run of this launcher (a new run's store starts at
  // 0).
  parts.start_global_step = config::trains(backbone_) ? 0 : booted.global_step;
  first_step_ = done + 1;
  result_.resumed_from_step = done;
  const Json ledger = front_.client().get_ledger(true);
  const std::string cursor_from =
      tasks_.restore_cursor(record_.records(), done, ledger.value("rows", Json::array()));
  record_.mark_resume(Json{
      {"kind", "resume"}, {"step", done}, {"global_step", booted.global_step}, {"elapsed_s", 0.0}});
  say(
      fmt::format("ajet: --resume: continuing after step {} of {} (global step {}); metrics.jsonl "
                  "continues after a "
                  "{{\"kind\":\"resume\"}} line",
                  done, total_steps, booted.global_step));
  const Json summary = ledger.value("summary", Json::object());
  say(fmt::format(
      "ajet: --resume: task cursor from {}; task ledger: {} trained, {} in flight (drawn again), "
      "{} skipped, {} duplicated",
      cursor_from, summary.value("trained", int64_t(0)), summary.value("in_flight", int64_t(0)),
      summary.value("skipped", int64_t(0)), summary.value("duplicated", int64_t(0))));
}

RunPlan Job::plan(int64_t total_steps) const {
  const config::Config& c = prepared_.config;
  RunPlan p;
  p.first_step = first_step_;
  p.total_steps = total_steps;
  p.test_freq = c.trainer_common.test_freq;
  p.validate_before = c.trainer_common.val_before_train || c.trainer_common.val_only;
  if (c.trainer_common.max_training_seconds)
    p.max_training_seconds = double(*c.trainer_common.max_training_seconds);
  return p;
}

RunResult Job::run() {
  const config::Config& c = prepared_.config;
  for (const auto& w : prepared_.warnings) say("warning: " + w);
  result_.exp_dir = prepared_.exp_dir;
  tasks_ = RunTasks::load(c, prepared_.config_dir, options_.conf.string());
  claim_experiment_dir();
  workflow_ = make_workflow(c, prepared_.config_dir, prepared_.exp_dir);
  const int64_t total_steps = tasks_.total_steps(c);
  tasks_.mix->check_fits(total_steps);
  describe(total_steps);
  RunParts parts{prepared_, backbone_, stop_, say_, front_, record_, tasks_, *workflow_};
  parts.interactive = options_.interactive;
  front_.connect(resume_, [this](int pid) { lock_->set_front_pid(pid); });
  record_.attach(&front_.client());
  std::unique_ptr<RunLoop> loop;
  try {
    boot(parts, total_steps);
    std::unique_ptr<StepPipeline> pipeline = make_step_pipeline(parts);
    RunLoopHooks hooks{[&](int64_t step) { run_validation(parts, step); },
                       [this](int64_t step) { return record_.has_validation(step); }, say_,
                       [&parts] { return seconds_since(parts.t0); }};
    loop = std::make_unique<RunLoop>(plan(total_steps), *pipeline, hooks, stop_);
    parts.progress = [&loop] { return loop->progress(); };
    loop->run();
  } catch (...) {
    try {
      front_.stop_engine(30.0);
    } catch (...) {
    }
    front_.stop_front();
    throw;
  }
  result_.steps_done = parts.steps_done;
  result_.stopped = stop_;
  if (stop_)
    say(front_.remote() ? "ajet: stop requested; stopping the engine on the front"
                        : "ajet: stop requested; stopping the engine and the front");
  finish();
  return result_;
}

// Stops engine and front, then says where everything is: metrics, reward curve, the final model.
void Job::finish() {
  try {
    front_.stop_engine(
        60.0);  // the front saves a last checkpoint of steps trained since the last one
  } catch (const std::exception& e) {
    log().warn("classic: stop_engine: {}", e.what());
  }
  const client::EngineStatus last =
      front_.client().get_engine_status();  // where that checkpoint is
  record_
      .write_snapshot();  // the last numbers (the front records the last batch as the engine stops)
  front_.stop_front();
  result_.records = record_.records();
  if (const std::string summary = learning_summary(result_.records); !summary.empty())
    say("ajet: " + summary);
  for (const std::string& line : cocktail_learning_summary(result_.records)) say("ajet: " + line);
  if (record_.jsonl()) say("ajet: metrics: " + record_.metrics_path().string());
  if (config::logger_enabled(prepared_.config, "tensorboard")) {
    if (!front_.remote()) {
      say("ajet: TensorBoard: tensorboard --logdir " +
          (prepared_.exp_dir / "tensorboard").string());
    } else if (const std::string front_dir = front_.experiment_dir_for_messages();
               !front_dir.empty()) {
      say("ajet: TensorBoard (the front writes it): tensorboard --logdir " + front_dir +
          "/tensorboard");
    }
  }
  say("ajet: reward curve: " + record_.curve_path().string());
  say_where_the_model_is(last);
}

void Job::say_where_the_model_is(const client::EngineStatus& last) {
  const Json checkpoint = last.body.value("latest_checkpoint", Json(nullptr));
  if (front_.engine_replaced()) {
    say("ajet: the front's newest checkpoint is the engine's that replaced this run's; this run's "
        "are under " +
        (front_.front_run_dir().empty() ? std::string("its experiment directory")
                                        : front_.front_run_dir()) +
        "/saved_checkpoints on the front");
  } else if (checkpoint.is_string() && !checkpoint.get<std::string>().empty()) {
    result_.final_checkpoint = checkpoint.get<std::string>();
    say("ajet: final model: " + (result_.final_checkpoint / "model").string() +
        (front_.remote() ? " on the front" : "") + " (checkpoint " +
        result_.final_checkpoint.filename().string() + "; continue this run with --resume)");
  } else if (last.status == client::kCannotConnect) {
    say("ajet: the front did not answer after stop_engine, so where the final checkpoint is is "
        "unknown (see " +
        (front_.remote() ? front_.url() + "/ui/" : (prepared_.exp_dir / "swarm").string()) + ")");
  } else if (config::trains(backbone_)) {
    say("ajet: no checkpoint was written (no step was trained)");
  }
}

}  // namespace

RunResult run_classic(const LaunchOptions& options, const std::atomic<bool>& stop,
                      const std::function<void(const std::string&)>& out) {
  Job job(options, stop, out);
  return job.run();
}

}  // namespace ajet::classic
