// build_train_batch: merged samples -> the engine's train_step request (docs/engine-rpc.md),
// checked through the real encoder/decoder pair so the engine's validation sees exactly these
// arrays.
#include <gtest/gtest.h>

#include "common/error.h"
#include "engine_control/batch_runner.h"
#include "rpc/messages.h"

namespace ajet::engine_control {
namespace {

tracking::Sample sample(std::string episode, std::string task, double reward, double weight,
                        std::vector<uint8_t> mask) {
  tracking::Sample s;
  s.episode_uuid = std::move(episode);
  s.task_id = std::move(task);
  s.reward = reward;
  s.weight = weight;
  for (size_t i = 0; i < mask.size(); ++i) {
    s.token_ids.push_back(int32_t(10 + i));
    s.loss_mask.push_back(mask[i]);
    // Generated tokens carry logprobs even where another sample trains them (mask 0 here).
    s.logprobs.push_back(i >= 2 ? -0.5f - float(i) : 0.0f);
    s.policy_versions.push_back(i >= 2 ? 3 : -1);
  }
  s.trainable = false;
  for (uint8_t m : mask) s.trainable = s.trainable || m != 0;
  return s;
}

TEST(BuildTrainBatch, PacksTrainableSamplesBackToBackWithPerSampleRewards) {
  BatchSamples in;
  in.batch.batch_id = 7;
  in.samples.push_back(sample("e1", "t1", 1.0, 0.5, {0, 0, 1, 1}));
  in.samples.push_back(sample("e1", "t1", 1.0, 0.0, {0, 0, 0}));  // nothing generated: left out
  in.samples.push_back(sample("e2", "t2", -2.0, 1.0, {0, 0, 0, 1, 1}));
  rpc::TrainBatch t = rpc::decode_train_batch(rpc::encode_train_batch(build_train_batch(in)));
  EXPECT_EQ(t.sample_offsets, (std::vector<int64_t>{0, 4, 9}));
  EXPECT_EQ(t.token_ids, (std::vector<int32_t>{10, 11, 12, 13, 10, 11, 12, 13, 14}));
  EXPECT_EQ(t.loss_mask, (std::vector<uint8_t>{0, 0, 1, 1, 0, 0, 0, 1, 1}));
  // Behaviour logprobs where trained; 0 elsewhere (the engine only reads them under the mask).
  EXPECT_EQ(t.logprobs, (std::vector<float>{0, 0, -2.5f, -3.5f, 0, 0, 0, -3.5f, -4.5f}));
  EXPECT_EQ(t.policy_versions, (std::vector<int32_t>{-1, -1, 3, 3, -1, -1, 3, 3, 3}));
  EXPECT_EQ(t.rewards, (std::vector<double>{1.0, -2.0}));
  EXPECT_EQ(t.weights, (std::vector<double>{0.5, 1.0}));
  EXPECT_EQ(t.task_ids, (std::vector<std::string>{"t1", "t2"}));
  EXPECT_EQ(t.episode_uuids, (std::vector<std::string>{"e1", "e2"}));
  EXPECT_TRUE(t.advantages.empty());  // the engine computes them per task group
  EXPECT_EQ(t.meta["batch_id"], 7);
}

TEST(BuildTrainBatch, ABatchWithoutGeneratedTokensIsRefused) {
  BatchSamples in;
  in.samples.push_back(sample("e1", "t1", 1.0, 0.0, {0, 0}));
  EXPECT_THROW(build_train_batch(in), Error);
}

// Per-role advantages: a two-role episode (solver: two samples, critic: one) becomes two episodes
// in two groups, each role's weights summing to 1, rewards from metadata.role_rewards where given.
TEST(SplitByRole, EachRoleIsAnEpisodeAndAGroupWithItsOwnRewardAndWeights) {
  tracking::MergedEpisode merged;
  for (const char* role : {"solver", "solver", "critic"}) {
    tracking::Sample s = sample("e1", "t1", 0.5, 1.0 / 3, {0, 1});
    s.agent_name = role;
    merged.samples.push_back(s);
  }
  split_by_role(merged, Json{{"role_rewards", {{"critic", -1.0}}}});
  double solver_weight = 0, critic_weight = 0;
  for (const tracking::Sample& s : merged.samples) {
    EXPECT_EQ(s.episode_uuid, "e1@" + s.agent_name);
    EXPECT_EQ(s.task_id, "t1@" + s.agent_name);
    (s.agent_name == "solver" ? solver_weight : critic_weight) += s.weight;
    EXPECT_EQ(s.reward, s.agent_name == "critic" ? -1.0 : 0.5);
  }
  EXPECT_DOUBLE_EQ(solver_weight, 1.0);
  EXPECT_DOUBLE_EQ(critic_weight, 1.0);
}

tracking::CallRecord call(tracking::FinishReason finish) {
  tracking::CallRecord c;
  c.finish_reason = finish;
  return c;
}

// Madness: an episode with a call a detector stopped is penalized, dropped or kept by the policy,
// and counted per detector; a clean episode keeps its reward.
TEST(MadnessReward, PenalizeDropOrKeepAndCount) {
  const std::vector<tracking::CallRecord> mad = {call(tracking::FinishReason::kStop),
                                                 call(tracking::FinishReason::kRepetition)};
  const std::vector<tracking::CallRecord> clean = {call(tracking::FinishReason::kLength)};
  BatchSamples out;
  MadnessPolicy p;
  p.reward = -0.5;
  EXPECT_EQ(madness_reward(clean, 1.0, p, out), 1.0);
  EXPECT_EQ(madness_reward(mad, 1.0, p, out), -0.5);
  p.action = MadnessAction::kDrop;
  EXPECT_FALSE(madness_reward(mad, 1.0, p, out).has_value());
  p.action = MadnessAction::kKeep;
  EXPECT_EQ(madness_reward(mad, 1.0, p, out), 1.0);
  EXPECT_EQ(out.mad_episodes, 3);
  EXPECT_EQ(out.mad_penalized, 1);
  EXPECT_EQ(out.mad_dropped, 1);
  EXPECT_EQ(out.mad_calls["repetition"], 3);
}

}  // namespace
}  // namespace ajet::engine_control
