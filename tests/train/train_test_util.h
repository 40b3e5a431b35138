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

namespace ajet::train::testing {

using model::testing::qwen2_config;
using model::testing::qwen3_config;
using model::testing::random_model;
using model::testing::ScratchDir;

// `groups` tasks x `per_group` episodes: every episode of a task shares a prompt of `prompt` tokens,
// then a completion of 1..`completion` tokens (mask 1), sometimes followed by environment tokens
// and a second completion. Rewards in {0, 0.5, 1}; behaviour logprobs in (-3, -0.05).
inline Batch random_batch(int groups, int per_group, int prompt, int completion, int64_t vocab, uint64_t seed) {
  std::mt19937_64 rng(seed);
  auto token = [&] { return static_cast<int32_t>(rng() % static_cast<uint64_t>(vocab)); };
  auto uniform = [&](double lo, double hi) { return lo + (hi - lo) * static_cast<double>(rng() % 1000003) / 1000003.0; };
  Batch b;
  for (int g = 0; g < groups; ++g) {
    std::vector<int32_t> shared(static_cast<size_t>(prompt));
    for (auto& t : shared) t = token();
    for (int e = 0; e < per_group; ++e) {
      TrainSample s;
      s.episode_uuid = "ep-" + std::to_string(g) + "-" + std::to_string(e);
      s.task_id = "task-" + std::to_string(g);
      s.reward = static_cast<double>(rng() % 3) * 0.5;
      s.token_ids = shared;
      s.loss_mask.assign(shared.size(), 0);
      const int turns = 1 + static_cast<int>(rng() % 2);
      for (int turn = 0; turn < turns; ++turn) {
        if (turn > 0) {
          for (int k = 0; k < 2; ++k) {  // an observation
            s.token_ids.push_back(token());
            s.loss_mask.push_back(0);
          }
        }
        const int len = 1 + static_cast<int>(rng() % static_cast<uint64_t>(completion));
        for (int k = 0; k < len; ++k) {
          s.token_ids.push_back(token());
          s.loss_mask.push_back(1);
        }
      }
      for (uint8_t m : s.loss_mask) s.logprobs.push_back(m ? static_cast<float>(-uniform(0.05, 3.0)) : 0.0f);
      b.samples.push_back(std::move(s));
    }
  }
  return b;
}

// Options for fast, exact comparisons: plain SGD-like settings are not needed; AdamW with a small lr.
inline TrainerOptions test_options() {
  TrainerOptions o;
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
inline double relative_difference(const std::vector<torch::Tensor>& a, const std::vector<torch::Tensor>& b,
                                  double floor = 1e-6) {
  double diff = 0, scale = floor;
  for (size_t i = 0; i < a.size(); ++i) {
    diff = std::max(diff, (a[i].to(torch::kDouble) - b[i].to(torch::kDouble)).abs().max().item<double>());
    scale = std::max(scale, b[i].to(torch::kDouble).abs().max().item<double>());
  }
  return diff / scale;
}

// Runs one train_step and returns the gradients the hook saw (one list per optimizer step).
inline std::vector<std::vector<torch::Tensor>> step_gradients(Trainer& trainer, const Batch& batch, TrainMetrics* metrics = nullptr) {
  std::vector<std::vector<torch::Tensor>> seen;
  trainer.set_gradient_hook([&](std::vector<torch::Tensor>& grads) {
    std::vector<torch::Tensor> copy;
    for (auto& g : grads) copy.push_back(g.detach().clone());
    seen.push_back(std::move(copy));
  });
  TrainMetrics m = trainer.train_step(batch);
  if (metrics) *metrics = m;
  trainer.set_gradient_hook(nullptr);
  return seen;
}

}  // namespace ajet::train::testing
