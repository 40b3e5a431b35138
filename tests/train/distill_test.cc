// On-policy distillation in the trainer (train_data::DistillOptions; docs/training.md
// "Distillation"), checked by hand: advantage mode adds -coef * d(behaviour, teacher) to each
// token's advantage; loss mode's k1 term has the gradient of a policy gradient with advantage -1;
// the top-k forward KL's gradient equals that of the same sum formed on the dense model's logits;
// a sample without a teacher gets no distillation term.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "train/trainer.h"
#include "train_test_util.h"

namespace ajet::train {
namespace {

using testing::clone_model;
using testing::relative_difference;
using testing::step_gradients;
using testing::test_options;
using train_data::testing::random_batch;

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

// Teacher logprobs for every trained token: behaviour - 0.3 - 0.01 p (NaN elsewhere).
void add_teacher(train_data::Batch& batch) {
  for (auto& s : batch.samples) {
    s.teacher_logprobs.assign(s.size(), kNaN);
    for (size_t p = 0; p < s.size(); ++p) {
      if (s.loss_mask[p]) s.teacher_logprobs[p] = s.logprobs[p] - 0.3f - 0.01f * float(p);
    }
  }
}

TEST(Distill, AdvantageModeAddsMinusTheEstimateToEveryToken) {
  auto base = testing::random_model(testing::qwen2_config(), 8);
  train_data::Batch batch = random_batch(2, 3, 6, 5, 61, 21);
  add_teacher(batch);
  train_data::TrainerOptions o = test_options();
  o.distill.enabled = true;
  o.distill.kl_type = train_data::KlType::kK1;
  o.distill.coef = 1.0;
  o.distill.reward_weight = 0.0;  // the teacher alone
  Trainer trainer(clone_model(base), o);
  train_data::TrainMetrics m = trainer.train_step(batch);
  // Token-mean with episode weights: pg = sum_s sum_p (w_s / N) * -A, A = -(b - t) = 0.3 + 0.01 p
  // (the first forward's ratio is exactly 1).
  double n = 0, expected = 0, estimate = 0;
  for (const auto& s : batch.samples) n += double(s.trained_tokens());
  for (const auto& s : batch.samples) {
    for (size_t p = 0; p < s.size(); ++p) {
      if (!s.loss_mask[p]) continue;
      const double d = double(s.logprobs[p]) - double(s.teacher_logprobs[p]);
      expected += s.weight / n * d;
      estimate += d;
    }
  }
  EXPECT_NEAR(m.pg_loss, expected, 1e-5);
  EXPECT_EQ(m.distill_tokens, int64_t(n));
  EXPECT_NEAR(m.distill_estimate, estimate / n, 1e-5);
}

TEST(Distill, LossModeK1HasThePolicyGradientOfAdvantageMinusOne) {
  auto base = testing::random_model(testing::qwen2_config(), 8);
  train_data::Batch batch = random_batch(2, 3, 6, 5, 61, 22);
  add_teacher(batch);
  train_data::TrainerOptions o = test_options();
  o.distill.enabled = true;
  o.distill.as_loss = true;
  o.distill.kl_type = train_data::KlType::kK1;
  o.distill.reward_weight = 0.0;
  Trainer distilled(clone_model(base), o);
  train_data::TrainMetrics md;
  auto g1 = step_gradients(distilled, batch, &md);

  train_data::Batch minus_one = batch;
  for (auto& s : minus_one.samples) {
    s.teacher_logprobs.clear();
    s.advantages.assign(s.size(), -1.0f);
  }
  Trainer pg(clone_model(base), test_options());
  auto g2 = step_gradients(pg, minus_one);
  ASSERT_EQ(g1.size(), g2.size());
  double norm = 0;
  for (const auto& g : g2[0]) norm += g.norm().item<double>();
  EXPECT_GT(norm, 1e-3);
  EXPECT_LT(relative_difference(g1[0], g2[0]), 1e-5);
  EXPECT_GT(md.distill_tokens, 0);
  EXPECT_NE(md.distill_loss, 0.0);
}

TEST(Distill, ASampleWithoutATeacherHasNoDistillationTerm) {
  auto base = testing::random_model(testing::qwen2_config(), 8);
  train_data::Batch batch = random_batch(1, 2, 5, 4, 61, 23);
  add_teacher(batch);
  batch.samples[1].teacher_logprobs.clear();  // the teacher failed for it
  train_data::TrainerOptions o = test_options();
  o.distill.enabled = true;
  o.distill.as_loss = true;
  o.distill.reward_weight = 0.0;
  o.episode_weighting = false;
  o.aggregation = train_data::LossAggregation::kSeqMeanTokenSum;  // per-sample terms stay apart
  Trainer both(clone_model(base), o);
  auto g1 = step_gradients(both, batch);
  // The same with sample 1 present but inert: its terms have coefficient 1 / S and contribute 0.
  train_data::Batch only = batch;
  only.samples[1].teacher_logprobs.assign(only.samples[1].size(), kNaN);
  Trainer alone(clone_model(base), o);
  auto g2 = step_gradients(alone, only);
  EXPECT_LT(relative_difference(g1[0], g2[0]), 1e-6);
  double norm = 0;
  for (const auto& g : g1[0]) norm += g.norm().item<double>();
  EXPECT_GT(norm, 0);  // sample 0 still distils
}

TEST(Distill, TopKForwardKlGradientEqualsTheDenseComputation) {
  auto base = testing::random_model(testing::qwen2_config(), 8);
  train_data::Batch batch = random_batch(1, 1, 6, 5, 61, 24);
  train_data::TrainSample& s = batch.samples[0];
  const int k = 3;
  s.teacher_logprobs.assign(s.size(), kNaN);
  s.teacher_top_k = k;
  s.teacher_top_ids.assign(s.size() * k, -1);
  s.teacher_top_logprobs.assign(s.size() * k, -std::numeric_limits<float>::infinity());
  for (size_t p = 0; p < s.size(); ++p) {
    if (!s.loss_mask[p]) continue;
    s.teacher_logprobs[p] = -1.0f;
    for (int j = 0; j < k - (p % 2 ? 1 : 0); ++j) {  // odd positions: one alternative missing
      s.teacher_top_ids[p * k + j] = int32_t((p * 7 + j * 13) % 61);
      s.teacher_top_logprobs[p * k + j] = -0.5f - 0.4f * float(j);
    }
  }
  train_data::TrainerOptions o = test_options();
  o.distill.enabled = true;
  o.distill.as_loss = true;
  o.distill.topk_forward = true;
  o.distill.reward_weight = 0.0;
  Trainer trainer(clone_model(base), o);
  auto got = step_gradients(trainer, batch);

  // Dense: log_softmax of the full forward; row p - 1 predicts position p.
  model::Qwen2Model dense = clone_model(base);
  std::vector<int64_t> ids(s.token_ids.begin(), s.token_ids.end());
  const int64_t len = int64_t(ids.size());
  auto logits = dense->forward_logits(torch::tensor(ids).view({1, len}),
                                      torch::arange(len).view({1, len}))[0];
  auto logp = torch::log_softmax(logits, -1);
  const double n = double(s.trained_tokens());
  torch::Tensor loss = torch::zeros({});
  for (size_t p = 1; p < s.size(); ++p) {
    if (!s.loss_mask[p]) continue;
    for (int j = 0; j < k; ++j) {
      const int32_t id = s.teacher_top_ids[p * k + j];
      if (id < 0) continue;
      const double t = s.teacher_top_logprobs[p * k + j];
      loss = loss + std::exp(t) * (t - logp[int64_t(p) - 1][id]) / n;
    }
  }
  loss.backward();
  std::vector<torch::Tensor> want;
  auto named = dense->hf_named_parameters();
  for (const auto& [name, p] : trainer.trainable_parameters()) {
    for (const auto& [dense_name, q] : named) {
      if (dense_name == name) want.push_back(q.grad().defined() ? q.grad() : torch::zeros_like(q));
    }
  }
  ASSERT_EQ(want.size(), got[0].size());
  double norm = 0;
  for (const auto& g : want) norm += g.norm().item<double>();
  EXPECT_GT(norm, 1e-3);  // the comparison is not between two zeros
  EXPECT_LT(relative_difference(got[0], want), 1e-4);
}

}  // namespace
}  // namespace ajet::train
