// The Qwen2-architecture decoder (also Qwen3 with qk-norm, and Llama) in the libtorch C++ frontend.
// It owns parameters and the per-layer maths; it never owns a KV cache or a scheduler (src/infer does)
// and never sees text (src/text does). Shapes: N = flattened tokens, B = batch, T = time, C = hidden,
// H = query heads, Hkv = key/value heads, D = head dim, V = vocab.
#pragma once

#include <torch/torch.h>

#include <optional>
#include <string>
#include <vector>

#include "hf/hf_config.h"

namespace ajet::model {

// q, k, v of one layer for a set of tokens, rotary embedding (and Qwen3 qk-norm) already applied.
struct QKV {
  torch::Tensor q;  // (..., H, D)
  torch::Tensor k;  // (..., Hkv, D)
  torch::Tensor v;  // (..., Hkv, D)
};

class DecoderLayerImpl : public torch::nn::Module {
 public:
  DecoderLayerImpl(const hf::ModelConfig& config, int64_t layer_index);

  // x: (..., C) residual stream; positions: (...) int64 absolute positions of those tokens.
  // Applies input RMSNorm, q/k/v projections (+bias), qk-norm (Qwen3), rotary embeddings.
  QKV attention_inputs(const torch::Tensor& x, const torch::Tensor& positions);
  // x: (..., C) the same residual stream; attn: (..., H*D) attention output (heads concatenated).
  // Returns the layer output: x + o_proj(attn), then + mlp(post_attention_norm(.)).
  torch::Tensor attention_outputs(const torch::Tensor& x, const torch::Tensor& attn);

  // Named submodules use HF names so state_dict keys map 1:1 onto HF tensor names.
};
TORCH_MODULE(DecoderLayer);

class Qwen2ModelImpl : public torch::nn::Module {
 public:
  explicit Qwen2ModelImpl(const hf::ModelConfig& config);

  const hf::ModelConfig& config() const;
  int64_t num_layers() const;
  DecoderLayer& layer(int64_t i);

  torch::Tensor embed(const torch::Tensor& ids);       // (...) int64 → (..., C)
  torch::Tensor final_norm(const torch::Tensor& x);    // (..., C) → (..., C)
  torch::Tensor lm_head(const torch::Tensor& hidden);  // (..., C) → (..., V); tied or separate weight

  // Full forward without a cache, for training and reference checks.
  // ids, positions: (B, T) int64. mask: (B, T, T) bool, true where query t may attend key s; when empty
  // the mask is causal. Returns final-normed hidden states (B, T, C); call lm_head on what you need.
  torch::Tensor forward_hidden(const torch::Tensor& ids, const torch::Tensor& positions,
                               const std::optional<torch::Tensor>& mask = std::nullopt);
  torch::Tensor forward_logits(const torch::Tensor& ids, const torch::Tensor& positions,
                               const std::optional<torch::Tensor>& mask = std::nullopt);  // (B, T, V)

  // Parameters under their HF names ("model.layers.0.self_attn.q_proj.weight", "lm_head.weight" only when
  // not tied), in a stable order. Tensors share storage with the module.
  std::vector<std::pair<std::string, torch::Tensor>> hf_named_parameters();
};
TORCH_MODULE(Qwen2Model);

}  // namespace ajet::model
