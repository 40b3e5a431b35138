// Hugging Face model directories <-> Qwen2Model: config.json, model.safetensors (or shards with
// model.safetensors.index.json), generation_config.json and the tokenizer files, in the layout HF tools
// open. Loading never guesses: every missing, extra, mis-shaped or non-float tensor is named in one error.
#pragma once

#include <cstddef>
#include <filesystem>
#include <optional>

#include "model/qwen2.h"

namespace ajet::model {

struct LoadOptions {
  torch::ScalarType dtype = torch::kFloat;  // weights are converted from the file's F32/F16/BF16
  torch::Device device = torch::kCPU;
};

// Reads dir/config.json and the weights into a new model on options.device in options.dtype.
Qwen2Model load_model_dir(const std::filesystem::path& dir, const LoadOptions& options = {});

// Copies the weights found at `path` (a model directory, an index .json or one .safetensors file) into
// `model`, converting dtype and device. Tensors named "*rotary_emb.inv_freq" are ignored, and so is
// "lm_head.weight" when the embeddings are tied. All problems are collected and thrown as one
// Error(kInvalidArgument) naming each tensor; on error the model is left unchanged.
void load_weights(Qwen2Model& model, const std::filesystem::path& path);

struct SaveOptions {
  // Directory holding tokenizer.json (+ tokenizer_config.json, special_tokens_map.json, ...) to copy.
  std::optional<std::filesystem::path> tokenizer_dir;
  // Tensor bytes per safetensors file before sharding (HF's default is 5 GB).
  size_t max_shard_bytes = size_t{5} << 30;
};

// Writes the model into `dir` atomically: everything goes into a sibling temp directory which is then
// renamed over `dir` (an existing `dir` is replaced). config.json's torch_dtype is the parameters'
// dtype; weights are saved in that dtype, so save -> load is bit-identical.
void save_model_dir(Qwen2Model& model, const std::filesystem::path& dir, const SaveOptions& options = {});

// Tokenizer files copied by save_model_dir when present (tokenizer.json is required).
inline constexpr const char* kTokenizerFiles[] = {"tokenizer.json", "tokenizer_config.json",
                                                  "special_tokens_map.json", "vocab.json", "merges.txt",
                                                  "added_tokens.json"};

}  // namespace ajet::model
