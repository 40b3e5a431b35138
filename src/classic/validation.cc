#include "classic/validation.h"

#include "classic/episode_runner.h"
#include "classic/markdown_tables.h"
#include "classic/metrics.h"
#include "classic/run_metrics.h"
#include "classic/sampling_check.h"
#include "classic/step_rollout.h"
#include "common/clock.h"
#include "tasks/rng.h"

namespace ajet::classic {

using Clock = std::chrono::steady_clock;

namespace {

// One greedy episode per held-out task and k sampled ones, source after source; `*_end` say where
// each source's jobs end.
struct ValidationJobs {
  std::vector<EpisodeJob> greedy, sampled;
  std::vector<size_t> greedy_end, sampled_end;
};

ValidationJobs validation_jobs(const RunParts& parts, int64_t k) {
  const config::Config& c = parts.config();
  const Json greedy_sampling{
      {"temperature", c.rollout.val_kwargs.do_sample ? c.rollout.val_kwargs.temperature : 0.0},
      {"top_p", c.rollout.val_kwargs.top_p}};
  const Json sampled{{"temperature", c.rollout.temperature}, {"top_p", c.rollout.top_p}};
  ValidationJobs jobs;
  for (const tasks::CocktailSource& source : parts.tasks.sources) {
    size_t n = source.sets.validation.size();
    if (const auto cap = c.trainer_common.val_max_num_task_each_validation; cap && *cap > 0)
      n = std::min(n, size_t(*cap));
    for (size_t i = 0; i < n; ++i) {
      const tasks::Task* t = &source.sets.validation[i];
      const uint64_t seed = tasks::stable_hash(t->task_id);
      jobs.greedy.push_back(EpisodeJob{t, "eval", greedy_sampling, seed, 0});
      for (int64_t j = 0; j < k; ++j)
        jobs.sampled.push_back(
            EpisodeJob{t, "eval", sampled, mix_seed(seed, uint64_t(j + 1)), j + 1});
    }
    jobs.greedy_end.push_back(jobs.greedy.size());
    jobs.sampled_end.push_back(jobs.sampled.size());
  }
  return jobs;
}

// A cocktail's summary of each task, with its pass table.
Json per_task_summary(const RunParts& parts, const ValidationJobs& jobs,
                      const std::vector<EpisodeResult>& g, const std::vector<EpisodeResult>& s,
                      int64_t k, std::vector<std::pair<std::string, PassTable>>& tables) {
  Json per_task = Json::object();
  for (size_t i = 0; i < parts.tasks.sources.size(); ++i) {
    const size_t g0 = i == 0 ? 0 : jobs.greedy_end[i - 1],
                 s0 = i == 0 ? 0 : jobs.sampled_end[i - 1];
    const std::vector<EpisodeResult> gi(g.begin() + long(g0), g.begin() + long(jobs.greedy_end[i]));
    const std::vector<EpisodeResult> si(s.begin() + long(s0),
                                        s.begin() + long(jobs.sampled_end[i]));
    per_task[parts.tasks.sources[i].name] = validation_json(summarize_validation(gi, si, k));
    tables.emplace_back(parts.tasks.sources[i].name, pass_table(gi, si));
  }
  return per_task;
}

// Sampled episodes that ran greedy (an agent that ignores AJET_SAMPLING): a warning and a metric.
void check_sampling(RunParts& parts, const std::vector<EpisodeResult>& s, Json& record,
                    Json& metrics) {
  const config::Config& c = parts.config();
  const double absent = c.rollout.val_kwargs.do_sample ? c.rollout.val_kwargs.temperature : 0.0;
  const SamplingCheck check = check_sampled_requests(parts.client(), s, absent);
  record["sampled_requests"] = Json{
      {"episodes", check.episodes}, {"calls", check.calls}, {"sampled_calls", check.sampled_calls}};
  if (check.calls > 0) metrics["val/sampled_request_share"] = check.sampled_share();
  if (check.all_greedy())
    parts.say("warning: " + greedy_validation_warning(check, c.rollout.temperature));
}

}  // namespace

void run_validation(RunParts& parts, int64_t step) {
  const config::Config& c = parts.config();
  if (parts.tasks.validation == 0 || parts.stop) return;
  const auto t0 = Clock::now();
  const int64_t k = std::max<int64_t>(0, c.trainer_common.val_pass_n);
  const ValidationJobs jobs = validation_jobs(parts, k);
  std::vector<EpisodeJob> all = jobs.greedy;
  all.insert(all.end(), jobs.sampled.begin(), jobs.sampled.end());
  EpisodeRunner runner(parts.client(), parts.workflow,
                       RunnerOptions{c.rollout.max_env_worker, 600, 3,
                                     [&parts] { return parts.front.exit_lines(); }},
                       parts.stop);
  const std::vector<EpisodeResult> results = runner.run(all);
  if (parts.stop) return;
  const std::vector<EpisodeResult> g(results.begin(), results.begin() + long(jobs.greedy.size()));
  const std::vector<EpisodeResult> s(results.begin() + long(jobs.greedy.size()), results.end());
  Json r{{"kind", "validation"},
         {"step", step},
         {"elapsed_s", seconds_since(parts.t0)},
         {"time_s", seconds_since(t0)},
         {"validation", validation_json(summarize_validation(g, s, k))},
         {"greedy_rollout", rollout_json(summarize(g))}};
  std::vector<std::pair<std::string, PassTable>> tables = {{"all", pass_table(g, s)}};
  if (parts.tasks.cocktail()) r["cocktail"] = per_task_summary(parts, jobs, g, s, k, tables);
  if (parts.record.console()) parts.say(validation_line(r));
  if (parts.record.console() && parts.tasks.cocktail()) parts.say(cocktail_validation_line(r));
  parts.record.append_markdown(c.trainer_common.val_print_to_markdown_file_path,
                               validation_markdown(step, tables));
  // Validation after step s evaluates the policy version those s steps made: metrics step start +
  // s.
  Json metrics = validation_metrics(r, tables);
  if (k > 0 && c.rollout.temperature > 0) check_sampling(parts, s, r, metrics);
  parts.record.post_metrics(parts.start_global_step + step, metrics);
  parts.record.add(std::move(r));
}

}  // namespace ajet::classic
