// LoRA adapters on the decoder's linear projections (PEFT semantics: y = W x + (alpha / r) B A
// dropout(x), A kaiming-uniform, B zero, so a fresh adapter changes nothing), their export in
// PEFT's layout (adapter_model.safetensors + adapter_config.json) and the merged export W + (alpha
// / r) B A in HF layout. It never changes the base weights: the merged export computes merged
// copies beside them.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "model/model_dir.h"
#include "model/qwen2.h"
#include "train_data/options.h"

namespace ajet::train {

// The projections `target_modules` names, in kProjNames order. "all-linear" (as PEFT, every linear
// layer except lm_head) is all seven. Unknown names throw Error(kInvalidArgument) listing the
// known.
std::vector<model::Proj> resolve_lora_targets(const std::vector<std::string>& target_modules);

class LoraAdapter : public model::LinearAdapter {
 public:
  LoraAdapter(int64_t in_features, int64_t out_features, const train_data::LoraOptions& options);
  // (..., in) -> (..., out): scale * dropout(x) A^T B^T; zero when disabled. Dropout only in
  // training mode.
  torch::Tensor delta(const torch::Tensor& x) override;
  // (out, in) float32: scale * B A, the weight change merging adds.
  torch::Tensor merged_delta() const;

  torch::Tensor lora_A;  // (r, in)
  torch::Tensor lora_B;  // (out, r)
  bool enabled = true;   // false: the base model (the KL reference of a LoRA run)
  // Where CPU dropout masks come from (attach_lora gives every adapter of a model the same one); an
  // undefined generator, or a tensor on another device: the default generator (torch::dropout).
  at::Generator dropout_generator;

 private:
  double scale_;
  double dropout_;
};

// Attaches fresh adapters to every target projection of every layer (A drawn from `seed`,
// reproducibly, and the dropout masks from a generator of their own seeded from it: a run's masks
// depend on its seed, not on what else the process drew), then freezes every base parameter
// (requires_grad false) so only adapters train. Throws when the model already has adapters.
void attach_lora(model::Qwen2Model& model, const train_data::LoraOptions& options, uint64_t seed);

// The generator the model's adapters draw dropout masks from; undefined without adapters.
at::Generator lora_dropout_generator(model::Qwen2Model& model);

// Adapter parameters under PEFT's names
// ("base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight"), layer by layer, A before B.
// Empty without adapters.
std::vector<std::pair<std::string, torch::Tensor>> lora_named_parameters(model::Qwen2Model& model);
bool has_lora(model::Qwen2Model& model);

// Turns every adapter on or off; returns the previous state of the first one (true when there are
// none).
bool set_lora_enabled(model::Qwen2Model& model, bool enabled);

// Writes dir/adapter_model.safetensors and dir/adapter_config.json (r, lora_alpha, lora_dropout,
// target_modules, peft_type "LORA", task_type "CAUSAL_LM", base_model_name_or_path), atomically.
void save_peft_adapter(model::Qwen2Model& model, const std::filesystem::path& dir,
                       const train_data::LoraOptions& options,
                       const std::string& base_model_name_or_path);
// Reads an adapter written by save_peft_adapter (or PEFT) into the model's attached adapters. Every
// missing, extra or mis-shaped tensor is named in one Error(kInvalidArgument).
void load_peft_adapter(model::Qwen2Model& model, const std::filesystem::path& dir);
// Reads dir/adapter_config.json's r, lora_alpha, lora_dropout and target_modules.
train_data::LoraOptions read_peft_config(const std::filesystem::path& dir);

// The model's HF-named weights with every adapter merged in: W + scale B A (computed in float32,
// stored in W's dtype, on the CPU) for adapted layers, the parameter itself for the others. Never
// writes to the model, so inference on it may go on meanwhile; costs one CPU copy of every adapted
// weight.
std::vector<std::pair<std::string, torch::Tensor>> merged_named_parameters(
    model::Qwen2Model& model);

// Saves the merged weights in HF layout (model::save_model_tensors, with the tokenizer files when
// options.tokenizer_dir is set), plus model::kMergedLoraFile naming the base and the adapter's r,
// lora_alpha and target_modules, so loaders say "merged model". The model is not changed.
void save_merged_model(model::Qwen2Model& model, const std::filesystem::path& dir,
                       const train_data::LoraOptions& lora,
                       const std::string& base_model_name_or_path, model::SaveOptions options = {});

}  // namespace ajet::train
