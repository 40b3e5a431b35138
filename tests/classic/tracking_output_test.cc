// What classic mode writes for people and tools besides metrics.jsonl: upstream's Markdown tables
// (pass@k with the unbiased estimator, checked against counting subsets), the metric names it posts
// to its front, and a real `ajet --conf` run with ajet.trainer_common.logger [tensorboard] and both
// Markdown paths: the tables appear, metrics.jsonl and the per-step lines do not, and the front's
// store holds the launcher's val/ and rollout/ numbers next to the batch numbers it recorded
// itself.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <map>

#include "classic/markdown_tables.h"
#include "classic/run_metrics.h"
#include "classic_fixture.h"
#include "common/fs.h"
#include "e2e/e2e_util.h"
#include "store/store.h"

namespace ajet::classic::tracking_output_test {
namespace {

namespace fs = std::filesystem;

EpisodeResult ran(const tasks::Task& task, double reward, bool ended,
                  std::optional<bool> success = std::nullopt) {
  EpisodeResult r;
  r.job.task = &task;
  r.ended = ended;
  r.report.output.reward = reward;
  r.report.output.is_success = success;
  return r;
}

// pass@k by its definition: among all k-subsets of the n samples, the share holding a success.
double pass_at_k_by_subsets(int n, int c, int k) {
  int64_t with_success = 0, subsets = 0;
  for (uint32_t mask = 0; mask < (1u << n); ++mask) {
    if (__builtin_popcount(mask) != k) continue;
    subsets += 1;
    with_success += (mask & ((1u << c) - 1)) != 0 ? 1 : 0;  // samples 0..c-1 succeeded
  }
  return double(with_success) / double(subsets);
}

TEST(PassAtK, TheUnbiasedEstimateEqualsCountingSubsets) {
  for (int n = 1; n <= 10; ++n) {
    for (int c = 0; c <= n; ++c) {
      for (int k = 1; k <= n; ++k) {
        EXPECT_NEAR(pass_at_k(n, c, k), pass_at_k_by_subsets(n, c, k), 1e-12)
            << n << " " << c << " " << k;
      }
    }
  }
  EXPECT_DOUBLE_EQ(pass_at_k(4, 1, 2), 0.5);  // 1 - C(3,2)/C(4,2) = 1 - 3/6
}

TEST(PassTable, UpstreamsFieldsFromTheSampledEpisodes) {
  tasks::Task a{"a"}, b{"b"}, c{"c"};
  // 4 samples per task: a 4/4 successes, b 1/4 (one by reward >= 1 without is_success), c 0/4 (one
  // never ended).
  std::vector<EpisodeResult> sampled = {
      ran(a, 1, true, true),  ran(a, 1, true, true),  ran(a, 1, true, true),
      ran(a, 1, true, true),  ran(b, 1, true),        ran(b, 0, true, false),
      ran(b, 0, true, false), ran(b, 0, true, false), ran(c, 0, true, false),
      ran(c, 0, true, false), ran(c, 0, true, false), ran(c, 0, false)};
  std::vector<EpisodeResult> greedy = {ran(a, 1, true, true), ran(b, 0, true, false),
                                       ran(c, 1, true, true)};
  const PassTable t = pass_table(greedy, sampled);
  EXPECT_EQ(t.pass_n, 4);
  EXPECT_EQ(t.total_tasks, 3);
  EXPECT_EQ(t.num_all_success_tasks, 1);
  EXPECT_EQ(t.num_pass_n_tasks, 2);
  ASSERT_EQ(t.task_pass_rate.size(), 3u);  // k = 1, 2, 4 (8 > pass_n)
  EXPECT_EQ(t.task_pass_rate[0].first, 1);
  EXPECT_DOUBLE_EQ(t.task_pass_rate[0].second, (1.0 + 0.25 + 0.0) / 3);
  EXPECT_DOUBLE_EQ(t.task_pass_rate[1].second, (1.0 + 0.5 + 0.0) / 3);
  EXPECT_DOUBLE_EQ(t.task_pass_rate[2].second, (1.0 + 1.0 + 0.0) / 3);
  // 11 ended samples: 5 rewards of 1, 6 of 0.
  EXPECT_DOUBLE_EQ(t.mean_reward, 5.0 / 11);
  EXPECT_NEAR(t.std_reward, std::sqrt(5.0 / 11 * 6.0 / 11), 1e-12);
  EXPECT_DOUBLE_EQ(t.greedy_success, 2.0 / 3);
}

TEST(Markdown, ValidationAndTrainingTablesAreExact) {
  PassTable all;
  all.pass_n = 2;
  all.total_tasks = 10;
  all.num_all_success_tasks = 3;
  all.num_pass_n_tasks = 7;
  all.task_pass_rate = {{1, 0.5}, {2, 0.7}};
  all.mean_reward = 0.5;
  all.std_reward = 0.25;
  all.greedy_success = 0.6;
  PassTable calc = all;
  calc.total_tasks = 4;
  EXPECT_EQ(validation_markdown(3, {{"all", all}, {"calc", calc}}),
            "\n### Validation at step 3\n\n"
            "| task | pass_n | total_tasks | num_all_success_tasks | num_pass_n_tasks | "
            "task_pass_rate@1 | "
            "task_pass_rate@2 | mean_reward | std_reward | greedy_success |\n"
            "|:--|--:|--:|--:|--:|--:|--:|--:|--:|--:|\n"
            "| all | 2 | 10 | 3 | 7 | 0.5000 | 0.7000 | 0.5000 | 0.2500 | 0.6000 |\n"
            "| calc | 2 | 4 | 3 | 7 | 0.5000 | 0.7000 | 0.5000 | 0.2500 | 0.6000 |\n");
  tasks::Task a{"a"};
  const RolloutTable r =
      rollout_table({ran(a, 1, true, true), ran(a, 0, true), ran(a, 0.5, true), ran(a, 9, false)});
  EXPECT_EQ(r.episodes, 3);
  EXPECT_DOUBLE_EQ(r.reward_mean, 0.5);
  EXPECT_DOUBLE_EQ(r.success_rate, 1.0 / 3);
  EXPECT_EQ(train_markdown(2, {{"all", r}}),
            "\n### Training step 2\n\n"
            "| task | episodes | reward_mean | reward_std | success_rate |\n"
            "|:--|--:|--:|--:|--:|\n"
            "| all | 3 | 0.5000 | 0.4082 | 0.3333 |\n");
}

TEST(RunMetrics, TheLaunchersNamesForAStepAndAValidation) {
  const Json step =
      Json::parse(R"({"kind": "train", "step": 2, "step_time_s": 3.5, "rollout_time_s": 3.0,
    "train_wait_s": 0.5, "tokens_per_s": 100, "epoch": 1,
    "rollout": {"episodes": 4, "failed": 0, "reward_mean": 0.5, "success_rate": 0.25, "llm_calls": 8,
                "completion_tokens": 300, "terminations": {"answered": 3, "max turns": 1},
                "log_metrics": {"turns": 2.5, "note": "text"}},
    "sampling": {"gen_batches": 1, "groups": 2, "informative_groups": 1},
    "cocktail": {"calc": {"share": 0.75, "tasks_per_batch": 3, "tasks": 3, "episodes": 6, "reward_mean": 0.5,
                          "success_rate": null, "cursor": {"epoch": 0}}}})");
  const Json m = train_step_metrics(step, false);
  const Json expected = {{"rollout/llm_calls", 8.0},
                         {"rollout/completion_tokens", 300.0},
                         {"rollout/failed", 0.0},
                         {"rollout/termination/answered", 3.0},
                         {"rollout/termination/max_turns", 1.0},
                         {"workflow/turns", 2.5},
                         {"timing/rollout_s", 3.0},
                         {"timing/train_wait_s", 0.5},
                         {"timing/launcher_step_s", 3.5},
                         {"perf/rollout_tokens_per_s", 100.0},
                         {"progress/epoch", 1.0},
                         {"sampling/gen_batches", 1.0},
                         {"sampling/groups", 2.0},
                         {"sampling/informative_groups", 1.0},
                         {"rollout/share@calc", 0.75},
                         {"rollout/tasks_per_batch@calc", 3.0},
                         {"rollout/tasks@calc", 3.0},
                         {"rollout/episodes@calc", 6.0},
                         {"rollout/reward_mean@calc", 0.5}};
  EXPECT_EQ(m, expected) << m.dump(1);
  EXPECT_EQ(train_step_metrics(step, true)["rollout/success_rate"], 0.25);

