// Training through the engine with ajet-echo-engine (a test double whose train_step validates the
// batch like the engine, trains nothing and bumps the policy version): a full batch is merged, sent
// as one train_step, global_step and the served policy version advance, save_freq writes a
// checkpoint, and an engine that dies is restarted from that checkpoint. The real engine's version
// of this flow is in real_engine_test.cc.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "e2e_util.h"

namespace ajet::e2e {
namespace {

using ::testing::HasSubstr;

class TrainingTest : public ::testing::Test {
 protected:
  void SetUp() override {
    model_ = fixture(false).tokenizer;
    swarm_ = std::make_unique<SwarmProcess>(
        SwarmProcess::Options{dir_ / "server", bin("ajet-echo-engine"), "", {}});
    api_ = std::make_unique<Api>(swarm_->url());
  }
  // One episode: a chat call whose answer echoes `text`, then end_episode with `reward`.
  std::string episode(const std::string& task, const std::string& text, double reward) {
    Json e = api_->claim("client-t");
    EXPECT_TRUE(e.value("success", false)) << e.dump();
    auto r = api_->chat(e["openai_api_key"], user_chat(text));
    EXPECT_EQ(r.status, 200) << r.body;
    EXPECT_EQ(api_->end("client-t", e["episode_uuid"], task, reward).status, 200);
    return e["episode_uuid"];
  }
  // The newest /get_verbose_logs message containing `needle` ("" when none).
  std::string verbose_line(const std::string& needle) {
    Json logs = api_->get("/get_verbose_logs").json();
    std::string found;
    for (const Json& e : logs["entries"]) {
      std::string m = e.value("message", "");
      if (m.find(needle) != std::string::npos) found = m;
    }
    return found;
  }
  ScratchDir dir_;
  fs::path model_;
  std::unique_ptr<SwarmProcess> swarm_;
  std::unique_ptr<Api> api_;
};

TEST_F(TrainingTest, FullBatchTrainsOnceCheckpointsAndACrashedEngineResumesFromIt) {
  const fs::path checkpoints = dir_ / "ckpt";
  std::string yaml =
      config_yaml(model_, "  trainer_common:\n    save_freq: 1\n    checkpoint_base_dir: " +
                              checkpoints.string() + "\n");
  yaml.replace(yaml.find("backbone: debug"), std::string("backbone: debug").size(),
               "backbone: torch");
  api_->boot(yaml);
  // train_batch_size 2 tasks x num_repeat 2 episodes; the rewards differ within each task.
  std::vector<std::string> uuids = {episode("task-a", "alpha", 1.0), episode("task-a", "beta", 0.0),
                                    episode("task-b", "gamma delta", 0.5)};
  EXPECT_EQ(api_->status()["global_step"], 0);
  uuids.push_back(episode("task-b", "epsilon", 2.0));

  ASSERT_TRUE(eventually([&] { return api_->status()["global_step"] == 1; }))
      << api_->status().dump();
  EXPECT_TRUE(eventually([&] { return api_->engine_status() == "ENGINE.ROLLING"; }))
      << api_->status().dump();
  // What the engine received: 4 single-call episodes -> 4 samples, rewards summed, weights 1 each.
  std::string line = verbose_line("train_step {");
  ASSERT_FALSE(line.empty()) << api_->get("/get_verbose_logs").body;
  Json got = Json::parse(line.substr(line.find('{')));
  EXPECT_EQ(got["samples"], 4);
  EXPECT_EQ(got["episodes"], 4);
  EXPECT_EQ(got["groups"], 2);
  EXPECT_DOUBLE_EQ(got["reward_sum"].get<double>(), 3.5);
  EXPECT_DOUBLE_EQ(got["weight_sum"].get<double>(), 4.0);
  EXPECT_GT(got["trained_tokens"].get<int64_t>(),
            4);  // every echoed token plus the end-of-turn token
  EXPECT_LT(got["trained_tokens"].get<int64_t>(),
            got["tokens"].get<int64_t>());  // prompts are not trained

  // The status says it as fields: the batch of step 0 was trained, with the engine's statistics and
  // the rollout summary, and where the newest checkpoint is.
  const Json status = api_->status();
  ASSERT_EQ(status["recent_batches"].size(), 1u) << status.dump();
  const Json& batch = status["recent_batches"][0];
  EXPECT_EQ(batch["global_step"], 0);
  EXPECT_EQ(batch["trained"], true);
  EXPECT_EQ(batch["stats"]["samples"], 4) << batch.dump();
  EXPECT_EQ(batch["stats"]["rollout"]["episodes"], 4) << batch.dump();

  // save_freq 1: a checkpoint of version 1, and the next call is served by policy version 1.
  EXPECT_TRUE(fs::exists(checkpoints / "global_step_1" / "echo_checkpoint.json"));
  EXPECT_TRUE(eventually([&] {
    const Json latest = api_->status()["latest_checkpoint"];
    return latest.is_string() &&
           fs::equivalent(latest.get<std::string>(), checkpoints / "global_step_1");
  })) << api_->status().dump();
  Json next = api_->claim("client-t");
  auto r = api_->chat(next["openai_api_key"], user_chat("after the step", {{"logprobs", true}}));
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.json()["system_fingerprint"], "ajet-policy-1") << r.body;

