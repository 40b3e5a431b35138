// The Qwen2-architecture decoder (also Qwen3 with qk-norm, and Llama) in the libtorch C++ frontend.
// It owns parameters and the per-layer maths; it never owns a KV cache or a scheduler (src/infer
// does) and never sees text (src/text does). Shapes: N = flattened tokens, B = batch, T = time, C =
// hidden, H = query heads, Hkv = key/value heads, D = head dim, V = vocab.
//
// Dtype and device are whatever the parameters hold: build the module (float32, CPU), then
// `model->to(device, dtype)`; every tensor made inside takes its options from the parameters.
//
// LoRA (`ajet.lora.*` in docs/config.md; checkpoints in docs/training.md) attaches per projection:
// each of q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj is a plain
// torch::nn::Linear registered under its HF name, and every call goes through
// DecoderLayerImpl::project(), which adds `adapter->delta(x)` when an adapter was attached with
// attach_adapter(). The adapter is registered as submodule "adapter" of that Linear, so its
// parameters appear as "...self_attn.q_proj.adapter.<name>" in named_parameters() but never in
// hf_named_parameters() (the base checkpoint stays exactly the HF layout).
#pragma once

#include <torch/torch.h>

#include <array>
#include <cstdint>
#include <initializer_list>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "hf/hf_config.h"

namespace ajet::model {

// q, k, v of one layer for a set of tokens, rotary embedding (and Qwen3 qk-norm) already applied.
struct QKV {
  torch::Tensor q;  // (..., H, D)
  torch::Tensor k;  // (..., Hkv, D)
  torch::Tensor v;  // (..., Hkv, D)
};

// RMSNorm with HF semantics: normalise in float32, cast back to the input dtype, then * weight.
class RMSNormImpl : public torch::nn::Module {
 public:
  RMSNormImpl(int64_t dim, double eps);
  torch::Tensor forward(const torch::Tensor& x);  // (..., dim) → (..., dim)
  torch::Tensor weight;                           // (dim,)

 private:
  double eps_;
};
TORCH_MODULE(RMSNorm);

// Rotary position embedding, HF non-interleaved ("rotate_half") layout. cos/sin tables are computed
// exactly as HF does (float32 inv_freq, float32 position * inv_freq) and cached per device and
// dtype; they grow on demand when a position beyond the table is asked for. Thread-safe.
class Rotary {
 public:
  Rotary(int64_t head_dim, double theta, int64_t initial_positions);
  // x: (..., heads, D); positions: (...) int64. Returns x rotated, same shape and dtype.
  torch::Tensor apply(const torch::Tensor& x, const torch::Tensor& positions);
  // cos, sin for positions: each (..., D) in `dtype` on positions' device.
  std::pair<torch::Tensor, torch::Tensor> cos_sin(const torch::Tensor& positions,
                                                  torch::ScalarType dtype);

 private:
  // Table rows the positions need (their maximum + 1), remembered for the same tensor.
  int64_t rows_needed(const torch::Tensor& positions);
  // The (P, D) cos and sin tables for device and dtype, made or grown to at least `needed` rows.
  std::pair<torch::Tensor, torch::Tensor> tables(torch::Device device, torch::ScalarType dtype,
                                                 int64_t needed);

