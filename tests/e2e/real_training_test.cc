// One real training step through the front: ajet-swarm with the real ajet-engine (torch backbone)
// and the micro fixture model. Four episodes from the command API and the OpenAI API fill the batch
// (2 tasks x 2 repeats), the front merges and sends them as one train_step, the engine runs a real
// GRPO step, global_step becomes 1 and the next call is served by policy version 1; save_freq 1
// leaves a checkpoint the engine can resume from.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "e2e_util.h"

namespace ajet::e2e {
namespace {

using ::testing::HasSubstr;

TEST(RealTrainingTest, AFullBatchIsOneRealTrainingStepAndAdvancesThePolicyVersion) {
  if (!fs::exists(bin("ajet-engine")))
    GTEST_FAIL() << "ajet-engine is not built: build the ajet-engine target";
  ScratchDir dir;
  const fs::path model = fixture(true).model;
  SwarmProcess swarm(SwarmProcess::Options{dir / "server", {}, "", {}});
  Api api(swarm.url());
  std::string yaml =
      config_yaml(model, "  trainer_common:\n    save_freq: 1\n    checkpoint_base_dir: " +
                             (dir / "ckpt").string() + "\n    optim:\n      lr: 0.001\n");
  yaml.replace(yaml.find("backbone: debug"), std::string("backbone: debug").size(),
               "backbone: torch");
  api.boot(yaml);

  const std::vector<std::pair<std::string, double>> episodes = {
      {"task-a", 1.0}, {"task-a", 0.0}, {"task-b", 0.0}, {"task-b", 1.0}};
  for (const auto& [task, reward] : episodes) {
    Json e = api.claim("client-r");
    ASSERT_EQ(e["success"], true) << e.dump();
    auto r = api.chat(e["openai_api_key"],
                      user_chat("Say something about " + task, {{"max_tokens", 6}}));
    ASSERT_EQ(r.status, 200) << r.body;
    EXPECT_EQ(r.json()["system_fingerprint"], "ajet-policy-0");
    ASSERT_EQ(api.end("client-r", e["episode_uuid"], task, reward).status, 200);
  }
  ASSERT_TRUE(eventually([&] { return api.status()["global_step"] == 1; }, 300s))
      << api.status().dump() << "\n"
      << api.get("/get_verbose_logs").body;
  ASSERT_TRUE(eventually([&] { return api.engine_status() == "ENGINE.ROLLING"; }))
      << api.status().dump();
  // The batch runner logs "step 0 done" just after the registry moved to step 1: wait for the line.
  std::string logs;
  EXPECT_TRUE(eventually([&] {
    logs = api.get("/get_verbose_logs").body;
    return logs.find("step 0 done: policy_version 1") != std::string::npos;
  })) << logs;
  EXPECT_THAT(logs, HasSubstr("checkpoint (save_freq 1): policy_version 1"));
  EXPECT_TRUE(fs::exists(dir / "ckpt" / "global_step_1")) << logs;

  Json next = api.claim("client-r");
  auto r = api.chat(next["openai_api_key"], user_chat("And now?", {{"max_tokens", 4}}));
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.json()["system_fingerprint"], "ajet-policy-1") << r.body;
}

}  // namespace
}  // namespace ajet::e2e
