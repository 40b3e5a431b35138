#include "classic/step_pipeline.h"

#include <fmt/format.h>

#include <deque>
#include <thread>

#include "classic/metrics.h"
#include "classic/run_metrics.h"
#include "classic/step_rollout.h"
#include "client/swarm_client.h"
#include "common/clock.h"
#include "common/error.h"
#include "common/log.h"

namespace ajet::classic {

using Clock = std::chrono::steady_clock;

namespace {

class PipelineBase : public StepPipeline {
 public:
  explicit PipelineBase(RunParts& parts) : parts_(parts) {}

 protected:
  // Waits until the front's global step reaches `target`; fails the run when the front says the
  // batch cannot train (its newest record of it: not_found at once, any other refusal after 10 s
  // without a later batch training), the engine went away, or another client replaced it.
  void wait_for_global_step(int64_t target);
  // The step's record with what training added; to metrics.jsonl, the console, Markdown, the store.
  void record_step(PendingStep& pending, Json trainer, int64_t global_step, double step_time_s,
                   Json staleness);

  RunParts& parts_;

 private:
  void check_refusal(const client::EngineStatus& s, int64_t target,
                     Clock::time_point& refused_since);
};

void PipelineBase::wait_for_global_step(int64_t target) {
  const auto deadline = Clock::now() + std::chrono::hours(2);
  auto refused_since = Clock::time_point::max();
  while (!parts_.stop) {
    const client::EngineStatus s = parts_.client().get_engine_status();
    parts_.front.check_engine_is_ours(s);
    if (s.global_step >= target) return;
    if (s.status == client::kOffline || s.status == client::kCannotConnect) {
      fail(ErrorCode::kUnavailable, "the engine is " + s.status + " while training step " +
                                        std::to_string(target) + ": " + s.detail +
                                        parts_.front.exit_lines());
    }
    check_refusal(s, target, refused_since);
    if (Clock::now() > deadline)
      fail(ErrorCode::kUnavailable, "training step " + std::to_string(target) + " never finished");
    std::this_thread::sleep_for(
        std::chrono::milliseconds(100));  // polling an observable status, not synchronising
  }
}

// async: batches are not numbered by steps, and a batch that failed leaves global_step short of
// every later target, so the newest record says it.
void PipelineBase::check_refusal(const client::EngineStatus& s, int64_t target,
                                 Clock::time_point& refused_since) {
  const client::BatchOutcome* outcome = parts_.backbone == config::Backbone::kAsync
                                            ? s.newest_batch()
                                            : s.batch_formed_at(target - 1);
  if (outcome == nullptr || outcome->trained || s.status == client::kWeightSyncing) {
    refused_since = Clock::time_point::max();
    return;
  }
  const std::string code = outcome->error_code();
  if (refused_since == Clock::time_point::max()) refused_since = Clock::now();
  if (code == "not_found" || Clock::now() - refused_since > std::chrono::seconds(10)) {
    fail(ErrorCode::kFailedPrecondition,
         "the front cannot train (" + code + ": " + outcome->error.value("message", "") +
             "); run with --backbone debug to roll out without training");
  }
}

void PipelineBase::record_step(PendingStep& pending, Json trainer, int64_t global_step,
                               double step_time_s, Json staleness) {
  const config::Config& c = parts_.config();
  const int64_t step = pending.step;
  Json r = std::move(pending.record);
  r["global_step"] = global_step;
  r["elapsed_s"] = seconds_since(parts_.t0);
  r["step_time_s"] = step_time_s;
  r["trainer"] = std::move(trainer);
  if (!staleness.is_discarded()) r["staleness"] = std::move(staleness);
  if (parts_.record.console()) {
    StepProgress progress = parts_.progress();
    progress.step = step;
    parts_.say(step_line(r, progress.label()));
    if (parts_.tasks.cocktail()) parts_.say(cocktail_step_line(r));
  }
  parts_.record.append_markdown(c.trainer_common.train_print_to_markdown_file_path,
                                pending.markdown);
  // The front records the step's batch (rollout/reward_mean, train/loss …) at the batch's global
  // step, start + step - 1; the launcher's own numbers go next to them. Its success rate only where
  // no episode reported is_success (the front's rollout/success_rate counts reported ones).
  parts_.record.post_metrics(parts_.start_global_step + step - 1,
                             train_step_metrics(r, !pending.judged));
  parts_.record.add(std::move(r));
  parts_.steps_done = step;
}

// torch and debug: roll out, wait for the batch to train (torch), record.
class SyncPipeline : public PipelineBase {
 public:
  using PipelineBase::PipelineBase;
  void run_step(int64_t step) override {
    PendingStep pending = roll_out_step(parts_, step);
    if (!pending.rolled_out) return;
    const auto t_train = Clock::now();
    const bool trains = config::trains(parts_.backbone);
    if (trains) wait_for_global_step(parts_.start_global_step + step);
    pending.record["train_wait_s"] = seconds_since(t_train);
    const client::EngineStatus status = parts_.client().get_engine_status();
    Json trainer = trainer_metrics(status.body, parts_.client().get_rollout_stat());
    if (trainer.empty() && trains) {
      // The trainer's statistics of this step's batch, as the front reports them (recent_batches;
      // the front records them in the same update that advances global_step).
      const client::BatchOutcome* b =
          status.batch_trained_into(parts_.start_global_step + step, true);
      if (b != nullptr)
        trainer = trainer_metrics(Json{{"last_train_stats", b->stats}}, Json::object());
    }
    record_step(pending, std::move(trainer), status.global_step, seconds_since(pending.started),
                Json(Json::value_t::discarded));
  }
};

// async: step s may roll out once version start + s - 1 - max_staleness is served; the steps before
// it train meanwhile, and each is recorded once its batch trained.
class AsyncPipeline : public PipelineBase {
 public:
  using PipelineBase::PipelineBase;
  void run_step(int64_t step) override;
  void settle() override {
    if (pending_.empty()) return;
    wait_for_global_step(parts_.start_global_step + pending_.back().step);
    finish_trained_steps();
  }

