// Advantage estimators against hand-computed values (no libtorch in this file).
#include "train_data/advantage.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "common/error.h"

namespace ajet::train_data {
namespace {

AdvantageResult run(const std::vector<double>& rewards, const std::vector<std::string>& groups,
                    AdvantageEstimator estimator, bool drop = false) {
  AdvantageOptions o;
  o.estimator = estimator;
  o.drop_zero_variance_groups = drop;
  return compute_advantages(rewards, groups, o);
}

TEST(Advantage, GrpoNormalisesByUnbiasedStdPerGroup) {
  // Group a: rewards 1, 0, 0, 1: mean 0.5, unbiased std sqrt((4 * 0.25) / 3) = sqrt(1/3).
  // Group b: one episode -> 0. Group c: -5, 5: mean 0, std sqrt(50) -> -+5/sqrt(50).
  auto r =
      run({1, 0, 3, 0, 1, -5, 5}, {"a", "a", "b", "a", "a", "c", "c"}, AdvantageEstimator::kGrpo);
  const double a = 0.5 / (std::sqrt(1.0 / 3.0) + 1e-6);
  const double c = 5.0 / (std::sqrt(50.0) + 1e-6);
  const std::vector<double> expected = {a, -a, 0.0, -a, a, -c, c};
  ASSERT_EQ(r.advantages.size(), expected.size());
  for (size_t i = 0; i < expected.size(); ++i)
    EXPECT_NEAR(r.advantages[i], expected[i], 1e-12) << i;
  EXPECT_EQ(r.groups, 3);
  EXPECT_EQ(r.zero_variance_groups, 1);  // b (a group of one)
  for (auto k : r.kept) EXPECT_EQ(k, 1);
}

TEST(Advantage, GrpoEpsilonKeepsEqualRewardsFinite) {
  auto r = run({2, 2, 2}, {"g", "g", "g"}, AdvantageEstimator::kGrpo);
  for (double x : r.advantages) EXPECT_EQ(x, 0.0);
  EXPECT_EQ(r.zero_variance_groups, 1);
}

TEST(Advantage, DrGrpoOnlyCentres) {
  auto r = run({1, 0, 0, 1, 7}, {"a", "a", "a", "a", "b"}, AdvantageEstimator::kDrGrpo);
  const std::vector<double> expected = {0.5, -0.5, -0.5, 0.5, 0.0};
  for (size_t i = 0; i < expected.size(); ++i) EXPECT_DOUBLE_EQ(r.advantages[i], expected[i]) << i;
}

TEST(Advantage, RlooSubtractsTheMeanOfTheOthers) {
  // 1 - (2 + 6) / 2 = -3; 2 - (1 + 6) / 2 = -1.5; 6 - (1 + 2) / 2 = 4.5.
  auto r = run({1, 2, 6, -4}, {"x", "x", "x", "y"}, AdvantageEstimator::kRloo);
  EXPECT_NEAR(r.advantages[0], -3.0, 1e-12);
  EXPECT_NEAR(r.advantages[1], -1.5, 1e-12);
  EXPECT_NEAR(r.advantages[2], 4.5, 1e-12);
  EXPECT_EQ(r.advantages[3], 0.0);
}

TEST(Advantage, ReinforcePlusPlusNormalisesOverTheBatch) {
  // Batch 1, 2, 6, 3: mean 3, unbiased std sqrt((4 + 1 + 9 + 0) / 3); groups do not matter.
  auto r = run({1, 2, 6, 3}, {"x", "x", "y", "z"}, AdvantageEstimator::kReinforcePP);
  const double std = std::sqrt(14.0 / 3.0);
  const std::vector<double> expected = {-2 / (std + 1e-6), -1 / (std + 1e-6), 3 / (std + 1e-6),
                                        0.0};
  for (size_t i = 0; i < expected.size(); ++i)
    EXPECT_NEAR(r.advantages[i], expected[i], 1e-12) << i;
}

TEST(Advantage, DropsZeroVarianceGroupsWhenAsked) {
  auto keep = run({1, 1, 0, 1, 5}, {"flat", "flat", "mixed", "mixed", "single"},
                  AdvantageEstimator::kGrpo, false);
  EXPECT_EQ(keep.zero_variance_groups, 2);
  for (auto k : keep.kept) EXPECT_EQ(k, 1);
  auto drop = run({1, 1, 0, 1, 5}, {"flat", "flat", "mixed", "mixed", "single"},
                  AdvantageEstimator::kGrpo, true);
  EXPECT_EQ(drop.kept, (std::vector<uint8_t>{0, 0, 1, 1, 0}));
  EXPECT_NEAR(drop.advantages[2], -0.5 / (std::sqrt(0.5) + 1e-6), 1e-12);
}

// With REINFORCE++ a flat group still has advantages (the baseline is the batch's); when such
// groups are dropped, the batch statistics are those of the episodes that stay, as verl filters
// before it computes advantages.
TEST(Advantage, ReinforcePlusPlusStatisticsLeaveDroppedGroupsOut) {
  auto drop = run({1, 1, 0, 2, 9}, {"flat", "flat", "m", "m", "single"},
                  AdvantageEstimator::kReinforcePP, true);
  EXPECT_EQ(drop.kept, (std::vector<uint8_t>{0, 0, 1, 1, 0}));
  // Kept 0, 2: mean 1, unbiased std sqrt(2).
  EXPECT_NEAR(drop.advantages[2], -1 / (std::sqrt(2.0) + 1e-6), 1e-12);
  EXPECT_NEAR(drop.advantages[3], 1 / (std::sqrt(2.0) + 1e-6), 1e-12);
  auto keep = run({1, 1, 0, 2, 9}, {"flat", "flat", "m", "m", "single"},
                  AdvantageEstimator::kReinforcePP, false);
  EXPECT_EQ(keep.zero_variance_groups, 2);
  EXPECT_NEAR(keep.advantages[0], (1 - 2.6) / (std::sqrt(13.3) + 1e-6),
              1e-12);  // mean 2.6, var 53.2/4
}

TEST(Advantage, RejectsBadInput) {
  AdvantageOptions o;
  const std::vector<std::string> groups = {"a", "a"};
  const std::vector<double> bad = {1.0, std::numeric_limits<double>::quiet_NaN()};
  EXPECT_THROW(compute_advantages(bad, groups, o), Error);
  const std::vector<double> one = {1.0};
  EXPECT_THROW(compute_advantages(one, groups, o), Error);
  EXPECT_THROW(estimator_from_name("ppo"), Error);
  EXPECT_EQ(estimator_from_name("reinforce_plus_plus"), AdvantageEstimator::kReinforcePP);
  EXPECT_EQ(estimator_name(AdvantageEstimator::kDrGrpo), "drgrpo");
}

}  // namespace
}  // namespace ajet::train_data
