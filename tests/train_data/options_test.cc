// The trainer's config mapping and learning-rate schedule (no libtorch in this file).
#include "train_data/options.h"

#include <gtest/gtest.h>

#include <cmath>
#include <numbers>

#include "common/error.h"
#include "config/config.h"
#include "config/load.h"

namespace ajet::train_data {
namespace {

TEST(LearningRate, WarmupThenConstant) {
  OptimOptions o;
  o.lr = 1.0;
  o.warmup_steps = 4;
  EXPECT_DOUBLE_EQ(learning_rate(o, 0), 0.25);
  EXPECT_DOUBLE_EQ(learning_rate(o, 1), 0.5);
  EXPECT_DOUBLE_EQ(learning_rate(o, 3), 1.0);
  EXPECT_DOUBLE_EQ(learning_rate(o, 100), 1.0);
}

TEST(LearningRate, CosineDecaysToTheFloor) {
  OptimOptions o;
  o.lr = 2.0;
  o.warmup_steps = 2;
  o.cosine = true;
  o.min_lr_ratio = 0.1;
  o.total_steps = 12;  // 10 steps of decay
  EXPECT_DOUBLE_EQ(learning_rate(o, 0), 1.0);
  EXPECT_DOUBLE_EQ(learning_rate(o, 2), 2.0);  // progress 0
  // progress 0.5: 0.5 * (1 + cos(pi/2)) = 0.5 -> 2 * (0.1 + 0.9 * 0.5)
  EXPECT_NEAR(learning_rate(o, 7), 2.0 * (0.1 + 0.9 * 0.5), 1e-12);
  EXPECT_NEAR(learning_rate(o, 12), 0.2, 1e-12);
  EXPECT_NEAR(learning_rate(o, 50), 0.2, 1e-12);  // stays at the floor
}

TEST(TrainerOptions, FromConfigMapsTheKeys) {
  config::Config c;
  auto& tc = c.trainer_common;
  tc.algorithm.adv_estimator = "rloo";
  tc.algorithm.drop_zero_variance_groups = true;
  tc.clip_ratio_low = 0.1;
  tc.clip_ratio_high = 0.3;
  tc.clip_ratio_c = 5;
  tc.kl_loss_type = "k3";
  tc.loss_agg_mode = "seq-mean-token-mean";
  tc.mini_batch_num = 2;
  tc.ppo_epochs = 3;
  tc.total_training_steps = 10;
  tc.optim.lr_warmup_steps = 1;
  tc.optim.lr_scheduler_type = "cosine";
  tc.optim.betas = {0.8, 0.95};
  tc.old_logprob_source = "rollout";
  tc.sequence_packing = "plain";
  c.lora.lora_rank = 4;
  c.async.off_policy_correction = "tis";
  c.async.importance_weight_cap = 3;
  c.rollout.temperature = 0.9;
  TrainerOptions o = TrainerOptions::from_config(c);
  EXPECT_EQ(o.temperature, 0.9);  // the trainer's logprobs are those of the sampled distribution
  EXPECT_EQ(o.advantage.estimator, AdvantageEstimator::kRloo);
  EXPECT_TRUE(o.advantage.drop_zero_variance_groups);
  EXPECT_EQ(o.loss.clip_low, 0.1);
  EXPECT_EQ(o.loss.clip_high, 0.3);
  EXPECT_EQ(o.loss.clip_c, 5);
  EXPECT_EQ(o.loss.kl_type, KlType::kLowVarKl);  // verl's k3 is low_var_kl
  EXPECT_EQ(o.aggregation, LossAggregation::kSeqMeanTokenMean);
  EXPECT_EQ(o.optim.total_steps, 60);  // 10 batches x 2 mini-batches x 3 epochs
  EXPECT_EQ(o.optim.warmup_steps, 6);
  EXPECT_TRUE(o.optim.cosine);
  EXPECT_EQ(o.optim.beta1, 0.8);
  EXPECT_FALSE(o.recompute_old_logprobs);
  EXPECT_EQ(o.packing, Packing::kPlain);
  EXPECT_EQ(o.lora.rank, 4);
  EXPECT_EQ(o.loss.correction, OffPolicyCorrection::kNone);  // only the async backbone corrects
  c.backbone = "async";
  o = TrainerOptions::from_config(c);
  EXPECT_EQ(o.loss.correction, OffPolicyCorrection::kTis);
  EXPECT_EQ(o.loss.is_cap, 3);
  c.rollout.temperature = 0;  // greedy train episodes: nothing sampled to match, the model's own
  EXPECT_EQ(TrainerOptions::from_config(c).temperature, 1.0);
}

// verl's switch: grpo without the std division is Dr.GRPO; the other estimators ignore it.
TEST(TrainerOptions, GrpoWithoutStdNormalisationIsDrGrpo) {
  config::Config c;
  c.trainer_common.algorithm.norm_adv_by_std_in_grpo = false;
  EXPECT_EQ(TrainerOptions::from_config(c).advantage.estimator, AdvantageEstimator::kDrGrpo);
  c.trainer_common.algorithm.adv_estimator = "rloo";
  EXPECT_EQ(TrainerOptions::from_config(c).advantage.estimator, AdvantageEstimator::kRloo);
  c.trainer_common.algorithm.adv_estimator = "grpo";
  c.trainer_common.algorithm.norm_adv_by_std_in_grpo = true;
  EXPECT_EQ(TrainerOptions::from_config(c).advantage.estimator, AdvantageEstimator::kGrpo);
  const auto loaded = config::parse_config(
      "ajet:\n  model: {path: /m}\n  trainer_common: {algorithm: {norm_adv_by_std_in_grpo: "
      "false}}\n",
      "u.yaml");
  EXPECT_TRUE(loaded.warnings.empty());  // an upstream key, read, not ignored
  EXPECT_EQ(TrainerOptions::from_config(loaded.config).advantage.estimator,
            AdvantageEstimator::kDrGrpo);
}

TEST(TrainerOptions, CosineNeedsTotalSteps) {
  config::Config c;
  c.trainer_common.optim.lr_scheduler_type = "cosine";
  try {
    TrainerOptions::from_config(c);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("total_training_steps"), std::string::npos) << e.what();
  }
}

TEST(TrainerOptions, NamesRoundTrip) {
  for (auto a : {LossAggregation::kTokenMean, LossAggregation::kSeqMeanTokenMean,
                 LossAggregation::kSeqMeanTokenSum, LossAggregation::kSeqMeanTokenSumNorm}) {
    EXPECT_EQ(aggregation_from_name(aggregation_name(a)), a);
  }
  for (auto k : {KlType::kK1, KlType::kAbs, KlType::kMse, KlType::kLowVarKl}) {
    EXPECT_EQ(kl_type_from_name(kl_type_name(k)), k);
  }
  for (auto c : {OffPolicyCorrection::kNone, OffPolicyCorrection::kTis,
                 OffPolicyCorrection::kDecoupledPpo}) {
    EXPECT_EQ(correction_from_name(correction_name(c)), c);
  }
  EXPECT_THROW(aggregation_from_name("mean"), Error);
  EXPECT_THROW(packing_from_name("dense"), Error);
}

}  // namespace
}  // namespace ajet::train_data