  const Json val = Json::parse(R"({"kind": "validation", "step": 1,
    "validation": {"tasks": 10, "greedy_success": 0.5, "greedy_reward": 0.6, "k": 2, "sampled_success": 0.4,
                   "pass_at_k": 0.7},
    "cocktail": {"calc": {"tasks": 4, "greedy_success": 0.25, "greedy_reward": 0.25, "k": 2,
                          "sampled_success": 0.5, "pass_at_k": 0.75}}})");
  PassTable all;
  all.task_pass_rate = {{1, 0.4}, {2, 0.7}};
  all.num_all_success_tasks = 2;
  all.num_pass_n_tasks = 7;
  all.mean_reward = 0.45;
  all.std_reward = 0.5;
  PassTable calc;
  calc.task_pass_rate = {{1, 0.5}, {2, 0.75}};
  const Json v = validation_metrics(val, {{"all", all}, {"calc", calc}});
  EXPECT_EQ(v["val/greedy_success"], 0.5);
  EXPECT_EQ(v["val/greedy_reward"], 0.6);
  EXPECT_EQ(v["val/sampled_success"], 0.4);
  EXPECT_EQ(v["val/tasks"], 10.0);
  EXPECT_EQ(v["val/pass_at_1"], 0.4);
  EXPECT_EQ(v["val/pass_at_2"], 0.7);
  EXPECT_EQ(v["val/all_success_tasks"], 2.0);
  EXPECT_EQ(v["val/pass_n_tasks"], 7.0);
  EXPECT_EQ(v["val/reward_mean"], 0.45);
  EXPECT_EQ(v["val/reward_std"], 0.5);
  EXPECT_EQ(v["val/greedy_success@calc"], 0.25);
  EXPECT_EQ(v["val/pass_at_2@calc"], 0.75);
  EXPECT_EQ(v["val/pass_at_1@calc"], 0.5);
  EXPECT_EQ(v.size(), 20u) << v.dump(1);
}

