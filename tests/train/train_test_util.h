// Helpers for the trainer tests: a tiny random model (the model tests' qwen2 / qwen3 configs with
// O(1) activations) and random GRPO-shaped batches. Deterministic for a given seed.
#pragma once

#include <torch/torch.h>

#include <random>
#include <string>
#include <vector>

#include "model/test_util.h"
#include "model/torch_util.h"
#include "train/trainer.h"
#include "train_data/batch.h"
#include "train_data/test_util.h"

namespace ajet::train::testing {

using model::testing::qwen2_config;
using model::testing::qwen3_config;
using model::testing::random_model;
using model::testing::ScratchDir;

// Options for fast, exact comparisons: plain SGD-like settings are not needed; AdamW with a small
// lr.
inline train_data::TrainerOptions test_options() {
  train_data::TrainerOptions o;
  o.optim.lr = 1e-3;
  o.optim.weight_decay = 0.01;
  o.optim.grad_clip = 0;  // comparisons look at raw gradients
  o.loss.use_kl = false;
  o.micro_batch_tokens = 4096;
  o.seed = 7;
  return o;
}

// A copy of the model with the same weights (a second module, not a shared holder).
inline model::Qwen2Model clone_model(model::Qwen2Model& m) {
  model::Qwen2Model c(m->config());
  torch::NoGradGuard no_grad;
  auto src = m->hf_named_parameters();
  auto dst = c->hf_named_parameters();
  for (size_t i = 0; i < src.size(); ++i) dst[i].second.copy_(src[i].second);
  return c;
}

// max |a - b| / max(max |b|, floor) over the tensors.
inline double relative_difference(const std::vector<torch::Tensor>& a,
                                  const std::vector<torch::Tensor>& b, double floor = 1e-6) {
  double diff = 0, scale = floor;
  for (size_t i = 0; i < a.size(); ++i) {
    diff = std::max(diff,
                    (a[i].to(torch::kDouble) - b[i].to(torch::kDouble)).abs().max().item<double>());
    scale = std::max(scale, b[i].to(torch::kDouble).abs().max().item<double>());
  }
  return diff / scale;
}

// Runs one train_step and returns the gradients the hook saw (one list per optimizer step).
inline std::vector<std::vector<torch::Tensor>> step_gradients(
    Trainer& trainer, const train_data::Batch& batch, train_data::TrainMetrics* metrics = nullptr) {
  std::vector<std::vector<torch::Tensor>> seen;
  trainer.set_gradient_hook([&](std::vector<torch::Tensor>& grads) {
    std::vector<torch::Tensor> copy;
    for (auto& g : grads) copy.push_back(g.detach().clone());
    seen.push_back(std::move(copy));
  });
  train_data::TrainMetrics m = trainer.train_step(batch);
  if (metrics) *metrics = m;
  trainer.set_gradient_hook(nullptr);
  return seen;
}

// The model's logits on one fixed 7-token sequence (comparing two models' weights by behaviour).
inline torch::Tensor probe_logits(model::Qwen2Model& m) {
  torch::NoGradGuard no_grad;
  auto ids = torch::tensor(std::vector<int64_t>{3, 14, 15, 9, 26, 5, 35}).view({1, 7});
  return m->forward_logits(ids, torch::arange(7).view({1, 7}));
}

}  // namespace ajet::train::testing