 private:
  void finish_trained_steps();
  void wait_for_batch_closed(int64_t step);
  Json batch_staleness(const client::EngineStatus& status, int64_t version);
  std::deque<PendingStep> pending_;  // steps rolled out whose batches have not trained yet
};

// Tokens sampled at policy version v may train at most max_staleness versions later. Step s's batch
// trains from version start + s - 1, so its rollout may begin once version start + s - 1 -
// max_staleness is served; until then the batches before it are training.
void AsyncPipeline::run_step(int64_t step) {
  const auto t_wait = Clock::now();
  wait_for_global_step(parts_.start_global_step + step - 1 - parts_.config().async.max_staleness);
  const double waited = seconds_since(t_wait);
  finish_trained_steps();
  if (parts_.stop) return;
  PendingStep pending = roll_out_step(parts_, step);
  if (!pending.rolled_out) return;
  pending.record["train_wait_s"] = waited;
  pending.rollout_ended = Clock::now();
  // The step's episodes are one batch: the next step claims only after the front closed this one
  // (with max_staleness > 1 the front may still hold an earlier batch for the trainer, and a batch
  // closes only when that one is taken).
  wait_for_batch_closed(step);
  pending_.push_back(std::move(pending));
}

void AsyncPipeline::finish_trained_steps() {
  while (!pending_.empty() && !parts_.stop) {
    const client::EngineStatus status = parts_.client().get_engine_status();
    const int64_t version =
        parts_.start_global_step + pending_.front().step;  // what the batch trained into
    if (status.global_step < version) return;
    PendingStep& p = pending_.front();
    Json trainer = Json::object();
    if (const client::BatchOutcome* b = status.batch_trained_into(version, false); b != nullptr) {
      trainer = trainer_metrics(Json{{"last_train_stats", b->stats}}, Json::object());
    }
    // The launcher's time on the step (waiting for the staleness bound, then the rollout); its
    // training overlapped the next step's rollout.
    const double step_time =
        p.record.value("train_wait_s", 0.0) + p.record.value("rollout_time_s", 0.0);
    record_step(p, std::move(trainer), version, step_time, batch_staleness(status, version));
    pending_.pop_front();
  }
}

void AsyncPipeline::wait_for_batch_closed(int64_t step) {
  const auto deadline = Clock::now() + std::chrono::hours(2);
  while (!parts_.stop) {
    const Json pool = parts_.client().get_rollout_stat();
    // An unreachable front answers {}; the next step's claims will say what is wrong.
    if (!pool.is_object() || pool.value("completed_episodes", int64_t(0)) == 0) return;
    if (Clock::now() > deadline)
      fail(ErrorCode::kUnavailable,
           fmt::format("step {}: the front never closed the step's batch", step));
    std::this_thread::sleep_for(
        std::chrono::milliseconds(50));  // polling an observable status, not synchronising
  }
}

// The staleness of the batch trained into policy version `version`: the front's record of it
// (recent_batches: its policy_version, staleness_max) and the mean over its episodes from the
// metrics it stored at step version - 1 (the store may take a moment to have it).
Json AsyncPipeline::batch_staleness(const client::EngineStatus& status, int64_t version) {
  const client::BatchOutcome* b = status.batch_trained_into(version, false);
  if (b == nullptr) return Json(nullptr);
  const Json rollout = b->stats.value("rollout", Json::object());
  if (!rollout.contains("staleness_max")) return Json(nullptr);
  Json out{{"trained_from", rollout.value("policy_version", Json(nullptr))},
           {"max", rollout["staleness_max"]},
           {"mean", Json(nullptr)},
           {"allowed", parts_.config().async.max_staleness}};
  const auto deadline = Clock::now() + std::chrono::seconds(5);
  while (!parts_.stop && Clock::now() <= deadline) {
    try {
      const Json history =
          parts_.client().get_metrics_history({"rollout/staleness_mean"}, version - 2);
      for (const Json& point :
           history.value("series", Json::object()).value("rollout/staleness_mean", Json::array())) {
        if (point.is_array() && point.size() >= 2 && point[0] == version - 1) {
          out["mean"] = point[1];
          return out;
        }
      }
    } catch (const std::exception& e) {
      log().warn("classic: staleness of step {}: {}", version, e.what());
      return out;
    }
    std::this_thread::sleep_for(
        std::chrono::milliseconds(50));  // the store writes behind the status
  }
  return out;
}

}  // namespace

std::unique_ptr<StepPipeline> make_step_pipeline(RunParts& parts) {
  if (parts.backbone == config::Backbone::kAsync) return std::make_unique<AsyncPipeline>(parts);
  return std::make_unique<SyncPipeline>(parts);
}

}  // namespace ajet::classic
