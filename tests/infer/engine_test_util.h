// Shared helpers for the engine tests: a tiny random Qwen2 model, manual stepping, and the no-cache
// reference (model->forward_logits over the whole sequence).
#pragma once

#include <torch/torch.h>

#include <future>
#include <vector>

#include "infer/engine.h"
#include "model/qwen2.h"

namespace ajet::infer::testing {

// hidden 64, 2 layers, 4 query heads on 2 kv heads (D 16), vocab 300, 256 positions. A larger init
// std than HF's 0.02 gives peaked distributions, so greedy choices are not near-ties.
inline model::Qwen2Model tiny_model(uint64_t seed = 1, bool tied = false) {
  hf::ModelConfig c;
  c.model_type = "qwen2";
  c.vocab_size = 300;
  c.hidden_size = 64;
  c.intermediate_size = 128;
  c.num_hidden_layers = 2;
  c.num_attention_heads = 4;
  c.num_key_value_heads = 2;
  c.head_dim = 16;
  c.max_position_embeddings = 256;
  c.tie_word_embeddings = tied;
  c.attention_bias = true;
  model::Qwen2Model m(c);
  model::init_weights(m, seed, 0.2);
  m->eval();
  return m;
}

inline InferenceEngineOptions manual_config(int64_t cache_bytes = 8 << 20) {
  InferenceEngineOptions c;
  c.start_thread = false;
  c.cache_bytes = cache_bytes;
  c.block_size = 4;
  c.max_batch_tokens = 64;
  c.max_running = 16;
  return c;
}

// Steps a manual engine until it has nothing left to do.
inline void drain(InferenceEngine& engine) {
  while (engine.step()) {
  }
}

// log_softmax of the no-cache forward over `tokens`: (T, V), row t predicts token t + 1.
inline torch::Tensor reference_logprobs(model::Qwen2Model& m, const std::vector<int32_t>& tokens) {
  torch::NoGradGuard no_grad;
  std::vector<int64_t> ids(tokens.begin(), tokens.end());
  const int64_t t = static_cast<int64_t>(ids.size());
  torch::Tensor x = torch::tensor(ids, torch::kLong).view({1, t});
  torch::Tensor pos = torch::arange(t, torch::kLong).view({1, t});
  return torch::log_softmax(m->forward_logits(x, pos)[0].to(torch::kDouble), -1);  // (T, V)
}

inline batching::GenerateRequest request(std::string id, std::vector<int32_t> prompt,
                                         int64_t max_tokens, double temperature = 0.0) {
  batching::GenerateRequest r;
  r.id = std::move(id);
  r.prompt = std::move(prompt);
  r.max_tokens = max_tokens;
  r.temperature = temperature;
  return r;
}

inline std::vector<int32_t> prompt_of(int64_t length, int32_t salt) {
  std::vector<int32_t> p;
  for (int64_t i = 0; i < length; ++i)
    p.push_back(static_cast<int32_t>((i * 37 + salt * 101 + 5) % 300));
  return p;
}

inline std::vector<int32_t> ids_of(const SampleOutput& s) {
  std::vector<int32_t> ids;
  for (const batching::GeneratedToken& t : s.tokens) ids.push_back(t.id);
  return ids;
}

}  // namespace ajet::infer::testing
