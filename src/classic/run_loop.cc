#include "classic/run_loop.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

namespace ajet::classic {
namespace {

// How long the next step is expected to take: the longer of the mean over `steps` and the latest.
// Steps grow longer as a run goes (dynamic sampling needs more task batches once most groups
// succeed), so the mean alone would promise steps the budget cannot pay for.
double next_step_estimate(double total_s, int64_t steps, double latest_s) {
  return std::max(total_s / double(std::max<int64_t>(steps, 1)), latest_s);
}

}  // namespace

std::string StepProgress::label() const {
  if (!seconds_left) return fmt::format("{}/{}", step, total);
  const int64_t left = std::max<int64_t>(0, int64_t(std::lround(*seconds_left)));
  const std::string time =
      left >= 60 ? fmt::format("{}m{:02d}s", left / 60, left % 60) : fmt::format("{}s", left);
  if (!estimated_total) return fmt::format("{}/{} ({} left)", step, total, time);
  return fmt::format("{}/~{} ({} left)", step, *estimated_total, time);
}

RunLoop::RunLoop(RunPlan plan, StepPipeline& pipeline, RunLoopHooks hooks,
                 const std::atomic<bool>& stop)
    : plan_(plan),
      pipeline_(pipeline),
      hooks_(std::move(hooks)),
      stop_(stop),
      next_step_(plan.first_step),
      last_step_(plan.first_step - 1) {}

bool RunLoop::tick() {
  if (done_) return false;
  if (!started_) {
    started_ = true;
    first_validation();
  } else if (next_step_ <= plan_.total_steps && !stop_) {
    step_once(next_step_++);
  }
  done_ = stop_ || out_of_time_ || next_step_ > plan_.total_steps;
  if (done_ && !stop_) pipeline_.settle();
  return !done_;
}

// A new run validates at step 0 when asked; a resumed run makes up the validation it lost (stopped
// after a step's checkpoint, before that step's validation), so the records match an uninterrupted
// run.
void RunLoop::first_validation() {
  const int64_t resumed_after = plan_.first_step - 1;
  if (resumed_after == 0) {
    if (plan_.validate_before && !hooks_.has_validation(0)) validate(0);
    return;
  }
  const bool scheduled = plan_.test_freq > 0 && (resumed_after % plan_.test_freq == 0 ||
                                                 resumed_after == plan_.total_steps);
  if (scheduled && !hooks_.has_validation(resumed_after)) {
    hooks_.say(fmt::format(
        "ajet: --resume: step {} has no validation record (the run stopped between the step and "
        "its validation); validating it now",
        resumed_after));
    validate(resumed_after);
  }
}

void RunLoop::step_once(int64_t step) {
  const double start = step_start_s_ = hooks_.elapsed_s();
  current_step_ = step;
  pipeline_.run_step(step);
  last_step_s_ = hooks_.elapsed_s() - start;
  train_s_ += last_step_s_;
  if (stop_) return;
  last_step_ = step;
  out_of_time_ = budget_spent_after(step, last_step_s_);
  const bool due = plan_.test_freq > 0 &&
                   (step % plan_.test_freq == 0 || step == plan_.total_steps || out_of_time_);
  if (!due) return;
  pipeline_.settle();  // async runs ahead of training: validation sees every step so far trained
  const double validation_start = hooks_.elapsed_s();
  validate(step);
  last_validation_s_ = hooks_.elapsed_s() - validation_start;
}

// max_training_seconds: would the next step (and a validation after it) end too late?
bool RunLoop::budget_spent_after(int64_t step, double step_s) {
  if (!plan_.max_training_seconds || step >= plan_.total_steps) return false;
  const double next_step_s = next_step_estimate(train_s_, step - plan_.first_step + 1, step_s);
  const double now = hooks_.elapsed_s();
  if (now + next_step_s + last_validation_s_ <= *plan_.max_training_seconds) return false;
  hooks_.say(
      fmt::format("ajet: stopping after step {} of {}: another step (~{:.1f} s) would pass "
                  "max_training_seconds ({:.0f} s, {:.0f} s gone)",
                  step, plan_.total_steps, next_step_s, *plan_.max_training_seconds, now));
  return true;
}

void RunLoop::validate(int64_t step) {
  if (!stop_) hooks_.validate(step);
}

// Asked during a step (its line, its progress bar), the step counts as done at its time so far.
StepProgress RunLoop::progress() const {
  StepProgress p{std::max(current_step_, last_step_), plan_.total_steps, {}, {}};
  if (!plan_.max_training_seconds) return p;
  const double now = hooks_.elapsed_s();
  p.seconds_left = std::max(0.0, *plan_.max_training_seconds - now);
  const bool in_step = current_step_ > last_step_;
  const int64_t done = last_step_ - plan_.first_step + 1 + (in_step ? 1 : 0);
  if (done <= 0) return p;
  const double this_step_s = in_step ? now - step_start_s_ : last_step_s_;
  const double per_step = std::max(
      next_step_estimate(train_s_ + (in_step ? this_step_s : 0.0), done, this_step_s), 1e-9);
  const int64_t more =
      int64_t(std::floor((*p.seconds_left - last_validation_s_) / per_step + 1e-6));
  p.estimated_total =
      std::clamp<int64_t>(p.step + std::max<int64_t>(more, 0), p.step, plan_.total_steps);
  return p;
}

}  // namespace ajet::classic
