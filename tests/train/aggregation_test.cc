// The trainer's loss normalisation by hand (trainer.h, "Loss normalisation") for each
// loss_agg_mode, with and without per-episode weights: on the first step with recomputed old
// logprobs every ratio is 1, so the PPO-clip term of a token is exactly -A and the loss is -scale *
// sum_s c_s n_s A_s.
#include <gtest/gtest.h>

#include <cmath>

#include "train_test_util.h"

namespace ajet::train {
namespace {

// One GRPO group of three episodes (rewards 1, 0, 0) with 3, 1 and 2 trained tokens after a prompt.
train_data::Batch hand_batch() {
  train_data::Batch b;
  const std::vector<int> trained = {3, 1, 2};
  const std::vector<double> reward = {1, 0, 0}, weight = {1, 0.5, 0.5};
  for (size_t i = 0; i < 3; ++i) {
    train_data::TrainSample s;
    s.episode_uuid = "ep-" + std::to_string(i);
    s.task_id = "g";
    s.reward = reward[i];
    s.weight = weight[i];
    s.token_ids = {1, 2, 3, 4};
    s.loss_mask = {0, 0, 0, 0};
    for (int k = 0; k < trained[i]; ++k) {
      s.token_ids.push_back(10 + static_cast<int32_t>(i) + k);
      s.loss_mask.push_back(1);
    }
    s.logprobs.assign(s.token_ids.size(), 0.0f);
    for (size_t p = 0; p < s.size(); ++p) s.logprobs[p] = s.loss_mask[p] ? -1.0f : 0.0f;
    b.samples.push_back(std::move(s));
  }
  return b;
}

TEST(LossAggregation, EachModeByHand) {
  // GRPO: mean 1/3, unbiased std sqrt(((2/3)^2 + 2 (1/3)^2) / 2) = sqrt(1/3).
  const double sd = std::sqrt(1.0 / 3.0) + 1e-6;
  const double a[3] = {(2.0 / 3.0) / sd, -(1.0 / 3.0) / sd, -(1.0 / 3.0) / sd};
  const double n[3] = {3, 1, 2};
  const double w[3] = {1, 0.5, 0.5};
  const double total_terms = 6, seqs = 3, norm = 4, scale = 1.5;
  auto base = testing::random_model(testing::qwen2_config(), 61);
  for (bool weighting : {false, true}) {
    for (auto agg :
         {train_data::LossAggregation::kTokenMean, train_data::LossAggregation::kSeqMeanTokenMean,
          train_data::LossAggregation::kSeqMeanTokenSum,
          train_data::LossAggregation::kSeqMeanTokenSumNorm}) {
      double expected = 0;
      for (int s = 0; s < 3; ++s) {
        const double ws = weighting ? w[s] : 1.0;
        double c = 0;
        switch (agg) {
          case train_data::LossAggregation::kTokenMean: c = ws / total_terms; break;
          case train_data::LossAggregation::kSeqMeanTokenMean: c = ws / (seqs * n[s]); break;
          case train_data::LossAggregation::kSeqMeanTokenSum: c = ws / seqs; break;
          case train_data::LossAggregation::kSeqMeanTokenSumNorm: c = ws / norm; break;
        }
        expected += -scale * c * n[s] * a[s];
      }
      train_data::TrainerOptions o = testing::test_options();
      o.aggregation = agg;
      o.episode_weighting = weighting;
      o.norm_constant = norm;
      o.loss_scale = scale;
      o.micro_batch_tokens = 9;  // several micro-batches: the normalisers are over the mini-batch
      o.budget_beyond_shared_prefix =
          false;  // (the samples share a prompt, which would be one tree)
      Trainer t(testing::clone_model(base), o);
      const train_data::TrainMetrics m = t.train_step(hand_batch());
      const std::string what =
          std::string(train_data::aggregation_name(agg)) + (weighting ? " weighted" : "");
      EXPECT_NEAR(m.loss, expected, 1e-6) << what;
      EXPECT_GT(m.micro_batches, 1) << what;
      EXPECT_EQ(m.clip_fraction, 0.0) << what;
    }
  }
}

}  // namespace
}  // namespace ajet::train
