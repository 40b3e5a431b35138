// Helpers for the libtorch model tests: small configs of each flavour and randomly filled models
// whose activations are O(1), so that any wrong term in the maths moves the logits well past
// tolerance.
#pragma once

#include <torch/torch.h>

#include <string>

#include "hf/hf_config.h"
#include "model/qwen2.h"

namespace ajet::model::testing {

// qwen2: q/k/v bias, untied lm_head, GQA 4 query heads on 2 kv heads.
inline hf::ModelConfig qwen2_config() {
  hf::ModelConfig c;
  c.model_type = "qwen2";
  c.vocab_size = 61;
  c.hidden_size = 32;
  c.intermediate_size = 72;
  c.num_hidden_layers = 2;
  c.num_attention_heads = 4;
  c.num_key_value_heads = 2;
  c.head_dim = 8;
  c.max_position_embeddings = 64;
  c.rope_theta = 1e6;
  c.rms_norm_eps = 1e-6;
  c.tie_word_embeddings = false;
  c.attention_bias = true;
  c.qk_norm = false;
  c.bos_token_id = 1;
  c.eos_token_id = 2;
  c.eos_token_ids = {2};
  return c;
}

// qwen3: per-head qk-norm, no bias, tied embeddings, GQA 4 on 1, head_dim (16) != hidden / heads.
inline hf::ModelConfig qwen3_config() {
  hf::ModelConfig c = qwen2_config();
  c.model_type = "qwen3";
  c.vocab_size = 53;
  c.hidden_size = 48;
  c.num_attention_heads = 4;
  c.num_key_value_heads = 1;
  c.head_dim = 16;
  c.num_hidden_layers = 3;
  c.rope_theta = 10000.0;
  c.rms_norm_eps = 1e-5;
  c.tie_word_embeddings = true;
  c.attention_bias = false;
  c.qk_norm = true;
  return c;
}

// Every weight ~ normal(0, 1/sqrt(fan_in)), biases ~ normal(0, 0.1), norm weights ~ 1 + normal(0,
// 0.1): unlike HF's 0.02 init this makes every component visible in the logits.
inline Qwen2Model random_model(const hf::ModelConfig& config, uint64_t seed) {
  Qwen2Model model(config);
  torch::NoGradGuard no_grad;
  auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  for (auto& [name, p] : model->hf_named_parameters()) {
    auto values = torch::empty(p.sizes(), torch::kFloat);
    values.normal_(0.0, 1.0, gen);
    const bool is_norm =
        name.size() >= 11 && name.compare(name.size() - 11, 11, "norm.weight") == 0;
    const bool is_bias = name.size() >= 5 && name.compare(name.size() - 5, 5, ".bias") == 0;
    if (is_norm) {
      values = 1.0 + 0.1 * values;
    } else if (is_bias) {
      values = 0.1 * values;
    } else {
      values = values / std::sqrt(static_cast<double>(p.size(p.dim() - 1)));
    }
    p.copy_(values);
  }
  return model;
}

// (1, T) int64 positions 0..T-1 (+ offset).
inline torch::Tensor arange_positions(int64_t t, int64_t offset = 0) {
  return torch::arange(offset, offset + t, torch::kLong).unsqueeze(0);
}

inline double max_abs_diff(const torch::Tensor& a, const torch::Tensor& b) {
  return (a.to(torch::kDouble) - b.to(torch::kDouble)).abs().max().item<double>();
}

}  // namespace ajet::model::testing
