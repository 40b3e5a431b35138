// Unit tests of classic mode's pieces that need no process: the ready line, external command
// results, rollout / validation summaries (pass@k), trainer metric extraction, the reward curve
// page, the warnings prepare_config adds after the command line's overrides.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>

#include "classic/launcher.h"
#include "classic/metrics.h"
#include "classic/swarm_child.h"
#include "classic/workflow.h"
#include "common/error.h"
#include "common/fs.h"
#include "support/scratch_dir.h"

namespace ajet::classic {
namespace {

TEST(ClassicReadyLine, ParsesUrlAndIgnoresOtherLines) {
  EXPECT_EQ(
      parse_ready_line(
          "ajet-swarm ready: http://127.0.0.1:41234 (port 41234, store x, dir y). Interchange"),
      "http://127.0.0.1:41234");
  EXPECT_FALSE(parse_ready_line("[info] loading").has_value());
  EXPECT_FALSE(parse_ready_line("ajet-swarm ready: nonsense").has_value());
}

TEST(ClassicCommandResult, NumberObjectAndErrors) {
  EXPECT_DOUBLE_EQ(parse_command_result("log line\n0.75\n\n").at("reward").get<double>(), 0.75);
  Json j = parse_command_result(
      "thinking...\n{\"reward\": 1, \"is_success\": true, \"metadata\": {\"a\": 1}}\n");
  EXPECT_EQ(j["reward"].get<double>(), 1.0);
  EXPECT_TRUE(j["is_success"].get<bool>());
  EXPECT_EQ(parse_command_result("{\"answer\": \"<answer>3</answer>\"}").at("answer"),
            "<answer>3</answer>");
  try {
    parse_command_result("");
    FAIL() << "empty output accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("printed nothing"), std::string::npos) << e.what();
  }
  try {
    parse_command_result("{\"reward\": 1}\nall done\n");
    FAIL() << "non-JSON last line accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("all done"), std::string::npos) << e.what();
  }
  try {
    parse_command_result("{\"reward\": \"high\"}");
    FAIL() << "string reward accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'reward'"), std::string::npos) << e.what();
  }
  EXPECT_THROW(parse_command_result("{\"score\": 1}"), Error);
  EXPECT_THROW(parse_command_result("[1, 2]"), Error);
}

EpisodeResult result(const tasks::Task& task, double reward, bool ended,
                     std::optional<bool> success = std::nullopt, int64_t tokens = 0) {
  EpisodeResult r;
  r.job.task = &task;
  r.ended = ended;
  r.report.output.reward = reward;
  r.report.output.is_success = success;
  r.report.completion_tokens = tokens;
  r.report.termination = reward > 0 ? "answered" : "no_answer";
  r.report.output.log_metrics = Json{{"turns", reward > 0 ? 2.0 : 1.0}};
  return r;
}

TEST(ClassicSummary, RolloutCountsOnlyEndedEpisodes) {
  tasks::Task a{.task_id = "a"};
  std::vector<EpisodeResult> rs = {result(a, 1, true, true, 10), result(a, 0, true, false, 5),
                                   result(a, 1, false, true, 7),
                                   result(a, 0.1, true, std::nullopt, 1)};
  RolloutSummary s = summarize(rs);
  EXPECT_EQ(s.episodes, 3);
  EXPECT_EQ(s.failed, 1);
  EXPECT_NEAR(s.reward_mean, 1.1 / 3, 1e-12);
  EXPECT_NEAR(s.success_rate, 1.0 / 3, 1e-12);  // 0.1 without is_success is not a success
  EXPECT_EQ(s.completion_tokens, 16);
  EXPECT_EQ(s.terminations["answered"], 2);
  EXPECT_NEAR(s.log_metrics["turns"].get<double>(), 5.0 / 3,
              1e-12);  // turns 2, 1, 2 (reward > 0 → 2)
}

