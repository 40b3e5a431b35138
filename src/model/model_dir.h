// Hugging Face model directories <-> Qwen2Model: config.json, model.safetensors (or shards with
// model.safetensors.index.json), generation_config.json and the tokenizer files, in the layout HF
// tools open. Loading never guesses: every missing, extra, mis-shaped or non-float tensor is named
// in one error, and load_model_dir logs what it loaded (a plain model, a merged LoRA model, a base
// model + adapter).
#pragma once

#include <cstddef>
#include <filesystem>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "model/qwen2.h"

namespace ajet::model {

struct LoadOptions {
  torch::ScalarType dtype = torch::kFloat;  // weights are converted from the file's F32/F16/BF16
  torch::Device device = torch::kCPU;
};

// Reads the weights resolve_model_source(dir) names (model_source.h: a model directory, a trainer
// checkpoint, a PEFT adapter over its base) into a new model on options.device in options.dtype,
// and logs one line saying what was loaded ("loaded merged model ...", "loaded base model ... +
// adapter ...").
Qwen2Model load_model_dir(const std::filesystem::path& dir, const LoadOptions& options = {});

// Copies the weights found at `path` (a model directory, an index .json or one .safetensors file)
// into `model`, converting dtype and device. Tensors named "*rotary_emb.inv_freq" are ignored, and
// so is "lm_head.weight" when the embeddings are tied. All problems are collected and thrown as one
// Error(kInvalidArgument) naming each tensor; on error the model is left unchanged.
void load_weights(Qwen2Model& model, const std::filesystem::path& path);

// Adds (lora_alpha / r) B A (lora_alpha / sqrt(r) with use_rslora) of every adapted linear layer in
// adapter_dir (adapter_model.safetensors + adapter_config.json, PEFT's names
// "base_model.model.<module>.lora_{A,B}.weight") to that layer's weight, computed in float32. Every
// unknown module, unpaired or mis-shaped tensor and unsupported option (DoRA, rank/alpha patterns)
// is named in one Error(kInvalidArgument); the model is unchanged on error.
void merge_peft_adapter(Qwen2Model& model, const std::filesystem::path& adapter_dir);

struct SaveOptions {
  // Directory holding tokenizer.json (+ tokenizer_config.json, special_tokens_map.json, ...) to
  // copy.
  std::optional<std::filesystem::path> tokenizer_dir;
  // Tensor bytes per safetensors file before sharding (HF's default is 5 GB).
  size_t max_shard_bytes = size_t{5} << 30;
  // (file name, contents) written beside the weights, inside the same atomic rename (e.g. the
  // provenance of a merged LoRA model, model_source.h's kMergedLoraFile).
  std::vector<std::pair<std::string, std::string>> extra_files = {};
};

// Writes the model into `dir` atomically: everything goes into a sibling temp directory which is
// then renamed over `dir` (an existing `dir` is replaced). config.json's torch_dtype is the
// parameters' dtype; weights are saved in that dtype, so save -> load is bit-identical.
void save_model_dir(Qwen2Model& model, const std::filesystem::path& dir,
                    const SaveOptions& options = {});
// The same with the tensors given (HF names, e.g. merged weights computed beside the model's own):
// nothing reads or changes a model, so inference may go on while a copy is saved.
void save_model_tensors(const hf::ModelConfig& config,
                        const std::vector<std::pair<std::string, torch::Tensor>>& tensors,
                        const std::filesystem::path& dir, const SaveOptions& options = {});

// Tokenizer files copied by save_model_dir when present (tokenizer.json is required).
inline constexpr const char* kTokenizerFiles[] = {
    "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "vocab.json",
    "merges.txt",     "added_tokens.json"};

}  // namespace ajet::model
