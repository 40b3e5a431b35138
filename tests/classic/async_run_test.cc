// `ajet --conf` with the async backbone, end to end (the real ajet, ajet-swarm and ajet-engine on
// the micro model): the rollout of step s+1 goes on while step s trains, every batch's staleness is
// recorded in metrics.jsonl and on the step line and never exceeds ajet.async.max_staleness, and
// the steps stay one to one with the trainer's batches (global_step = step) with dynamic sampling
// too.
//
// Nothing here measures time. Overlap is read from the data: a batch whose episodes lag the weights
// it trains from (staleness > 0) was sampled, token by token, before the previous batch's weights
// were in — the rollout ran while that batch trained. The launcher starts each rollout as soon as
// the bound allows, and each step here trains 8 optimizer passes over its batch, so that happens in
// every run.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>

#include "classic_fixture.h"
#include "common/fs.h"
#include "common/json.h"
#include "e2e/e2e_util.h"

namespace ajet::classic {
namespace {

namespace fs = std::filesystem;
using e2e::Captured;
using e2e::shell_quote;

std::string async_yaml(const fs::path& model, int64_t max_staleness,
                       const std::string& extra = "") {
  std::string yaml = classic_yaml(model,
                                  "  async:\n"
                                  "    max_staleness: " +
                                      std::to_string(max_staleness) + "\n" + extra);
  yaml.replace(yaml.find("backbone: debug"), 15, "backbone: async");
  yaml.replace(yaml.find("val_before_train: true"), 22, "val_before_train: false");
  yaml.replace(yaml.find("total_training_steps: 2"), 23, "total_training_steps: 5");
  yaml.replace(yaml.find("test_freq: 1"), 12, "test_freq: 0");
  yaml.replace(yaml.find("num_training_tasks: 6"), 21, "num_training_tasks: 40");
  // More training per step than rollout per step: 4 passes x 2 mini-batches.
  yaml.replace(yaml.find("  trainer_common:\n"), 18,
               "  trainer_common:\n    ppo_epochs: 4\n    mini_batch_num: 2\n");
  return yaml;
}

struct AsyncRun {
  Captured out;
  std::vector<Json> steps;  // the train records, in file order
};

AsyncRun run_async(const fs::path& dir, const std::string& yaml) {
  write_file_atomic(dir / "async.yaml", yaml);
  AsyncRun run;
  run.out = run_ajet("--conf " + shell_quote((dir / "async.yaml").string()) + " --exp-dir " +
                     shell_quote((dir / "exps").string()));
  if (run.out.status != 0 || !fs::exists(dir / "exps" / "run" / "metrics.jsonl")) return run;
  for (Json& r : read_jsonl(dir / "exps" / "run" / "metrics.jsonl")) {
    if (r["kind"] == "train") run.steps.push_back(std::move(r));
  }
  return run;
}

// Each step's record: its batch trained into version = step, from version step - 1, and no episode
// lagged more than the bound. Returns the largest staleness seen.
int64_t check_steps(const AsyncRun& run, int64_t max_staleness, int64_t steps) {
  EXPECT_EQ(int64_t(run.steps.size()), steps) << run.out.out;
  int64_t most = 0;
  for (size_t i = 0; i < run.steps.size(); ++i) {
    const Json& r = run.steps[i];
    SCOPED_TRACE(r.dump());
    EXPECT_EQ(r["step"].get<int64_t>(), int64_t(i) + 1);  // in step order, though finished late
    EXPECT_EQ(r["global_step"].get<int64_t>(), int64_t(i) + 1);
    EXPECT_TRUE(
        r["trainer"].contains("loss"));  // this step's batch's numbers, found by its version
    const Json& s = r["staleness"];
    if (!s.is_object()) {
      ADD_FAILURE() << "no staleness object";
      continue;
    }
    EXPECT_EQ(s["trained_from"].get<int64_t>(), int64_t(i));
    EXPECT_EQ(s["allowed"].get<int64_t>(), max_staleness);
    const int64_t max = s["max"].get<int64_t>();
    EXPECT_GE(max, 0);
    EXPECT_LE(max, max_staleness);  // the bound, on every batch
    EXPECT_LE(max, int64_t(i));     // nothing is older than the first weights
    if (!s["mean"].is_number()) {
      ADD_FAILURE() << "no mean staleness";
      continue;
    }
    EXPECT_GE(s["mean"].get<double>(), 0.0);
    EXPECT_LE(s["mean"].get<double>(), double(max));
    most = std::max(most, max);
  }
  return most;
}

TEST(ClassicAsync, NextRolloutOverlapsTrainingWithinMaxStaleness) {
  e2e::ScratchDir dir;
  const fs::path model = micro_model();
  AsyncRun run = run_async(dir.path(), async_yaml(model, 1));
  ASSERT_EQ(run.out.status, 0) << run.out.out;
  EXPECT_EQ(check_steps(run, 1, 5), 1) << "no batch was sampled while the one before it trained\n"
                                       << run.out.out;
  // The step line says it: "staleness <mean>/<max>".
  EXPECT_NE(run.out.out.find("  staleness "), std::string::npos) << run.out.out;
  // The front's own record of the batches agrees with the bound (swarm.log: "batch N trains from
  // policy_version V: staleness min a, mean b, max M over n episodes (...)
  // (ajet.async.max_staleness = 1)"), and dropped none.
  const std::string log = read_file(dir / "exps" / "run" / "swarm.log");
  EXPECT_EQ(log.find("staler than ajet.async.max_staleness"), std::string::npos) << log;
}

// Dynamic sampling (the main command's setting) with async: the launcher closes each step's batch
// with agree_sync_weight, so a step that sampled several task batches is still one trained batch.
TEST(ClassicAsync, DynamicSamplingKeepsStepsAndBatchesOneToOne) {
  e2e::ScratchDir dir;
  const fs::path model = micro_model();
  std::string yaml = async_yaml(
      model, 1,
      "  swarm_mode_sample_collection_method: rollout_until_finish_enough_non_dummy_tasks\n");
  yaml.replace(yaml.find("  trainer_common:\n"), 18,
               "  trainer_common:\n    algorithm:\n      max_num_gen_batches: 2\n");
  AsyncRun run = run_async(dir.path(), yaml);
  ASSERT_EQ(run.out.status, 0) << run.out.out;
  EXPECT_EQ(run.out.out.find("dynamic sampling needs a synchronous backbone"), std::string::npos)
      << run.out.out;
  check_steps(run, 1, 5);
  for (const Json& r : run.steps) {
    // Every task batch the step sampled is in its one trained batch.
    const int64_t batches = r["sampling"]["gen_batches"].get<int64_t>();
    EXPECT_EQ(r["rollout"]["episodes"].get<int64_t>(), batches * 4) << r.dump();
  }
}

// max_staleness 0: no overlap is allowed, so every batch is sampled entirely on the weights it
// trains from.
TEST(ClassicAsync, MaxStalenessZeroNeverTrainsAStaleToken) {
  e2e::ScratchDir dir;
  const fs::path model = micro_model();
  AsyncRun run = run_async(dir.path(), async_yaml(model, 0));
  ASSERT_EQ(run.out.status, 0) << run.out.out;
  EXPECT_EQ(check_steps(run, 0, 5), 0) << run.out.out;
}

}  // namespace
}  // namespace ajet::classic