  struct Table {
    torch::Device device = torch::kCPU;
    torch::ScalarType dtype = torch::kFloat;
    torch::Tensor cos;  // (P, D)
    torch::Tensor sin;  // (P, D)
  };
  int64_t head_dim_;
  double theta_;
  int64_t initial_positions_;
  std::mutex mu_;
  std::vector<Table> tables_;
  // The positions of the last call and the rows they need: every layer of a step passes the same
  // tensor, and reading its maximum from a GPU is a device sync, once per step instead of per
  // layer.
  torch::Tensor last_positions_;
  uint32_t last_version_ = 0;  // its version counter then (an in-place write changes it)
  int64_t last_needed_ = 0;
};

// A low-rank (or any) additive adapter on one linear projection: output = base(x) + delta(x).
class LinearAdapter : public torch::nn::Module {
 public:
  virtual torch::Tensor delta(const torch::Tensor& x) = 0;  // (..., in) → (..., out)
};

// The seven projections LoRA can target, by PEFT / HF name.
enum class Proj { kQ, kK, kV, kO, kGate, kUp, kDown };
inline constexpr std::array<std::string_view, 7> kProjNames = {
    "q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"};
std::optional<Proj> proj_from_name(std::string_view name);

// Attention over an explicit boolean mask, GQA by grouping query heads onto their kv head (the same
// maths as HF's repeat_kv, without copying k and v). Scores and softmax in float32; a query row
// with no allowed key gives zeros, not NaN. Tq may differ from Tk (a chunk of queries over cached
// keys). q: (B, Tq, H, D); k, v: (B, Tk, Hkv, D); mask: (B, Tq, Tk) or (1, Tq, Tk) bool, true = may
// attend. Returns (B, Tq, H*D) in q's dtype.
torch::Tensor masked_attention(const torch::Tensor& q, const torch::Tensor& k,
                               const torch::Tensor& v, const torch::Tensor& mask);

// x (..., K) · w (N, K)^T + bias (N), what every projection of the model runs. With grad off,
// float32 on the CPU: given `packed` (the weight's packed copy, PackedWeight below), 2..512 rows
// run the packed kernel (linear_kernel.h); without it, 2..48 rows run the small-row kernel; either
// split by columns over the intra-op threads. Otherwise torch's linear. Same maths; float32 sums in
// another order.
class PackedWeight;
class LoraRouting;  // model/multi_lora.h
torch::Tensor linear_forward(const torch::Tensor& x, const torch::Tensor& w,
                             const torch::Tensor& bias, PackedWeight* packed = nullptr);

// Whether a layer runs the projections that read one input in one parallel region when all of them
// go through the packed kernel (no adapter, grad off, float32 on the CPU, 2..512 rows): q, k and v
// together; gate and up together with silu(gate) * up computed on each thread's columns; o and down
// with the residual added there. Fewer thread hand-offs and torch ops per layer, and bit for bit
// the one-by-one path (which, with grad off in float32 on the CPU, computes the SiLU product with
// the same row kernel; torch's silu, used with grad on, differs from it by ~1e-7 relative). On by
// default; engine_bench turns it off to measure it.
void set_fused_projections_enabled(bool on);
bool fused_projections_enabled();

// Batch-invariant inference (deterministic mode, docs/determinism.md): with grad off in float32 on
// the CPU, every linear of every row count (1 row, a decode batch, a long prefill chunk) runs the
// hand-written kernels, whose sum for one row is the same sequence of operations whatever the other
// rows are; so a sequence's logits do not depend on what else shares its engine step (OpenBLAS's
// GEMV and GEMM round differently). A model without packed copies (set_weight_packing) runs the
// small-row kernel, also invariant. Off by default; engine::apply_determinism turns it on under
// ajet.deterministic.
void set_batch_invariant(bool on);
bool batch_invariant();
// Fused regions run so far by every layer of every model (tests check that the fused path ran).
uint64_t fused_projection_runs();

// A float32 CPU weight's copy in linear_kernel.h's packed layout, made on first use and made again
// whenever the weight has changed since: an in-place update (optimizer step, weight sync, copy_)
// bumps the tensor's version; a new tensor has another storage (the copy holds its source's
// storage, so no later tensor can reuse that address unnoticed). Safe to call from several threads.
class PackedWeight {
 public:
  // The packed copy of w (N, K), current for w as it is now.
  torch::Tensor of(const torch::Tensor& w);
  // Drops the copy (it is made again on next use).
  void clear();

