// split_train_batch: the front's train_step request cut into one request per data-parallel rank,
// through the real encoder/decoder pair (what each rank's engine decodes).
#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include "engine_control/batch_runner.h"
#include "rpc/messages.h"
#include "train_data/batch.h"

namespace ajet::engine_control {
namespace {

tracking::Sample sample(const std::string& episode, const std::string& task, double reward,
                        size_t length) {
  tracking::Sample s;
  s.episode_uuid = episode;
  s.task_id = task;
  s.reward = reward;
  s.weight = 1.0;
  for (size_t i = 0; i < length; ++i) {
    s.token_ids.push_back(int32_t(20 + i));
    s.loss_mask.push_back(i >= 1 ? 1 : 0);
    s.logprobs.push_back(i >= 1 ? -0.25f * float(i) : 0.0f);
    s.policy_versions.push_back(i >= 1 ? 0 : -1);
  }
  s.trainable = true;
  return s;
}

rpc::TrainBatch request() {
  BatchSamples in;
  in.batch.batch_id = 3;
  in.samples = {sample("a1", "A", 1.0, 6), sample("a2", "A", 0.0, 5), sample("b1", "B", 1.0, 4),
                sample("b2", "B", 0.0, 6), sample("c1", "C", 0.5, 3)};
  return build_train_batch(in);
}

TEST(SplitTrainBatch, GroupsStayWholeEverySampleGoesToOneRankAndMetaNamesTheRank) {
  const rpc::TrainBatch whole = request();
  const auto parts = split_train_batch(whole, 2, train_data::AdvantageOptions{});
  ASSERT_EQ(parts.size(), 2u);
  std::multiset<std::string> seen;
  size_t tokens = 0;
  for (size_t r = 0; r < parts.size(); ++r) {
    const rpc::TrainBatch part = rpc::decode_train_batch(rpc::encode_train_batch(parts[r]));
    EXPECT_EQ(part.meta["rank"], r);
    EXPECT_EQ(part.meta["world_size"], 2);
    EXPECT_EQ(part.meta["batch_id"], 3);
    // GRPO: rewards travel, the engine computes advantages per group; a group never spans ranks.
    EXPECT_TRUE(part.advantages.empty());
    std::set<std::string> groups(part.task_ids.begin(), part.task_ids.end());
    for (const auto& g : groups) {
      for (size_t o = 0; o < parts.size(); ++o) {
        if (o == r) continue;
        EXPECT_EQ(std::count(parts[o].task_ids.begin(), parts[o].task_ids.end(), g), 0)
            << "group " << g;
      }
    }
    seen.insert(part.episode_uuids.begin(), part.episode_uuids.end());
    tokens += part.token_ids.size();
  }
  EXPECT_EQ(seen, (std::multiset<std::string>{"a1", "a2", "b1", "b2", "c1"}));
  EXPECT_EQ(tokens, whole.token_ids.size());
}

TEST(SplitTrainBatch, MoreRanksThanGroupsGivesEmptyPartsThatStillDecode) {
  const auto parts = split_train_batch(request(), 5, train_data::AdvantageOptions{});
  ASSERT_EQ(parts.size(), 5u);
  size_t empty = 0;
  for (const auto& p : parts) {
    const rpc::TrainBatch decoded = rpc::decode_train_batch(rpc::encode_train_batch(p));
    if (decoded.token_ids.empty()) {
      ++empty;
      EXPECT_TRUE(train_data::batch_from_rpc(decoded).samples.empty());
    }
  }
  EXPECT_EQ(empty, 2u);  // 3 groups over 5 ranks
}

TEST(SplitTrainBatch, ReinforcePlusPlusAdvantagesAreComputedOnTheWholeBatchAndTravelPerToken) {
  train_data::AdvantageOptions o;
  o.estimator = train_data::AdvantageEstimator::kReinforcePP;
  const auto parts = split_train_batch(request(), 2, o);
  double sum = 0;
  size_t episodes = 0;
  for (const auto& p : parts) {
    const rpc::TrainBatch decoded = rpc::decode_train_batch(rpc::encode_train_batch(p));
    EXPECT_TRUE(decoded.rewards.empty());
    EXPECT_EQ(decoded.advantages.size(), decoded.token_ids.size());
    for (size_t s = 0; s + 1 < decoded.sample_offsets.size(); ++s) {
      sum += decoded.advantages[size_t(decoded.sample_offsets[s])];
      ++episodes;
    }
  }
  // Normalised over all five episodes together (batch mean subtracted): they sum to 0.
  EXPECT_EQ(episodes, 5u);
  EXPECT_NEAR(sum, 0.0, 1e-5);
}

// The step's reward and group figures are the whole batch's, not rank 0's share; its advantage
// means weigh each rank's by its trained samples. Under REINFORCE++ the ranks receive advantages,
// not rewards, and report no reward or group figures of their own.
TEST(SplitTrainBatch, StepMetricsCoverEveryRank) {
  for (auto estimator :
       {train_data::AdvantageEstimator::kGrpo, train_data::AdvantageEstimator::kReinforcePP}) {
    train_data::AdvantageOptions o;
    o.estimator = estimator;
    const std::vector<Json> replies = {
        Json{{"samples", 3},
             {"advantage_mean", 0.5},
             {"advantage_abs_mean", 1.0},
             {"reward_mean", 0.0},
             {"groups", 0}},
        Json{{"samples", 1}, {"advantage_mean", -0.5}, {"advantage_abs_mean", 2.0}}};
    Json metrics = replies[0];
    whole_batch_metrics(train_data::batch_from_rpc(request()), o, replies, metrics);
    EXPECT_DOUBLE_EQ(metrics["advantage_mean"].get<double>(), (3 * 0.5 - 0.5) / 4);
    EXPECT_DOUBLE_EQ(metrics["advantage_abs_mean"].get<double>(), (3 * 1.0 + 2.0) / 4);
    EXPECT_DOUBLE_EQ(metrics["reward_mean"].get<double>(), 2.5 / 5);  // rewards 1, 0, 1, 0, 0.5
    EXPECT_EQ(metrics["groups"], 3);
    EXPECT_EQ(metrics["zero_variance_groups"], 1);  // C, a group of one
  }
}

}  // namespace
}  // namespace ajet::engine_control
