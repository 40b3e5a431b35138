// The token-balanced split of a batch across data-parallel ranks: whole groups, balanced parts, a
// pure function of the batch, and batch-level advantages attached before the split. No libtorch.
#include "train_data/dist_split.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "common/error.h"
#include "train_data/advantage.h"
#include "test_util.h"

namespace ajet::train_data {
namespace {

// Every sample lands on exactly one rank, groups stay whole, parts are balanced and the split is a
// pure function of the batch.
TEST(SplitBatch, WholeGroupsBalancedByTokens) {
  Batch batch = testing::random_batch(7, 3, 5, 9, 61, 31);
  // Make the groups very unequal in size.
  for (size_t i = 0; i < 3; ++i) {
    for (int k = 0; k < 40; ++k) {
      batch.samples[i].token_ids.push_back(3);
      batch.samples[i].loss_mask.push_back(0);
      batch.samples[i].logprobs.push_back(0);
    }
  }
  AdvantageOptions grpo;
  for (int world : {1, 2, 3, 8}) {
    auto parts = split_batch(batch, world, grpo);
    ASSERT_EQ(parts.size(), static_cast<size_t>(world));
    std::map<std::string, int> rank_of_group;
    std::multiset<std::string> seen;
    int64_t largest_group = 0;
    std::map<std::string, int64_t> group_tokens;
    for (const auto& s : batch.samples)
      largest_group =
          std::max(largest_group, group_tokens[s.task_id] += static_cast<int64_t>(s.size()));
    for (int r = 0; r < world; ++r) {
      for (const auto& s : parts[static_cast<size_t>(r)].samples) {
        seen.insert(s.episode_uuid);
        auto [it, fresh] = rank_of_group.emplace(s.task_id, r);
        EXPECT_EQ(it->second, r) << "group " << s.task_id << " split across ranks";
        EXPECT_TRUE(s.advantages.empty());
      }
    }
    EXPECT_EQ(seen.size(), batch.samples.size());
    for (const auto& s : batch.samples) EXPECT_EQ(seen.count(s.episode_uuid), 1u) << s.episode_uuid;
    auto tokens = part_tokens(parts);
    const auto [lo, hi] = std::minmax_element(tokens.begin(), tokens.end());
    if (world <= 7) {
      EXPECT_LE(*hi - *lo, largest_group) << "world " << world;
    }
    // Deterministic, and the batch order survives inside a part.
    auto again = split_batch(batch, world, grpo);
    for (int r = 0; r < world; ++r) {
      ASSERT_EQ(again[static_cast<size_t>(r)].samples.size(),
                parts[static_cast<size_t>(r)].samples.size());
      for (size_t k = 0; k < parts[static_cast<size_t>(r)].samples.size(); ++k) {
        EXPECT_EQ(again[static_cast<size_t>(r)].samples[k].episode_uuid,
                  parts[static_cast<size_t>(r)].samples[k].episode_uuid);
        if (k > 0) {
          EXPECT_LT(parts[static_cast<size_t>(r)].samples[k - 1].episode_uuid,
                    parts[static_cast<size_t>(r)].samples[k].episode_uuid);
        }
      }
    }
  }
  // 7 groups on 8 ranks: one rank gets nothing (and must still join every all-reduce).
  auto parts = split_batch(batch, 8, grpo);
  EXPECT_EQ(
      std::count_if(parts.begin(), parts.end(), [](const Batch& b) { return b.samples.empty(); }),
      1);
  EXPECT_THROW(split_batch(batch, 0, grpo), Error);
}

// Episodes without a task_id form one group for the advantages (compute_advantages groups by the id
// as it is), so they stay on one rank: split over ranks they would each see half of the group, e.g.
// rewards 1, 1 on one rank and 0, 0 on the other, and every advantage would be 0.
TEST(SplitBatch, EpisodesWithoutATaskIdAreOneGroup) {
  Batch batch = testing::random_batch(4, 1, 5, 9, 61, 7);
  for (size_t i = 0; i < batch.samples.size(); ++i) {
    batch.samples[i].task_id = "";
    batch.samples[i].reward = i % 2 == 0 ? 1.0 : 0.0;
  }
  for (int world : {2, 3, 4}) {
    auto parts = split_batch(batch, world, AdvantageOptions{});
    EXPECT_EQ(std::count_if(parts.begin(), parts.end(),
                            [](const Batch& b) { return !b.samples.empty(); }),
              1)
        << "world " << world;
    for (const auto& p : parts) {
      if (!p.samples.empty()) {
        EXPECT_EQ(p.samples.size(), batch.samples.size());
      }
    }
  }
}

// REINFORCE++ normalises over the batch: the split attaches the whole batch's advantages, per
// token.
TEST(SplitBatch, BatchLevelAdvantagesAreAttached) {
  Batch batch = testing::random_batch(3, 4, 5, 4, 61, 32);
  AdvantageOptions rpp;
  rpp.estimator = AdvantageEstimator::kReinforcePP;
  std::vector<double> rewards;
  std::vector<std::string> groups;
  for (const auto& s : batch.samples) {
    rewards.push_back(s.reward);
    groups.push_back(s.task_id);
  }
  const AdvantageResult whole = compute_advantages(rewards, groups, rpp);
  auto parts = split_batch(batch, 2, rpp);
  size_t total = 0;
  for (const auto& part : parts) {
    EXPECT_FALSE(part.samples.empty());
    for (const auto& s : part.samples) {
      size_t index = 0;
      while (batch.samples[index].episode_uuid != s.episode_uuid) ++index;
      ASSERT_EQ(s.advantages.size(), s.size());
      for (float a : s.advantages) EXPECT_FLOAT_EQ(a, static_cast<float>(whole.advantages[index]));
      ++total;
    }
  }
  EXPECT_EQ(total, batch.samples.size());
}

}  // namespace
}  // namespace ajet::train_data
