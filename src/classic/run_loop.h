// The run loop: the recipe of a run and nothing else. Validate first if asked (or make up a
// validation a resumed run lost), then step by step: run the step, check the time budget, validate
// when due; at the end every step in flight is settled. What a step is (sync or async rollout and
// training, one model or several) is the StepPipeline's business; validation is a callback.
//
// The loop is steppable: tick() does one unit of work (the first validation, or one step with its
// validation), so tests drive it with a fake pipeline and a fake clock.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>

namespace ajet::classic {

// One step of a run, however it is carried out.
class StepPipeline {
 public:
  virtual ~StepPipeline() = default;
  // Rolls out step `step` and trains it, or (async) starts it while earlier steps train.
  virtual void run_step(int64_t step) = 0;
  // Every step started so far is trained and recorded (async: before a validation and at the end).
  virtual void settle() {}
};

// Where the run stands, for progress lines: "54/400", or in a time-bounded run "54/~60 (1m10s
// left)".
struct StepProgress {
  int64_t step = 0;
  int64_t total = 0;
  std::optional<int64_t> estimated_total;  // max_training_seconds: the steps the budget allows
  std::optional<double> seconds_left;      // max_training_seconds: what is left of it
  std::string label() const;
};

struct RunPlan {
  int64_t first_step = 1;  // > 1 when a resumed run continues after first_step - 1
  int64_t total_steps = 0;
  int64_t test_freq = 0;         // validate every test_freq steps and after the last (0: never)
  bool validate_before = false;  // val_before_train (or val_only): validate at step 0
  std::optional<double> max_training_seconds;
};

struct RunLoopHooks {
  std::function<void(int64_t step)> validate;
  std::function<bool(int64_t step)> has_validation;  // a resumed run's records hold it already
  std::function<void(const std::string&)> say;
  std::function<double()> elapsed_s;  // seconds since the run started
};

class RunLoop {
 public:
  RunLoop(RunPlan plan, StepPipeline& pipeline, RunLoopHooks hooks, const std::atomic<bool>& stop);

  // One unit of work; false once the run is over (all steps done, the budget spent, or a stop).
  bool tick();
  void run() {
    while (tick()) {
    }
  }
  int64_t steps_done() const { return last_step_; }
  bool out_of_time() const { return out_of_time_; }
  StepProgress progress() const;

 private:
  void first_validation();
  void step_once(int64_t step);
  bool budget_spent_after(int64_t step, double step_s);
  void validate(int64_t step);

  RunPlan plan_;
  StepPipeline& pipeline_;
  RunLoopHooks hooks_;
  const std::atomic<bool>& stop_;
  bool started_ = false, done_ = false, out_of_time_ = false;
  int64_t next_step_ = 1, last_step_ = 0, current_step_ = 0;
  double train_s_ = 0, last_step_s_ = 0, last_validation_s_ = 0, step_start_s_ = 0;
};

}  // namespace ajet::classic