TEST(ClassicSummary, ValidationGreedyAndPassAtK) {
  tasks::Task a{.task_id = "a"}, b{.task_id = "b"}, c{.task_id = "c"};
  std::vector<EpisodeResult> greedy = {result(a, 1, true, true), result(b, 0, true, false),
                                       result(c, 0, false)};
  std::vector<EpisodeResult> sampled = {result(a, 0, true, false), result(a, 1, true, true),
                                        result(b, 0, true, false), result(b, 0, true, false),
                                        result(c, 1, true, true),  result(c, 1, true, true)};
  ValidationSummary v = summarize_validation(greedy, sampled, 2);
  EXPECT_EQ(v.tasks, 3);
  EXPECT_NEAR(v.greedy_success, 1.0 / 3, 1e-12);  // an episode that never ended counts as a failure
  EXPECT_NEAR(v.sampled_success, 3.0 / 6, 1e-12);
  EXPECT_NEAR(v.pass_at_k, 2.0 / 3, 1e-12);
  EXPECT_EQ(v.k, 2);
}

// The truncated-sampling warning follows the config the run uses: --backbone async turns the loss's
// division by rollout logprobs on after the file loaded as torch, and a file that says async is
// told once, not twice; an override that removes its cause removes it.
TEST(ClassicPrepareConfig, TruncatedSamplingIsWarnedAboutAfterTheOverrides) {
  const ajet::test_support::ScratchDir dir;
  std::filesystem::create_directories(dir / "model");
  auto conf = [&](const std::string& backbone) {
    const std::filesystem::path path = dir / (backbone + ".yaml");
    write_file_atomic(path, "ajet:\n  backbone: " + backbone +
                                "\n  model: {path: " + (dir / "model").string() +
                                "}\n  rollout: {top_p: 0.9}\n  task_reader: {type: builtin, "
                                "builtin: {generator: calc}}\n");
    return path;
  };
  auto truncated = [](const PreparedConfig& p) {
    return std::count_if(p.warnings.begin(), p.warnings.end(), [](const std::string& w) {
      return w.find("truncated distribution") != std::string::npos;
    });
  };
  LaunchOptions o;
  o.exp_base_dir = dir / "exp";
  o.conf = conf("torch");
  EXPECT_EQ(truncated(prepare_config(o)),
            0);  // recomputed old logprobs: nothing divides by the rollout's
  o.backbone = "async";
  EXPECT_EQ(truncated(prepare_config(o)), 1);
  o.backbone = "";
  o.conf = conf("async");
  EXPECT_EQ(truncated(prepare_config(o)), 1);
  // ...and an override that removes the cause removes the warning the file's values gave at load.
  o.overrides = {"rollout.top_p=1"};
  EXPECT_EQ(truncated(prepare_config(o)), 0);
  o.overrides = {"ajet.backbone=torch"};
  EXPECT_EQ(truncated(prepare_config(o)), 0);
  // One that changes the cause is told with the values the run uses.
  o.overrides = {"rollout.top_p=0.8"};
  const PreparedConfig changed = prepare_config(o);
  EXPECT_EQ(truncated(changed), 1);
  EXPECT_TRUE(
      std::any_of(changed.warnings.begin(), changed.warnings.end(),
                  [](const std::string& w) { return w.find("top_p 0.8") != std::string::npos; }));
}