 private:
  std::mutex mu_;
  torch::Tensor packed_;
  c10::Storage storage_;  // the source's, kept alive while the copy is
  const void* source_ = nullptr;
  int64_t n_ = 0, k_ = 0;
  int64_t version_ = 0;
};

// (T, T) bool lower-triangular mask on `device`.
torch::Tensor causal_mask(int64_t t, torch::Device device);

class DecoderLayerImpl : public torch::nn::Module {
 public:
  DecoderLayerImpl(const hf::ModelConfig& config, int64_t layer_index);

  // x: (..., C) residual stream; positions: (...) int64 absolute positions of those tokens.
  // Applies input RMSNorm, q/k/v projections (+bias), qk-norm (Qwen3), rotary embeddings.
  QKV attention_inputs(const torch::Tensor& x, const torch::Tensor& positions);
  // x: (..., C) the same residual stream; attn: (..., H*D) attention output (heads concatenated).
  // Returns the layer output: x + o_proj(attn), then + mlp(post_attention_norm(.)).
  torch::Tensor attention_outputs(const torch::Tensor& x, const torch::Tensor& attn);

  // Named submodules use HF names so state_dict keys map 1:1 onto HF tensor names:
  // input_layernorm, self_attn.{q,k,v,o}_proj, self_attn.{q,k}_norm (Qwen3),
  // post_attention_layernorm, mlp.{gate,up,down}_proj.
  torch::nn::Linear& linear(Proj p);
  // Applies projection p to x: base Linear plus the attached adapter's delta, if any.
  torch::Tensor project(Proj p, const torch::Tensor& x);
  // silu(gate(x)) * up(x), the MLP's activation.
  torch::Tensor gated_activation(const torch::Tensor& x);
  // residual + project(p, x).
  torch::Tensor project_add(Proj p, const torch::Tensor& x, const torch::Tensor& residual);
  // Attaches (or with nullptr detaches) an adapter on projection p.
  void attach_adapter(Proj p, std::shared_ptr<LinearAdapter> adapter);
  const std::shared_ptr<LinearAdapter>& adapter(Proj p) const;

  // Used by Qwen2ModelImpl to share one rotary table across layers.
  void set_rotary(std::shared_ptr<Rotary> rotary);
  // Whether no-grad float32 projections may keep packed copies of their weights (PackedWeight): on
  // by default; Qwen2ModelImpl turns it off for models too big to hold their weights twice.
  void set_weight_packing(bool on);

 private:
  // Whether projections ps of x can run fused (set_fused_projections_enabled above).
  bool fusable(std::initializer_list<Proj> ps, const torch::Tensor& x);
  // ps of x in one parallel region, each output (..., N_p) contiguous; only when fusable.
  std::vector<torch::Tensor> project_fused(std::initializer_list<Proj> ps, const torch::Tensor& x);
  // Projection p's packed weight (kept alive here), its bias or null, and its outputs N.
  struct PackedOperand {
    torch::Tensor packed;
    const float* bias;
    int64_t n;
  };
  PackedOperand packed_operand(Proj p);

  int64_t num_heads_, num_kv_heads_, head_dim_;
  std::shared_ptr<torch::nn::Module> self_attn_, mlp_;
  RMSNorm input_layernorm_{nullptr}, post_attention_layernorm_{nullptr};
  RMSNorm q_norm_{nullptr}, k_norm_{nullptr};  // Qwen3 only
  std::array<torch::nn::Linear, 7> linears_{
      {nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr}};
  std::array<std::shared_ptr<LinearAdapter>, 7> adapters_;
  std::array<PackedWeight, 7> packed_;
  bool pack_weights_ = true;
  std::shared_ptr<Rotary> rotary_;
};
TORCH_MODULE(DecoderLayer);

class Qwen2ModelImpl : public torch::nn::Module {
 public:
  explicit Qwen2ModelImpl(const hf::ModelConfig& config);

