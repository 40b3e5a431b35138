// Stopping a training front loses nothing (issue 45): SIGINT to `ajet-swarm start` saves the steps
// trained since the last checkpoint (with save_freq 0, the only checkpoint there is), says its step
// and directory, and `--resume` continues from that step; a stop with nothing new says so. A second
// signal while the checkpoint is being written stops the front at once, without it (the echo test
// double's save is made to hang, so the second signal always lands during the save).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "e2e_util.h"

namespace ajet::e2e {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

std::string logged_line(Api& api, const std::string& needle) {
  std::string found;
  const Json logs = api.get("/get_verbose_logs").json();  // kept alive: the loop walks into it
  for (const Json& e : logs["entries"]) {
    std::string m = e.value("message", "");
    if (m.find(needle) != std::string::npos) found = m;
  }
  return found;
}

// A torch config that checkpoints only on stop.
std::string stop_only_yaml(const fs::path& model, const fs::path& checkpoints,
                           const std::string& extra = "") {
  std::string yaml =
      config_yaml(model, "  trainer_common:\n    save_freq: 0\n    checkpoint_base_dir: " +
                             checkpoints.string() + "\n" + extra);
  yaml.replace(yaml.find("backbone: debug"), std::string("backbone: debug").size(),
               "backbone: torch");
  return yaml;
}

// One task's episodes, each a chat call and an end with its reward; returns the fingerprint (the
// policy version) that served the first call.
std::string one_task(Api& api, const std::string& task, const std::vector<double>& rewards) {
  std::string served;
  for (double reward : rewards) {
    Json e = api.claim("client-s");
    EXPECT_EQ(e["success"], true) << e.dump();
    auto r = api.chat(e["openai_api_key"], user_chat("Tell me about " + task, {{"max_tokens", 6}}));
    EXPECT_EQ(r.status, 200) << r.body;
    if (served.empty()) served = r.json().value("system_fingerprint", std::string());
    EXPECT_EQ(api.end("client-s", e["episode_uuid"], task, reward).status, 200);
  }
  return served;
}

TEST(StopSaveTest, SigintSavesTheTrainedStepAndResumeContinuesFromIt) {
  if (!fs::exists(bin("ajet-engine")))
    GTEST_FAIL() << "ajet-engine is not built: build the ajet-engine target";
  ScratchDir dir;
  const fs::path model = fixture(true).model;
  const fs::path checkpoints = dir / "ckpt";
  SwarmProcess swarm(SwarmProcess::Options{dir / "server", {}, "", {}});
  auto api = std::make_unique<Api>(swarm.url());
  api->boot(stop_only_yaml(model, checkpoints, "    optim:\n      lr: 0.001\n"));

  // Step 1 on the real engine: train_batch_size 2 tasks x num_repeat 2 episodes.
  EXPECT_EQ(one_task(*api, "task-a", {1.0, 0.0}), "ajet-policy-0");
  one_task(*api, "task-b", {0.0, 1.0});
  ASSERT_TRUE(eventually([&] { return api->status()["global_step"] == 1; }, 300s))
      << api->status().dump() << "\n"
      << api->get("/get_verbose_logs").body;
  ASSERT_TRUE(eventually([&] { return api->engine_status() == "ENGINE.ROLLING"; }))
      << api->status().dump();
  ASSERT_FALSE(fs::exists(checkpoints / "global_step_1")) << "save_freq 0 saved no checkpoint yet";

  // Ctrl-C: the front saves step 1, says where, and exits 0.
  int status = swarm.stop(SIGINT, 300s);
  const std::string first = swarm.output();
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "wait status " << status << "\n"
                                                             << first;
  EXPECT_THAT(first, HasSubstr("ajet-swarm: SIGINT: stopping"));
  EXPECT_THAT(first, HasSubstr("ajet-swarm: saving a checkpoint of step 1"));
  const fs::path saved = checkpoints / "global_step_1";
  EXPECT_THAT(first, HasSubstr("ajet-swarm: checkpoint of step 1 saved in " + saved.string() +
                               " (ajet-swarm start --resume continues from it)"));
  EXPECT_TRUE(fs::exists(saved / "trainer_state.json")) << first;
  EXPECT_TRUE(fs::exists(saved / "model" / "config.json")) << first;
  EXPECT_THAT(first, HasSubstr("ajet-swarm: stopped"));

  // --resume: the engine loads step 1's checkpoint, the front's step stays 1, and the next call is
  // served by policy version 1.
  swarm.start();
  api = std::make_unique<Api>(swarm.url());
  ASSERT_TRUE(eventually([&] { return api->engine_status() == "ENGINE.ROLLING"; }, 120s))
      << api->status().dump();
  EXPECT_THAT(logged_line(*api, "start_engine: resuming"),
              HasSubstr("from checkpoint " + saved.string()));
  EXPECT_THAT(logged_line(*api, "engine ready (pid"), HasSubstr("policy_version 1"));
  EXPECT_EQ(api->status()["global_step"], 1) << api->get("/get_verbose_logs").body;
  EXPECT_TRUE(logged_line(*api, "adopted the policy_version").empty())
      << "front and engine agree on the step";

  // Nothing trained since: a stop says so and saves nothing new.
  status = swarm.stop(SIGTERM, 120s);
  const std::string second = swarm.output();
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "wait status " << status << "\n"
                                                             << second;
  EXPECT_THAT(second, HasSubstr("ajet-swarm: no step trained since the last checkpoint (" +
                                saved.string() + "): nothing to save"));
  EXPECT_THAT(second, Not(HasSubstr("saving a checkpoint")));

  // Step 2 continues from step 1: trained from policy version 1, and saved at the next stop.
  swarm.start();
  api = std::make_unique<Api>(swarm.url());
  ASSERT_TRUE(eventually([&] { return api->engine_status() == "ENGINE.ROLLING"; }, 120s))
      << api->status().dump();
  EXPECT_EQ(one_task(*api, "task-c", {1.0, 0.0}), "ajet-policy-1");
  one_task(*api, "task-d", {0.0, 1.0});
  ASSERT_TRUE(eventually([&] { return api->status()["global_step"] == 2; }, 300s))
      << api->status().dump() << "\n"
      << api->get("/get_verbose_logs").body;
  ASSERT_TRUE(eventually([&] { return api->engine_status() == "ENGINE.ROLLING"; }))
      << api->status().dump();
  status = swarm.stop(SIGINT, 300s);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << swarm.output();
  EXPECT_THAT(swarm.output(), HasSubstr("ajet-swarm: checkpoint of step 2 saved in " +
                                        (checkpoints / "global_step_2").string()));
  EXPECT_TRUE(fs::exists(checkpoints / "global_step_2" / "trainer_state.json"));
}

TEST(StopSaveTest, ASecondSignalWhileSavingStopsAtOnceWithoutTheCheckpoint) {
  ScratchDir dir;
  const fs::path tokenizer = fixture(false).tokenizer;
  const fs::path checkpoints = dir / "ckpt";
  SwarmProcess::Options options{dir / "server", bin("ajet-echo-engine"), "", {}};
  options.env = {{"AJET_ECHO_SAVE_HOLDS", "1"}};  // the engine's save_checkpoint never returns
  SwarmProcess swarm(options);
  auto api = std::make_unique<Api>(swarm.url());
  std::string yaml = stop_only_yaml(tokenizer, checkpoints);
  yaml.replace(yaml.find("train_batch_size: 2"), std::string("train_batch_size: 2").size(),
               "train_batch_size: 1");
  api->boot(yaml);
  const int64_t engine = pid_in(logged_line(*api, "engine ready (pid"));
  ASSERT_GT(engine, 0) << api->get("/get_verbose_logs").body;
  one_task(*api, "task-a", {1.0, 0.0});
  ASSERT_TRUE(eventually([&] { return api->status()["global_step"] == 1; }))
      << api->status().dump();

  // The first signal starts the save, which hangs; the second, sent once the front says it is
  // saving, ends the process at once. The bound only guards against a front that hangs with it.
  swarm.send(SIGINT);
  ASSERT_FALSE(swarm.wait_for_line("ajet-swarm: saving a checkpoint of step 1", 120s).empty())
      << swarm.output();
  const int status = swarm.stop(SIGINT, 120s);
  const std::string out = swarm.output();
  ASSERT_TRUE(WIFEXITED(status)) << "the front did not exit by itself: wait status " << status
                                 << "\n"
                                 << out;
  EXPECT_EQ(WEXITSTATUS(status), 128 + SIGINT) << out;
  EXPECT_THAT(out, HasSubstr("ajet-swarm: SIGINT again: stopping at once, without the checkpoint "
                             "of step 1 (--resume continues from the model and trains the steps "
                             "after it again from the stored episodes)"));
  EXPECT_THAT(out, Not(HasSubstr("checkpoint of step 1 saved")));
  EXPECT_THAT(out, Not(HasSubstr("ajet-swarm: stopped")));
  EXPECT_FALSE(fs::exists(checkpoints / "global_step_1"));
  EXPECT_TRUE(eventually([&] { return process_gone(engine); })) << "the engine died with the front";

  // The store is as after a crash: --resume serves again, from the model, says the step that was
  // not saved is lost from the weights, and trains its episodes again (the task ledger).
  swarm.start();
  api = std::make_unique<Api>(swarm.url());
  ASSERT_TRUE(eventually([&] { return api->engine_status() == "ENGINE.ROLLING"; }))
      << api->status().dump();
  EXPECT_THAT(logged_line(*api, "adopted the policy_version"), HasSubstr("global_step 1 -> 0"));
  EXPECT_THAT(logged_line(*api, "lost from the weights"), HasSubstr("train again"));
  EXPECT_TRUE(eventually([&] { return api->status()["global_step"] == 1; }))
      << api->get("/get_verbose_logs").body;
}

}  // namespace
}  // namespace ajet::e2e
