#include "classic/step_rollout.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <deque>
#include <set>

#include "classic/episode_runner.h"
#include "classic/markdown_tables.h"
#include "classic/metrics.h"
#include "client/swarm_client.h"
#include "common/clock.h"
#include "common/error.h"
#include "common/log.h"
#include "common/mix.h"

namespace ajet::classic {

using Clock = std::chrono::steady_clock;

uint64_t mix_seed(uint64_t a, uint64_t b) {
  return splitmix64_finalize(a * kGoldenGamma + b + 0x632BE59BD9B4E5ULL);
}

namespace {

// Episodes of the step so far: counts for the progress bar and the groups that carry a signal.
struct StepEpisodes {
  std::deque<std::vector<tasks::Task>> batches;  // the jobs point into these
  std::vector<EpisodeResult> results;
  int64_t done = 0, tokens = 0, submitted = 0, gen_batches = 0, groups = 0, informative = 0;
  double reward_sum = 0;
};

// The progress bar: redrawn in place on a terminal. Elsewhere (a log) the step's line says it all;
// with the console logger off, the final bar is the step's one line.
void draw_progress(RunParts& parts, const StepEpisodes& e, Clock::time_point t0, bool final_line) {
  if (!parts.interactive && (!final_line || parts.record.console())) return;
  const double tps = double(e.tokens) / std::max(1e-3, seconds_since(t0));
  const std::string bar = progress_bar(parts.progress(), e.done, e.submitted,
                                       e.done ? e.reward_sum / double(e.done) : 0.0, tps);
  if (!parts.interactive) return parts.say(bar);
  std::fprintf(stderr, "\r%s%s", bar.c_str(), final_line ? "\n" : "");
  std::fflush(stderr);
}

// One task batch of the step: its train_batch_size × num_repeat episodes.
void run_task_batch(RunParts& parts, int64_t step, std::set<std::string>& ids, StepEpisodes& e,
                    Clock::time_point t0) {
  const config::Config& c = parts.config();
  std::vector<tasks::Task>& batch = e.batches.emplace_back(parts.tasks.mix->draw(step, ids));
  // The task ledger holds every draw before an episode of it runs (docs/classic.md "The task
  // ledger").
  parts.client().ledger_draw(step, parts.tasks.ledger_draws());
  std::vector<EpisodeJob> jobs;
  for (size_t i = 0; i < batch.size(); ++i) {
    for (int64_t rep = 0; rep < c.rollout.num_repeat; ++rep) {
      const uint64_t index = uint64_t(e.gen_batches) * 1000000 + i * 1000 + uint64_t(rep);
      jobs.push_back(EpisodeJob{
          &batch[i], "train", Json::object(),
          mix_seed(mix_seed(uint64_t(c.task_reader.shuffle_seed), uint64_t(step)), index), rep});
    }
  }
  e.submitted += int64_t(jobs.size());
  EpisodeRunner runner(parts.client(), parts.workflow,
                       RunnerOptions{c.rollout.max_env_worker, 600, 3,
                                     [&parts] { return parts.front.exit_lines(); }},
                       parts.stop);
  std::vector<EpisodeResult> round = runner.run(jobs, [&](const EpisodeResult& r) {
    if (!r.ended) return;
    e.done += 1;
    e.tokens += r.report.completion_tokens;
    e.reward_sum += r.report.output.reward;
    draw_progress(parts, e, t0, false);
  });
  e.gen_batches += 1;
  const GroupCounts counted = count_groups(round);
  e.groups += counted.groups;
  e.informative += counted.informative;
  e.results.insert(e.results.end(), std::make_move_iterator(round.begin()),
                   std::make_move_iterator(round.end()));
}

void fail_on_lost_episodes(int64_t step, const StepEpisodes& e, const RolloutSummary& rollout) {
  if (rollout.failed == 0) return;
  std::string first;
  for (const auto& r : e.results) {
    if (!r.ended) {
      first = r.error;
      break;
    }
  }
  fail(ErrorCode::kUnavailable,
       fmt::format("step {}: {} episodes could not be stored (first: {}); the batch cannot "
                   "complete",
                   step, rollout.failed, first));
}

// What each task of a cocktail had in this step: its share, its tasks, its episodes' reward and
// success, and its stream's cursor after the step (what --resume restores).
Json cocktail_step_json(const TaskMix& mix, int64_t step, const std::vector<EpisodeResult>& results,
                        int64_t gen_batches) {
  const std::vector<double> shares = mix.shares(step);
  const std::vector<int64_t> counts = mix.counts(step);
  std::vector<std::vector<EpisodeResult>> by_source(mix.sources());
  for (const EpisodeResult& r : results) by_source[mix.source_of(r.job.task->task_id)].push_back(r);
  const Json cursors = mix.cursors();
  Json out = Json::object();
  for (size_t i = 0; i < mix.sources(); ++i) {
    const RolloutSummary summary = summarize(by_source[i]);
    const bool ran =
        summary.episodes > 0;  // a task with no share this step has no reward (null, not 0)
    out[mix.name(i)] = Json{{"share", shares[i]},
                            {"tasks_per_batch", counts[i]},
                            {"tasks", counts[i] * gen_batches},
                            {"episodes", summary.episodes},
                            {"reward_mean", ran ? Json(summary.reward_mean) : Json(nullptr)},
                            {"success_rate", ran ? Json(summary.success_rate) : Json(nullptr)},
                            {"cursor", cursors[mix.name(i)]}};
  }
  return out;
}

std::string step_markdown(const TaskMix& mix, int64_t step,
                          const std::vector<EpisodeResult>& results) {
  std::vector<std::pair<std::string, RolloutTable>> tables = {{"all", rollout_table(results)}};
  if (mix.is_cocktail()) {
    std::vector<std::vector<EpisodeResult>> by_source(mix.sources());
    for (const EpisodeResult& e : results)
      by_source[mix.source_of(e.job.task->task_id)].push_back(e);
    for (size_t i = 0; i < mix.sources(); ++i)
      tables.emplace_back(mix.name(i), rollout_table(by_source[i]));
  }
  return train_markdown(step, tables);
}

// Everything that depends on the task streams is taken now: with async the next step draws its
// tasks before this one's record is finished.
void fill_record(RunParts& parts, PendingStep& pending, const StepEpisodes& e, double rollout_s) {
  const TaskMix& mix = *parts.tasks.mix;
  const RolloutSummary rollout = summarize(e.results);
  fail_on_lost_episodes(pending.step, e, rollout);
  pending.record =
      Json{{"kind", "train"},
           {"step", pending.step},
           {"rollout_time_s", rollout_s},
           {"tokens_per_s", double(rollout.completion_tokens) / std::max(1e-3, rollout_s)},
           {"epoch", mix.epoch()},
           {"rollout", rollout_json(rollout)},
           {"sampling", Json{{"gen_batches", e.gen_batches},
                             {"groups", e.groups},
                             {"informative_groups", e.informative}}}};
  if (mix.is_cocktail())
    pending.record["cocktail"] = cocktail_step_json(mix, pending.step, e.results, e.gen_batches);
  pending.markdown = step_markdown(mix, pending.step, e.results);
  pending.judged = std::any_of(e.results.begin(), e.results.end(), [](const EpisodeResult& r) {
    return r.ended && r.report.output.is_success;
  });
  pending.rolled_out = true;
}

}  // namespace

PendingStep roll_out_step(RunParts& parts, int64_t step) {
  const config::Config& c = parts.config();
  const auto t0 = Clock::now();
  PendingStep pending;
  pending.step = step;
  pending.started = t0;
  // A step's tasks are distinct, so it cannot sample more batches than the training tasks fill.
  const bool dynamic = parts.prepared.dynamic_sampling;
  const int64_t max_gen_batches =
      dynamic ? std::clamp<int64_t>(parts.tasks.mix->max_batches(step), 1,
                                    c.trainer_common.algorithm.max_num_gen_batches)
              : 1;
  StepEpisodes e;
  std::set<std::string> ids;
  while (e.gen_batches < max_gen_batches && !parts.stop) {
    run_task_batch(parts, step, ids, e, t0);
    if (e.informative >= c.data.train_batch_size) break;
  }
  if (dynamic && !parts.stop) {
    // The step's line says it ("signal groups K/N"); a log line would be a second line per step.
    if (e.informative < c.data.train_batch_size) {
      log().debug(
          "classic: step {}: {} of {} groups carry a signal after {} task batches "
          "(max_num_gen_batches); training on them",
          step, e.informative, c.data.train_batch_size, e.gen_batches);
    }
    parts.client().agree_sync_weight(
        true);  // the batch is full: the front's trigger is agree-based
  }
  const double rollout_s = seconds_since(t0);
  draw_progress(parts, e, t0, true);
  if (parts.stop) return pending;
  fill_record(parts, pending, e, rollout_s);
  return pending;
}

}  // namespace ajet::classic