  const hf::ModelConfig& config() const;
  int64_t num_layers() const;
  DecoderLayer& layer(int64_t i);

  torch::Tensor embed(const torch::Tensor& ids);     // (...) int64 → (..., C)
  torch::Tensor final_norm(const torch::Tensor& x);  // (..., C) → (..., C)
  torch::Tensor lm_head(
      const torch::Tensor& hidden);  // (..., C) → (..., V); tied or separate weight

  // Full forward without a cache, for training and reference checks.
  // ids, positions: (B, T) int64. mask: (B, T, T) bool, true where query t may attend key s; when
  // empty the mask is causal. Returns final-normed hidden states (B, T, C); call lm_head on what
  // you need.
  torch::Tensor forward_hidden(const torch::Tensor& ids, const torch::Tensor& positions,
                               const std::optional<torch::Tensor>& mask = std::nullopt);
  torch::Tensor forward_logits(
      const torch::Tensor& ids, const torch::Tensor& positions,
      const std::optional<torch::Tensor>& mask = std::nullopt);  // (B, T, V)

  // Parameters under their HF names ("model.layers.0.self_attn.q_proj.weight", "lm_head.weight"
  // only when not tied), in a stable order. Tensors share storage with the module.
  std::vector<std::pair<std::string, torch::Tensor>> hf_named_parameters();

  // Options (dtype, device) of the parameters.
  torch::TensorOptions options() const;
  // Total number of elements over hf_named_parameters() (tied embeddings counted once).
  int64_t parameter_count();

  // Whether no-grad float32 projections keep packed copies of their weights (on by default for
  // models small enough to hold them twice).
  void set_weight_packing(bool on);
  bool weight_packing() const { return pack_weights_; }
  // The routing of the model's multi-adapter projections (model/multi_lora.h); null without them.
  // The inference engine sets it before every forward from its sequences' adapters.
  const std::shared_ptr<LoraRouting>& lora_routing() const { return lora_routing_; }
  void set_lora_routing(std::shared_ptr<LoraRouting> routing) {
    lora_routing_ = std::move(routing);
  }

 private:
  hf::ModelConfig config_;
  std::shared_ptr<torch::nn::Module> body_;  // "model": embed_tokens, layers, norm
  torch::nn::Embedding embed_tokens_{nullptr};
  torch::nn::ModuleList layers_{nullptr};
  std::vector<DecoderLayer> layer_list_;
  RMSNorm norm_{nullptr};
  torch::nn::Linear lm_head_{nullptr};  // absent when tie_word_embeddings
  PackedWeight packed_head_;
  bool pack_weights_ = true;
  std::shared_ptr<Rotary> rotary_;
  std::shared_ptr<LoraRouting> lora_routing_;
};
TORCH_MODULE(Qwen2Model);

// HF-style random initialisation, reproducible from `seed` and independent of device and dtype:
// Linear and embedding weights ~ normal(0, std), biases 0, norm weights 1. With `output_scale` != 1
// the projections that write into the residual stream (o_proj, down_proj) use std * output_scale
// instead (GPT-2's 1/sqrt(2 * layers)). Values are drawn in float32 on the CPU in
// hf_named_parameters() order, then copied into the parameters.
// `embed_std` > 0 draws the input embeddings (model.embed_tokens) with that std instead.
void init_weights(Qwen2Model& model, uint64_t seed, double std = 0.02, double output_scale = 1.0,
                  double embed_std = 0);

// "float32" | "bfloat16" | "float16" (also "fp32", "bf16", "fp16") → dtype; anything else throws.
torch::ScalarType parse_dtype(std::string_view name);
std::string dtype_to_hf_name(torch::ScalarType dtype);  // "float32", "bfloat16", "float16"
// "cpu", "cuda", "cuda:1" → device; a CUDA device when this libtorch has no CUDA throws.
torch::Device parse_device(std::string_view name);

}  // namespace ajet::model