  // The engine dies: the front restarts it with --resume on the newest checkpoint.
  // (engine_status_detail now tells the step, so the pid comes from the verbose log's ready line.)
  auto engine_pid = [&] { return pid_in(verbose_line("engine ready (pid")); };
  const int64_t pid = engine_pid();
  ASSERT_GT(pid, 0);
  ASSERT_EQ(::kill(pid_t(pid), SIGKILL), 0);
  ASSERT_TRUE(eventually([&] {
    return api_->engine_status() == "ENGINE.ROLLING" && engine_pid() != pid && engine_pid() > 0;
  })) << api_->status().dump();
  EXPECT_TRUE(
      eventually([&] { return !verbose_line("resumed policy_version 1 from").empty(); }, 10s))
      << api_->get("/get_verbose_logs").body;
  EXPECT_THAT(verbose_line("exited unexpectedly"), HasSubstr("restarting it from checkpoint"));
  EXPECT_EQ(api_->status()["global_step"], 1);
}

// Issue 38, disk: every step's calls were kept forever (the main command's 2-minute RL stage left a
// 210 MB store) and every step's log line listed each episode's staleness (1 MB of a 1.1 MB log).
// Now ajet.store_retention keeps the newest steps' calls in full and a sample of older steps', an
// episode whose calls went says so, and the log has one staleness summary a step.
TEST_F(TrainingTest, OlderStepsKeepASampleOfTheirCallsAndTheLogSummarisesStaleness) {
  std::string yaml =
      config_yaml(model_, "  store_retention:\n    full_steps: 1\n    sample_episodes: 1\n");
  yaml.replace(yaml.find("backbone: debug"), std::string("backbone: debug").size(),
               "backbone: torch");
  const http::Headers admin;  // this front has no admin token: the admin routes are open
  api_->boot(yaml);
  std::vector<std::vector<std::string>>
      steps;  // the episodes of each step, in the order they ended
  for (int step = 0; step < 3; ++step) {
    steps.push_back({episode("task-a", "alpha", 1.0), episode("task-a", "beta", 0.0),
                     episode("task-b", "gamma", 0.5), episode("task-b", "delta", 2.0)});
    ASSERT_TRUE(eventually([&] { return api_->status()["global_step"] == step + 1; }))
        << api_->status().dump();
  }
  auto document = [&](const std::string& uuid) {
    auto r = api_->get("/episodes/" + uuid, admin);
    EXPECT_EQ(r.status, 200) << r.body;
    return r.json();
  };
  // Steps 0 and 1 are older than the newest trained step: their first episode to end keeps its
  // call.
  for (int step = 0; step < 2; ++step) {
    const Json kept = document(steps[step][0]);
    EXPECT_EQ(kept["calls"].size(), 1u) << kept.dump().substr(0, 300);
    EXPECT_TRUE(kept["calls_not_retained"].is_null());
    for (size_t i = 1; i < steps[step].size(); ++i) {
      const Json gone = document(steps[step][i]);
      EXPECT_TRUE(gone["calls"].empty());
      const std::vector<double> rewards = {1.0, 0.0, 0.5, 2.0};
      EXPECT_EQ(gone["reward"], rewards[i]);
      ASSERT_TRUE(gone["calls_not_retained"].is_object()) << gone.dump().substr(0, 300);
      EXPECT_EQ(gone["calls_not_retained"]["calls"], 1);
      EXPECT_THAT(gone["calls_not_retained"]["message"].get<std::string>(),
                  HasSubstr("1 call not retained (retention: the last 1 trained step in full, of "
                            "each earlier step "
                            "the first 1 episode"));
    }
  }
  for (const std::string& uuid : steps[2]) EXPECT_EQ(document(uuid)["calls"].size(), 1u) << uuid;
  const Json listed = api_->get("/episodes?uuid=" + steps[0][3], admin).json();
  ASSERT_EQ(listed["episodes"].size(), 1u) << listed.dump();
  EXPECT_EQ(listed["episodes"][0]["llm_calls_not_retained"], 1);

  // One line a step: counts by staleness, no episode named.
  const std::string line = verbose_line("trains from policy_version 2");
  EXPECT_THAT(line, HasSubstr("staleness min 0, mean 0.00, max 0 over 4 episodes (0: 4)")) << line;
  for (const std::string& uuid : steps[2]) EXPECT_THAT(line, ::testing::Not(HasSubstr(uuid)));
}

}  // namespace
}  // namespace ajet::e2e
