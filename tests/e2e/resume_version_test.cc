// Front and engine agree on the step after the engine resumes from a checkpoint older than the
// front's last step: save_freq 2, three steps, the engine dies and comes back from global_step_2
// (ajet-echo- engine: a test double whose versions and checkpoints follow the engine's RPC), and
// the front's global_step follows it down to 2 instead of claiming 3; the next call is served by
// version 2 and the next step is 3 on both sides.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "e2e_util.h"

namespace ajet::e2e {
namespace {

using ::testing::HasSubstr;

std::string verbose_line(Api& api, const std::string& needle) {
  std::string found;
  const Json logs = api.get("/get_verbose_logs").json();  // kept alive: the loop walks into it
  for (const Json& e : logs["entries"]) {
    std::string m = e.value("message", "");
    if (m.find(needle) != std::string::npos) found = m;
  }
  return found;
}

TEST(ResumeVersionTest, TheFrontAdoptsThePolicyVersionOfTheCheckpointTheEngineResumedFrom) {
  ScratchDir dir;
  const fs::path tokenizer = fixture(false).tokenizer;
  SwarmProcess swarm(SwarmProcess::Options{dir / "server", bin("ajet-echo-engine"), "", {}});
  Api api(swarm.url());
  std::string yaml =
      config_yaml(tokenizer, "  trainer_common:\n    save_freq: 2\n    checkpoint_base_dir: " +
                                 (dir / "ckpt").string() + "\n");
  yaml.replace(yaml.find("backbone: debug"), std::string("backbone: debug").size(),
               "backbone: torch");
  yaml.replace(yaml.find("train_batch_size: 2"), std::string("train_batch_size: 2").size(),
               "train_batch_size: 1");
  api.boot(yaml);
  // The engine's pid, read while its ready line is among the log's recent entries.
  auto engine_pid = [&] { return pid_in(verbose_line(api, "engine ready (pid")); };
  ASSERT_TRUE(eventually([&] { return engine_pid() > 0; })) << api.get("/get_verbose_logs").body;
  const int64_t pid = engine_pid();

  // One batch = one task x 2 episodes; returns the policy version that served the call.
  auto episode = [&](const std::string& task, double reward) {
    Json e = api.claim("client-v");
    EXPECT_EQ(e["success"], true) << e.dump();
    auto r = api.chat(e["openai_api_key"], user_chat("hello " + task));
    EXPECT_EQ(r.status, 200) << r.body;
    EXPECT_EQ(api.end("client-v", e["episode_uuid"], task, reward).status, 200);
    return r.json().value("system_fingerprint", std::string());
  };
  for (int step = 0; step < 3; ++step) {
    const std::string task = "task-" + std::to_string(step);
    EXPECT_EQ(episode(task, 1.0), "ajet-policy-" + std::to_string(step));
    episode(task, 0.0);
    ASSERT_TRUE(eventually([&] { return api.status()["global_step"] == step + 1; }))
        << api.status().dump();
  }
  ASSERT_TRUE(fs::exists(dir / "ckpt" / "global_step_2"));
  ASSERT_FALSE(fs::exists(dir / "ckpt" / "global_step_3"));

  // The engine dies after step 3; the newest checkpoint is step 2's. The restarted engine serves
  // version 2, the front adopts it, then trains the lost batch of step 3 again from the store (the
  // task ledger), so both sides count 3 again.
  ASSERT_EQ(::kill(pid_t(pid), SIGKILL), 0);
  ASSERT_TRUE(eventually([&] {
    return api.engine_status() == "ENGINE.ROLLING" && engine_pid() != pid && engine_pid() > 0 &&
           api.status()["global_step"] == 3;
  })) << api.get("/get_verbose_logs").body;
  EXPECT_THAT(verbose_line(api, "engine ready (pid"), HasSubstr("policy_version 2"));
  EXPECT_THAT(verbose_line(api, "adopted the policy_version the engine serves"),
              HasSubstr("global_step 3 -> 2"));
  EXPECT_THAT(verbose_line(api, "lost from the weights"), HasSubstr("train again"));

  // The next call is served by the weights of step 3 (trained again), the next step is 4.
  EXPECT_EQ(episode("task-3", 1.0), "ajet-policy-3");
  episode("task-3", 0.0);
  ASSERT_TRUE(eventually([&] { return api.status()["global_step"] == 4; })) << api.status().dump();
  EXPECT_EQ(episode("task-4", 1.0), "ajet-policy-4");
  EXPECT_TRUE(verbose_line(api, "the engine reports policy_version").empty())
      << "front and engine counted alike";
}

}  // namespace
}  // namespace ajet::e2e