// A debug-backbone run: logger [tensorboard] alone, both Markdown files (one relative, one
// absolute).
TEST(ClassicTracking, MarkdownTablesTensorBoardAndPostedMetricsWithoutJsonl) {
  e2e::ScratchDir dir;
  const fs::path model = micro_model();
  const fs::path train_md = dir / "train_log" / "train.md";
  std::string yaml = classic_yaml(model);
  const std::string anchor = "    val_before_train: true\n";
  yaml.replace(
      yaml.find(anchor), anchor.size(),
      anchor + "    logger: [tensorboard]\n    val_print_to_markdown_file_path: results/val.md\n" +
          "    train_print_to_markdown_file_path: " + train_md.string() + "\n");
  write_file_atomic(dir / "calc.yaml", yaml);
  e2e::Captured r = run_ajet("--conf " + e2e::shell_quote((dir / "calc.yaml").string()) +
                             " --exp-dir " + e2e::shell_quote((dir / "exps").string()));
  ASSERT_EQ(r.status, 0) << r.out;
  const fs::path exp = dir / "exps" / "run";

  // Markdown: 3 validations (before training, after steps 1 and 2) with pass@1 and pass@2
  // (val_pass_n 2).
  const std::string val = read_file(exp / "results" / "val.md");
  for (const char* section :
       {"### Validation at step 0", "### Validation at step 1", "### Validation at step 2"}) {
    EXPECT_NE(val.find(section), std::string::npos) << val;
  }
  EXPECT_NE(val.find("| task | pass_n | total_tasks | num_all_success_tasks | num_pass_n_tasks | "
                     "task_pass_rate@1 | "
                     "task_pass_rate@2 | mean_reward |"),
            std::string::npos)
      << val;
  EXPECT_NE(val.find("| all | 2 | 3 | "), std::string::npos) << val;  // 3 held-out tasks
  const std::string train = read_file(train_md);
  EXPECT_NE(train.find("### Training step 1"), std::string::npos) << train;
  EXPECT_NE(train.find("### Training step 2"), std::string::npos) << train;
  EXPECT_NE(train.find("| all | 4 | "), std::string::npos) << train;  // 2 tasks x 2 repeats

  // jsonl and console are off: no metrics.jsonl, no per-step or validation lines (the bar stays).
  EXPECT_FALSE(fs::exists(exp / "metrics.jsonl"));
  EXPECT_EQ(r.out.find("step 1/2  reward"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("val @ step"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("step 1/2 ["), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("TensorBoard: tensorboard --logdir " + (exp / "tensorboard").string()),
            std::string::npos)
      << r.out;

  // TensorBoard: one event file in the experiment directory.
  int files = 0;
  for (const auto& entry : fs::directory_iterator(exp / "tensorboard")) {
    EXPECT_EQ(entry.path().filename().string().rfind("events.out.tfevents.", 0), 0u)
        << entry.path();
    EXPECT_GT(fs::file_size(entry.path()), 100u);
    files += 1;
  }
  EXPECT_EQ(files, 1);

  // The front's store: the launcher's numbers (validation at steps 0, 1, 2; its step numbers at the
  // batches' steps 0 and 1) next to the batch numbers the front recorded itself.
  store::Store store(exp / "swarm" / "swarm.sqlite");
  std::map<std::string, std::vector<int64_t>> steps;
  for (const auto& info : store.list_metric_names()) {
    for (const auto& row : store.get_metrics_after(info.name, -1))
      steps[info.name].push_back(row.step);
  }
  EXPECT_EQ(steps["val/greedy_success"], (std::vector<int64_t>{0, 1, 2}));
  EXPECT_EQ(steps["val/pass_at_1"], (std::vector<int64_t>{0, 1, 2}));
  EXPECT_EQ(steps["val/pass_at_2"], (std::vector<int64_t>{0, 1, 2}));
  EXPECT_EQ(steps["val/reward_std"], (std::vector<int64_t>{0, 1, 2}));
  EXPECT_EQ(steps["rollout/llm_calls"], (std::vector<int64_t>{0, 1}));
  EXPECT_EQ(steps["timing/rollout_s"], (std::vector<int64_t>{0, 1}));
  EXPECT_EQ(steps["rollout/reward_mean"],
            (std::vector<int64_t>{0, 1}));  // the front's debug batches
  EXPECT_EQ(steps["rollout/episodes"], (std::vector<int64_t>{0, 1}));
  EXPECT_EQ(store.get_metrics("rollout/episodes").at(0).value, 4.0);
}

}  // namespace
}  // namespace ajet::classic::tracking_output_test
