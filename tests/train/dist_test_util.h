// What the data-parallel test and its worker process share: the batch, the trainer settings and the
// result file layout, so the two ranks (separate processes) and the one-rank reference in the test
// train on exactly the same inputs.
#pragma once

#include <torch/torch.h>

#include <string>
#include <vector>

#include "train/trainer.h"
#include "train_test_util.h"

namespace ajet::train::testing {

// Configurations the test runs: GRPO with token-mean, KL and entropy (groups split whole), and
// REINFORCE++ with seq-mean-token-mean (advantages over the whole batch, attached by split_batch).
inline const std::vector<std::string>& dist_configs() {
  static const std::vector<std::string> c = {"grpo", "reinforce_pp"};
  return c;
}

// 5 groups x 3 episodes, one or two turns each: the groups differ in size, so the split must
// balance.
inline train_data::Batch dist_batch(int64_t vocab) {
  return train_data::testing::random_batch(5, 3, 9, 7, vocab, 21);
}

inline train_data::TrainerOptions dist_options(const std::string& config) {
  train_data::TrainerOptions o = test_options();
  // AdamW's first step is lr * g / (|g| + eps): with the usual eps = 1e-8 it is lr * sign(g), which
  // turns the float summation noise of near-zero gradient entries into full-size differences. With
  // eps = 1 the step is smooth in g (about lr * g), so parameters compare as tightly as gradients.
  o.optim.lr = 0.1;
  o.optim.eps = 1.0;
  o.optim.weight_decay = 0;  // the step then measures the gradient alone
  o.loss.use_kl = true;
  o.loss.kl_coef = 0.1;
  o.loss.entropy_coef = 0.01;
  if (config == "reinforce_pp") {
    o.advantage.estimator = train_data::AdvantageEstimator::kReinforcePP;
    o.aggregation = train_data::LossAggregation::kSeqMeanTokenMean;
  } else {
    o.advantage.estimator = train_data::AdvantageEstimator::kGrpo;
    o.aggregation = train_data::LossAggregation::kTokenMean;
  }
  return o;
}

// A worker's result file (torch::save of a tensor list): the trainable parameters after the step,
// then their (all-reduced) gradients, then one double tensor {loss, kl, entropy, rank, world_size,
// tokens}.
struct DistResult {
  std::vector<torch::Tensor> params, grads;
  double loss = 0, kl = 0, entropy = 0;
  int rank = 0, world_size = 0;
  int64_t tokens = 0;  // sample tokens this rank trained on
};

inline void save_dist_result(const DistResult& r, const std::string& path) {
  std::vector<torch::Tensor> all = r.params;
  all.insert(all.end(), r.grads.begin(), r.grads.end());
  all.push_back(torch::tensor({r.loss, r.kl, r.entropy, static_cast<double>(r.rank),
                               static_cast<double>(r.world_size), static_cast<double>(r.tokens)},
                              torch::kDouble));
  torch::save(all, path);
}

inline DistResult load_dist_result(const std::string& path) {
  std::vector<torch::Tensor> all;
  torch::load(all, path);
  DistResult r;
  const size_t n = (all.size() - 1) / 2;
  r.params.assign(all.begin(), all.begin() + static_cast<std::ptrdiff_t>(n));
  r.grads.assign(all.begin() + static_cast<std::ptrdiff_t>(n), all.end() - 1);
  auto v = all.back();
  r.loss = v[0].item<double>();
  r.kl = v[1].item<double>();
  r.entropy = v[2].item<double>();
  r.rank = static_cast<int>(v[3].item<double>());
  r.world_size = static_cast<int>(v[4].item<double>());
  r.tokens = static_cast<int64_t>(v[5].item<double>());
  return r;
}

// One train_step of `trainer` on `batch`; the gradients are the ones the hook saw (after the
// all-reduce).
inline DistResult train_once(Trainer& trainer, const train_data::Batch& batch) {
  DistResult r;
  train_data::TrainMetrics m;
  auto grads = step_gradients(trainer, batch, &m);
  if (grads.size() != 1)
    throw std::runtime_error("expected one optimizer step, got " + std::to_string(grads.size()));
  r.grads = grads[0];
  for (auto& [name, p] : trainer.trainable_parameters()) r.params.push_back(p.detach().clone());
  r.loss = m.loss;
  r.kl = m.kl;
  r.entropy = m.entropy;
  r.tokens = m.tokens;
  return r;
}

}  // namespace ajet::train::testing
