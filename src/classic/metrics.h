// Numbers of a classic-mode run: per-step rollout summaries, validation summaries (greedy and
// pass@k), trainer metrics picked out of what the front reports, the one-line progress bar, the
// per-step line and metrics.jsonl. Pure functions: no I/O except the writer.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "classic/episode_runner.h"
#include "classic/run_loop.h"
#include "common/json.h"

namespace ajet::classic {

struct RolloutSummary {
  int64_t episodes = 0;  // ended episodes
  int64_t failed = 0;    // never ended
  double reward_mean = 0;
  double success_rate = 0;
  int64_t llm_calls = 0;
  int64_t completion_tokens = 0;
  Json terminations = Json::object();  // termination -> count
  Json log_metrics = Json::object();   // name -> mean over episodes that reported it
};
RolloutSummary summarize(const std::vector<EpisodeResult>& results);

// GRPO groups among ended train episodes (by task id) and those whose rewards are not all equal:
// the ones that carry a signal (dynamic sampling counts them).
struct GroupCounts {
  int64_t groups = 0;
  int64_t informative = 0;
};
GroupCounts count_groups(const std::vector<EpisodeResult>& results);

// Validation: greedy results (one per task) and k sampled results per task.
struct ValidationSummary {
  int64_t tasks = 0;
  double greedy_success = 0;
  double greedy_reward = 0;
  int64_t k = 0;
  double sampled_success = 0;  // mean success of the k samples (T = rollout temperature)
  double pass_at_k = 0;        // share of tasks with at least one success among the k samples
};
ValidationSummary summarize_validation(const std::vector<EpisodeResult>& greedy,
                                       const std::vector<EpisodeResult>& sampled, int64_t k);

// Trainer metrics of the step from whatever the front reports (its status body or pool info):
// looks for an object under "last_train_stats", "train_stats" or "trainer" and keeps numbers whose
// names contain loss, kl, entropy, merge, clip, grad, lr, tokens. {} when the front reports none.
Json trainer_metrics(const Json& status_body, const Json& pool_info);

// "step 3/20 [#######.....] 96/128 episodes  reward 0.41  312 tok/s"
std::string progress_bar(int64_t step, int64_t total_steps, int64_t done, int64_t total,
                         double reward_mean, double tokens_per_s, int width = 24);
// The same with the run's progress label: "step 3/~20 (1m10s left) [###...] ..." in a time-bounded
// run.
std::string progress_bar(const StepProgress& progress, int64_t done, int64_t total,
                         double reward_mean, double tokens_per_s, int width = 24);
// "step 3/20  reward 0.412  success 38.3%  loss 0.0123  kl 0.0004  entropy 0.81  merge 3.10x  12.4
// s"; async records add "staleness 0.62/1" (mean/max policy versions behind) before the time
std::string step_line(const Json& record, int64_t total_steps);
// The same with the run's progress label (StepProgress::label) after "step ".
std::string step_line(const Json& record, const std::string& progress_label);
// "val @ step 3  greedy 45.0%  pass@4 71.0%  T=1.0 success 40.5%  (100 tasks)"
std::string validation_line(const Json& record);
// What the run did to held-out success: the first and the last validation record among `records`,
// e.g. "held-out success, step 0 -> 96: sampled 48.5% -> 77.0% (+28.5), greedy 65.0% -> 87.0%
// (+22.0), pass@4 85.0% -> 93.0% (+8.0)". Empty when there are fewer than two validation records.
std::string learning_summary(const std::vector<Json>& records);

// Cocktail runs (records with a "cocktail" object: task name -> that task's numbers):
// "  tasks: calc 12 (75%) reward 0.412 success 41.0% | frozenlake 4 (25%) reward 0.250
// success 25.0%"
std::string cocktail_step_line(const Json& record);
// "  val per task: calc greedy 45.0% pass@4 71.0% sampled 40.5% (100) | frozenlake …"
std::string cocktail_validation_line(const Json& record);
// learning_summary per task of a cocktail, one line each: "held-out success of calc, step 0 -> 24:
// …".
std::vector<std::string> cocktail_learning_summary(const std::vector<Json>& records);

Json rollout_json(const RolloutSummary& s);
Json validation_json(const ValidationSummary& s);

// Appends one JSON object per line.
void append_jsonl(const std::filesystem::path& path, const Json& record);

}  // namespace ajet::classic