TEST(ClassicTrainerMetrics, PicksNumbersFromWhateverTheFrontReports) {
  Json status = {
      {"engine_status", "ENGINE.ROLLING"},
      {"last_train_stats",
       {{"train",
         {{"pg_loss", 0.5}, {"kl", 0.01}, {"entropy", 1.2}, {"rollout_logprob_diff", 0.002}}},
        {"merge", {{"merge_ratio", 3.0}}},
        {"note", "text is dropped"}}}};
  Json m = trainer_metrics(status, Json::object());
  EXPECT_EQ(m["train/pg_loss"].get<double>(), 0.5);
  EXPECT_EQ(m["train/kl"].get<double>(), 0.01);
  EXPECT_EQ(m["train/rollout_logprob_diff"].get<double>(), 0.002);  // training-inference mismatch
  EXPECT_EQ(m["merge/merge_ratio"].get<double>(), 3.0);
  EXPECT_FALSE(m.contains("note"));
  EXPECT_TRUE(trainer_metrics(Json{{"global_step", 3}}, Json::object()).empty());
  // A step of named adapters: each adapter's numbers are series of their own, "<key>@<adapter>".
  Json adapters = trainer_metrics(
      Json{{"last_train_stats",
            {{"loss", 0.3},
             {"adapters",
              {{"solver", {{"loss", 0.1}, {"grad_norm", 2.0}}}, {"critic", {{"loss", 0.5}}}}}}}},
      Json::object());
  EXPECT_EQ(adapters["loss"].get<double>(), 0.3);
  EXPECT_EQ(adapters["loss@solver"].get<double>(), 0.1);
  EXPECT_EQ(adapters["grad_norm@solver"].get<double>(), 2.0);
  EXPECT_EQ(adapters["loss@critic"].get<double>(), 0.5);
  EXPECT_FALSE(adapters.contains("adapters/solver/loss"));
  Json line_record = {{"step", 2},
                      {"step_time_s", 1.5},
                      {"rollout", {{"reward_mean", 0.25}, {"success_rate", 0.25}}},
                      {"trainer", m}};
  std::string line = step_line(line_record, 10);
  EXPECT_NE(line.find("step 2/10"), std::string::npos) << line;
  EXPECT_NE(line.find("loss 0.5000"), std::string::npos) << line;
  EXPECT_NE(line.find("entropy 1.200"), std::string::npos) << line;
  EXPECT_NE(line.find("merge 3.00x"), std::string::npos) << line;
}

TEST(ClassicProgress, LearningSummaryComparesTheFirstAndLastValidation) {
  auto val = [](int step, double greedy, double sampled, double pass) {
    return Json{{"kind", "validation"},
                {"step", step},
                {"validation",
                 {{"greedy_success", greedy},
                  {"sampled_success", sampled},
                  {"pass_at_k", pass},
                  {"k", 4}}}};
  };
  const Json train = {{"kind", "train"}, {"step", 1}, {"rollout", {{"reward_mean", 0.3}}}};
  EXPECT_EQ(learning_summary({}), "");
  EXPECT_EQ(learning_summary({val(0, 0.65, 0.485, 0.85), train}), "")
      << "one validation: nothing to compare";
  EXPECT_EQ(learning_summary({val(0, 0.65, 0.485, 0.85), train, val(48, 0.7, 0.6, 0.9),
                              val(96, 0.87, 0.77, 0.93)}),
            "held-out success, step 0 -> 96: sampled 48.5% -> 77.0% (+28.5), greedy 65.0% -> 87.0% "
            "(+22.0), "
            "pass@4 85.0% -> 93.0% (+8.0)");
  EXPECT_EQ(learning_summary({val(0, 0.5, 0.5, 0.5), val(10, 0.4, 0.45, 0.5)}),
            "held-out success, step 0 -> 10: sampled 50.0% -> 45.0% (-5.0), greedy 50.0% -> 40.0% "
            "(-10.0), "
            "pass@4 50.0% -> 50.0% (+0.0)");
}

TEST(ClassicProgress, BarFillsWithEpisodes) {
  EXPECT_EQ(progress_bar(1, 4, 0, 8, 0, 0, 8),
            "step 1/4 [........] 0/8 episodes  reward 0.000  0 tok/s");
  EXPECT_EQ(progress_bar(1, 4, 4, 8, 0.5, 12.4, 8),
            "step 1/4 [####....] 4/8 episodes  reward 0.500  12 tok/s");
  EXPECT_EQ(progress_bar(1, 4, 8, 8, 1, 0, 8).substr(0, 19), "step 1/4 [########]");
}

}  // namespace
}  // namespace ajet::classic
