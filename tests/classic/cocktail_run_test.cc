// End-to-end cocktail runs of `ajet --conf` (the real ajet, ajet-swarm and ajet-engine) on the
// micro model with the debug backbone: each step's batch follows the schedule, each task is
// validated on its own held-out set, dynamic sampling keeps the step's mix, and --resume continues
// every task's stream where it stopped. Counts and keys only, never speed.
#include <gtest/gtest.h>

#include "classic_fixture.h"
#include "common/fs.h"
#include "common/json.h"
#include "e2e/e2e_util.h"

namespace ajet::classic {
namespace {

namespace fs = std::filesystem;
using e2e::Captured;
using e2e::shell_quote;

// calc (10 training / 2 validation tasks) and countdown (10 / 3), 4 tasks a step, calc's share
// linear 1 -> 0.25 over 2 steps: 4+0, 3+1 (2.5 rounds to the first task), 1+3, 1+3, ….
std::string cocktail_yaml(const fs::path& model, int64_t steps, const std::string& extra = "") {
  return "ajet:\n"
         "  experiment_name: run\n"
         "  backbone: debug\n"
         "  model:\n"
         "    path: " +
         model.string() +
         "\n"
         "  data: {max_prompt_length: 640, max_response_length: 384, train_batch_size: 4}\n"
         "  rollout:\n"
         "    max_env_worker: 8\n"
         "    max_model_len: 1024\n"
         "    max_response_length_in_one_turn: 12\n"
         "    num_repeat: 2\n"
         "    temperature: 1.0\n"
         "  task_reader:\n"
         "    shuffle_seed: 3\n"
         "    cocktail:\n"
         "      tasks:\n"
         "        - builtin: {generator: calc, num_training_tasks: 10, num_validation_tasks: 2, "
         "seed: 5}\n"
         "        - name: count\n"
         "          builtin: {generator: countdown, num_training_tasks: 10, num_validation_tasks: "
         "3, seed: 5}\n"
         "      schedule: {type: linear, start: 1.0, end: 0.25, end_step: 2}\n"
         "  trainer_common:\n"
         "    total_training_steps: " +
         std::to_string(steps) +
         "\n"
         "    test_freq: 2\n"
         "    val_pass_n: 2\n"
         "    val_before_train: true\n"
         "  engine: {threads: 1, kv_cache_memory_mb: 16}\n" +
         extra;
}

Captured run_conf(const fs::path& dir, const std::string& name, const std::string& yaml,
                  const std::string& flags = "") {
  write_file_atomic(dir / name, yaml);
  return run_ajet("--conf " + shell_quote((dir / name).string()) + " --exp-dir " +
                  shell_quote((dir / "exps").string()) + flags);
}

std::vector<Json> records_of(const fs::path& dir, const std::string& kind) {
  std::vector<Json> out;
  for (Json& r : read_jsonl(dir / "exps" / "run" / "metrics.jsonl")) {
    if (r["kind"] == kind) out.push_back(std::move(r));
  }
  return out;
}

TEST(CocktailRun, EachStepFollowsTheScheduleAndEachTaskIsValidatedAlone) {
  e2e::ScratchDir dir;
  Captured r = run_conf(dir.path(), "cocktail.yaml", cocktail_yaml(micro_model(), 4));
  ASSERT_EQ(r.status, 0) << r.out;
  // 1. Training: the schedule's share and counts per step, the episodes of each task, its cursor.
  const std::vector<Json> train = records_of(dir.path(), "train");
  ASSERT_EQ(train.size(), 4u) << r.out;
  const std::vector<double> calc_share = {1.0, 0.625, 0.25, 0.25};
  const std::vector<int64_t> calc_tasks = {4, 3, 1, 1};
  int64_t calc_drawn = 0, count_drawn = 0;
  for (size_t i = 0; i < train.size(); ++i) {
    const Json& t = train[i]["cocktail"];
    SCOPED_TRACE(t.dump());
    EXPECT_NEAR(t["calc"]["share"].get<double>(), calc_share[i], 1e-12);
    EXPECT_NEAR(t["count"]["share"].get<double>(), 1.0 - calc_share[i], 1e-12);
    EXPECT_EQ(t["calc"]["tasks_per_batch"].get<int64_t>(), calc_tasks[i]);
    EXPECT_EQ(t["count"]["tasks_per_batch"].get<int64_t>(), 4 - calc_tasks[i]);
    EXPECT_EQ(t["calc"]["episodes"].get<int64_t>(), 2 * calc_tasks[i]);
    EXPECT_EQ(t["count"]["episodes"].get<int64_t>(), 2 * (4 - calc_tasks[i]));
    EXPECT_EQ(train[i]["rollout"]["episodes"].get<int64_t>(), 8);
    calc_drawn += calc_tasks[i];
    count_drawn += 4 - calc_tasks[i];
    EXPECT_EQ(t["calc"]["cursor"], (Json{{"epoch", calc_drawn / 10}, {"index", calc_drawn % 10}}));
    EXPECT_EQ(t["count"]["cursor"], (Json{{"epoch", 0}, {"index", count_drawn}}));
  }
  EXPECT_TRUE(
      train[0]["cocktail"]["count"]["reward_mean"].is_null());  // no countdown task in step 1
  // 2. Validation before training, after step 2 and after step 4: every task on its own set.
  const std::vector<Json> val = records_of(dir.path(), "validation");
  ASSERT_EQ(val.size(), 3u) << r.out;
  for (const Json& v : val) {
    SCOPED_TRACE(v.dump());
    EXPECT_EQ(v["validation"]["tasks"].get<int64_t>(), 5);
    EXPECT_EQ(v["cocktail"]["calc"]["tasks"].get<int64_t>(), 2);
    EXPECT_EQ(v["cocktail"]["count"]["tasks"].get<int64_t>(), 3);
    for (const char* key : {"greedy_success", "greedy_reward", "sampled_success", "pass_at_k"}) {
      EXPECT_TRUE(v["cocktail"]["calc"][key].is_number()) << key;
      EXPECT_TRUE(v["cocktail"]["count"][key].is_number()) << key;
    }
    EXPECT_EQ(v["cocktail"]["count"]["k"].get<int64_t>(), 2);
  }
  // 3. What the user sees: the mix, per-task lines and summaries, one curve per task.
  EXPECT_NE(r.out.find(
                "ajet: cocktail of calc (10 training / 2 validation tasks), count (10 training / 3 "
                "validation tasks); calc share linear 1 -> 0.25 by step 3"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("  tasks: calc 3 (62%) reward "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("  val per task: calc greedy "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("ajet: held-out success of count, step 0 -> 4: sampled "), std::string::npos)
      << r.out;
  const std::string html = read_file(dir / "exps" / "run" / "reward_curve.html");
  EXPECT_NE(html.find("\"rollout/reward_mean@calc\":[["),
            std::string::npos);  // per task: one chart, a line each
  EXPECT_NE(html.find("\"val/sampled_success@count\":[["), std::string::npos);
}

// Dynamic sampling with a cocktail: every extra task batch of a step has the step's mix.
TEST(CocktailRun, DynamicSamplingKeepsTheStepsMix) {
  e2e::ScratchDir dir;
  // Constant rewards on two tasks in three, a reward that depends on the episode on the others.
  write_file_atomic(dir / "agent.sh",
                    "#!/bin/sh\n"
                    "h=$(printf '%s' \"$AJET_TASK\" | cksum | cut -d' ' -f1)\n"
                    "last=${AJET_ENV_SEED#${AJET_ENV_SEED%?}}\n"
                    "if [ $((h % 3)) -eq 0 ]; then r=$((last % 2)); else r=1; fi\n"
                    "echo \"{\\\"reward\\\": $r}\"\n");
  std::string yaml = cocktail_yaml(
      micro_model(), 4,
      "  swarm_mode_sample_collection_method: rollout_until_finish_enough_non_dummy_tasks\n");
  yaml.replace(yaml.find("  rollout:\n"), 11, "  rollout:\n    user_workflow: \"sh agent.sh\"\n");
  yaml.replace(yaml.find("num_repeat: 2"), 13, "num_repeat: 4");
  yaml.replace(yaml.find("test_freq: 2"), 12, "test_freq: 0");
  yaml.replace(yaml.find("val_before_train: true"), 22, "val_before_train: false");
  Captured r = run_conf(dir.path(), "ds.yaml", yaml);
  ASSERT_EQ(r.status, 0) << r.out;
  const std::vector<Json> train = records_of(dir.path(), "train");
  ASSERT_EQ(train.size(), 4u) << r.out;
  const std::vector<int64_t> calc_tasks = {4, 3, 1, 1};
  int more_than_one = 0;
  for (size_t i = 0; i < train.size(); ++i) {
    SCOPED_TRACE(train[i].dump());
    const int64_t batches = train[i]["sampling"]["gen_batches"].get<int64_t>();
    const Json& t = train[i]["cocktail"];
    EXPECT_EQ(t["calc"]["tasks"].get<int64_t>(), calc_tasks[i] * batches);
    EXPECT_EQ(t["count"]["tasks"].get<int64_t>(), (4 - calc_tasks[i]) * batches);
    EXPECT_EQ(t["calc"]["episodes"].get<int64_t>() + t["count"]["episodes"].get<int64_t>(),
              4 * 4 * batches);
    EXPECT_EQ(train[i]["rollout"]["episodes"].get<int64_t>(), 4 * 4 * batches);
    more_than_one += batches > 1 ? 1 : 0;
  }
  EXPECT_GT(more_than_one, 0)
      << "no step needed a second batch: the agent's rewards do not exercise the rule";
}

// --resume continues each task's stream from the cursor recorded at the step it continues after:
// the cursors of steps 3 and 4 are those of a run that was never interrupted.
TEST(CocktailRun, ResumeContinuesEveryTasksStream) {
  e2e::ScratchDir whole_dir, split_dir;
  const fs::path model = micro_model();
  Captured whole = run_conf(whole_dir.path(), "c.yaml", cocktail_yaml(model, 4));
  ASSERT_EQ(whole.status, 0) << whole.out;
  Captured first = run_conf(split_dir.path(), "c.yaml", cocktail_yaml(model, 2));
  ASSERT_EQ(first.status, 0) << first.out;
  Captured rest = run_conf(split_dir.path(), "c.yaml", cocktail_yaml(model, 2),
                           " --resume --set ajet.trainer_common.total_training_steps=4");
  ASSERT_EQ(rest.status, 0) << rest.out;
  EXPECT_NE(rest.out.find("continuing after step 2 of 4"), std::string::npos) << rest.out;
  const std::vector<Json> expected = records_of(whole_dir.path(), "train");
  const std::vector<Json> resumed = records_of(split_dir.path(), "train");
  ASSERT_EQ(expected.size(), 4u);
  ASSERT_EQ(resumed.size(), 4u) << rest.out;
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_EQ(resumed[i]["step"].get<int64_t>(), int64_t(i) + 1);
    for (const char* task : {"calc", "count"}) {
      EXPECT_EQ(resumed[i]["cocktail"][task]["cursor"], expected[i]["cocktail"][task]["cursor"])
          << task << " at step " << i + 1;
      EXPECT_EQ(resumed[i]["cocktail"][task]["tasks"], expected[i]["cocktail"][task]["tasks"]);
    }
  }
  // The calc stream crossed into its second epoch at step 4 (4+3+1+1 = 9 of 10: not yet; count
  // 0+1+3+3).
  EXPECT_EQ(resumed[3]["cocktail"]["count"]["cursor"], (Json{{"epoch", 0}, {"index", 7}}));
}

TEST(CocktailRun, ConfigErrorsNameTheKey) {
  e2e::ScratchDir dir;
  std::string yaml = cocktail_yaml(micro_model(), 2);
  yaml.replace(yaml.find("end_step: 2"), 11, "end_step: 0");
  Captured r = run_conf(dir.path(), "bad.yaml", yaml);
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.out.find("ajet.task_reader.cocktail.schedule.end_step must be >= 1, got 0"),
            std::string::npos)
      << r.out;
  yaml = cocktail_yaml(micro_model(), 4);  // steps 3 and 4 take 3 countdown tasks
  const std::string countdown_tasks = "num_training_tasks: 10, num_validation_tasks: 3";
  yaml.replace(yaml.find(countdown_tasks), countdown_tasks.size(),
               "num_training_tasks: 2, num_validation_tasks: 3");
  r = run_conf(dir.path(), "small.yaml", yaml);
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.out.find("takes 3 tasks from task 'count', which has only 2 training tasks"),
            std::string::npos)
      << r.out;
}

}  // namespace
}  // namespace ajet::classic
