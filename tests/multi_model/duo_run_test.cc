// `ajet --conf duo.yaml`: the real ajet starts one ajet-swarm and one ajet-engine per model, trains
// both on the micro model with the torch backbone, validates the pair, writes per-model metrics,
// and leaves no front or engine behind.
#include <gmock/gmock.h>
#include <sys/wait.h>

#include <set>

#include "classic/classic_fixture.h"
#include "classic/experiment_dir.h"
#include "common/fs.h"
#include "store/store.h"

namespace ajet::multi_model {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

std::string duo_yaml(const fs::path& model) {
  std::string yaml = classic::classic_yaml(model,
                                           "  multi_model:\n"
                                           "    workflow: calc_duo\n"
                                           "    models:\n"
                                           "      - {name: caller, path: " +
                                               model.string() +
                                               "}\n"
                                               "      - {name: answerer, path: " +
                                               model.string() + "}\n");
  yaml.replace(yaml.find("backbone: debug"), 15, "backbone: torch");
  return yaml;
}

TEST(DuoRun, TwoFrontsTrainTheirModelAndStopOnExit) {
  const fs::path model = classic::micro_model();
  e2e::ScratchDir dir;
  write_file_atomic(dir / "duo.yaml", duo_yaml(model));
  e2e::Captured r = e2e::run_capture(e2e::shell_quote(e2e::bin("ajet").string()) + " --conf " +
                                     e2e::shell_quote((dir / "duo.yaml").string()) + " --exp-dir " +
                                     e2e::shell_quote((dir / "exps").string()) + " 2>&1");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_THAT(r.out, HasSubstr("multi-model run (calc_duo): 2 models, torch backbone"));
  const fs::path exp = dir / "exps" / "run";
  std::vector<Json> records = classic::read_jsonl(exp / "metrics.jsonl");
  std::vector<int64_t> validated, trained;
  for (const Json& rec : records) {
    if (rec["kind"] == "validation") validated.push_back(rec["step"].get<int64_t>());
    if (rec["kind"] != "train") continue;
    trained.push_back(rec["step"].get<int64_t>());
    EXPECT_EQ(rec["episodes"], 4);  // 2 tasks x 2 repeats, each an episode on both servers
    // The caller plays every episode's first turn: its front trains every group's episode.
    EXPECT_EQ(rec["caller"]["episodes"], 4) << rec.dump();
    EXPECT_TRUE(rec["caller"].contains("reward_mean")) << rec.dump();
    // The answerer plays only after a calculator call, which a random micro model rarely makes: its
    // front then has nothing to train on, and the record says so instead of waiting forever.
    const Json& answerer = rec["answerer"];
    EXPECT_TRUE(answerer.value("episodes", 0) == 4 || answerer.value("trained", true) == false)
        << rec.dump();
  }
  EXPECT_EQ(trained, (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(validated, (std::vector<int64_t>{0, 1, 2}));
  for (const char* name : {"caller", "answerer"})
    EXPECT_TRUE(fs::exists(exp / name / "swarm.log")) << name;
  EXPECT_TRUE(
      fs::is_directory(exp / "caller" / "checkpoints"));  // its own, saved when its engine stopped
  EXPECT_TRUE(classic::find_leftovers(exp).empty());      // every front and engine stopped
  // Each model's front holds the pair's validation next to its own batches, and its TensorBoard
  // file.
  for (const char* name : {"caller", "answerer"}) {
    store::Store store(exp / name / "swarm" / "swarm.sqlite");
    std::vector<int64_t> steps;
    for (const auto& row : store.get_metrics("val/greedy_success")) steps.push_back(row.step);
    EXPECT_EQ(steps, (std::vector<int64_t>{0, 1, 2})) << name;
    EXPECT_TRUE(fs::is_directory(exp / name / "tensorboard")) << name;
  }
  store::Store caller(exp / "caller" / "swarm" /
                      "swarm.sqlite");  // its batches trained (the answerer's may not)
  EXPECT_FALSE(caller.get_metrics("train/loss").empty());
  EXPECT_FALSE(caller.get_metrics("rollout/reward_mean").empty());
}

// calc_duo with both models as LoRA adapters of the one model a single front and engine serve.
TEST(DuoRun, TwoAdaptersOfOneEngineTrainTheirOwnTurns) {
  const fs::path model = classic::micro_model();
  e2e::ScratchDir dir;
  std::string yaml = classic::classic_yaml(model,
                                           "  multi_model:\n"
                                           "    workflow: calc_duo\n"
                                           "    models:\n"
                                           "      - {name: caller, adapter: {rank: 4, alpha: 8}}\n"
                                           "      - {name: answerer, adapter: {rank: 2}}\n");
  yaml.replace(yaml.find("backbone: debug"), 15, "backbone: torch");
  write_file_atomic(dir / "duo.yaml", yaml);
  e2e::Captured r = e2e::run_capture(e2e::shell_quote(e2e::bin("ajet").string()) + " --conf " +
                                     e2e::shell_quote((dir / "duo.yaml").string()) + " --exp-dir " +
                                     e2e::shell_quote((dir / "exps").string()) + " 2>&1");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_THAT(r.out, HasSubstr("multi-model run (calc_duo): 2 models, torch backbone"));
  EXPECT_THAT(r.out, HasSubstr("one front and engine for 2 adapters of"));
  EXPECT_THAT(r.out, HasSubstr("model caller: LoRA adapter rank 4 alpha 8"));
  const fs::path exp = dir / "exps" / "run";
  std::vector<int64_t> validated, trained;
  for (const Json& rec : classic::read_jsonl(exp / "metrics.jsonl")) {
    if (rec["kind"] == "validation") validated.push_back(rec["step"].get<int64_t>());
    if (rec["kind"] != "train") continue;
    trained.push_back(rec["step"].get<int64_t>());
    EXPECT_EQ(rec["episodes"], 4);
    // Every episode's first turn is the caller's: its adapter trained on this step's batch.
    EXPECT_EQ(rec["caller"]["episodes"], 4) << rec.dump();
    EXPECT_TRUE(rec["caller"].contains("loss")) << rec.dump();
    EXPECT_TRUE(rec["caller"].contains("reward_mean")) << rec.dump();
    EXPECT_EQ(rec["answerer"]["episodes"], 4) << rec.dump();
  }
  EXPECT_EQ(trained, (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(validated, (std::vector<int64_t>{0, 1, 2}));
  // One front and engine for both; each model's adapter saved in PEFT layout.
  EXPECT_TRUE(fs::exists(exp / "engine" / "swarm.log"));
  EXPECT_FALSE(fs::exists(exp / "caller" / "swarm.log"));
  for (const char* name : {"caller", "answerer"}) {
    EXPECT_TRUE(fs::exists(exp / name / "adapter" / "adapter_model.safetensors")) << r.out;
    const Json config = Json::parse(read_file(exp / name / "adapter" / "adapter_config.json"));
    EXPECT_EQ(config["r"], std::string(name) == "caller" ? 4 : 2) << config.dump();
  }
  EXPECT_TRUE(classic::find_leftovers(exp).empty());
  // The one front stored each member's episodes under its own task id, and its calls under its
  // adapter; the pair's validation sits beside the batches.
  store::Store store(exp / "engine" / "swarm" / "swarm.sqlite");
  std::set<std::string> suffixes;
  for (const store::EpisodeRow& e : store.get_batch_episodes(1))
    suffixes.insert(e.task_id.substr(e.task_id.find('@')));
  EXPECT_EQ(suffixes, (std::set<std::string>{"@answerer", "@caller"}));
  EXPECT_FALSE(store.get_metrics("train/loss").empty());
  EXPECT_EQ(store.get_metrics("val/greedy_success").size(), 3u);
}

TEST(DuoRun, ABadMultiModelSectionIsAClearErrorBeforeAnythingStarts) {
  e2e::ScratchDir dir;
  write_file_atomic(dir / "duo.yaml",
                    "ajet:\n  multi_model:\n    models:\n      - {name: only, path: /nowhere}\n");
  e2e::Captured r = e2e::run_capture(e2e::shell_quote(e2e::bin("ajet").string()) + " --conf " +
                                     e2e::shell_quote((dir / "duo.yaml").string()) + " 2>&1");
  EXPECT_EQ(WEXITSTATUS(r.status), 2) << r.out;
  EXPECT_THAT(r.out, HasSubstr("ajet.multi_model.models: calc_duo needs exactly two models"));
}

}  // namespace
}  // namespace ajet::multi_model
