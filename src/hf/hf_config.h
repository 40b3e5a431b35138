// A Hugging Face `config.json` for the Qwen2 / Qwen3 / Llama decoder family, parsed into a typed
// struct. Missing or inconsistent fields are errors naming the file and the field.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/json.h"

namespace ajet::hf {

struct ModelConfig {
  std::string model_type = "qwen2";  // qwen2 | qwen3 | llama
  std::vector<std::string>
      architectures;  // e.g. {"Qwen2ForCausalLM"}; parse fills it by model_type when absent
  int64_t vocab_size = 0;
  int64_t hidden_size = 0;
  int64_t intermediate_size = 0;
  int64_t num_hidden_layers = 0;
  int64_t num_attention_heads = 0;
  int64_t num_key_value_heads = 0;  // defaults to num_attention_heads
  int64_t head_dim = 0;             // defaults to hidden_size / num_attention_heads
  int64_t max_position_embeddings = 0;
  double rope_theta = 10000.0;
  double rms_norm_eps = 1e-6;
  bool tie_word_embeddings = false;
  bool attention_bias = true;  // q/k/v projection bias (Qwen2: true; Llama, Qwen3: false)
  bool qk_norm = false;        // per-head RMSNorm on q and k (Qwen3)
  std::string hidden_act = "silu";
  std::string torch_dtype = "float32";
  std::optional<int64_t> bos_token_id;
  std::optional<int64_t> eos_token_id;  // the first of eos_token_ids
  std::vector<int64_t> eos_token_ids;   // config.json may give one id or a list

  bool operator==(const ModelConfig&) const = default;
};

// `where` names the source in error messages. Unsupported features (rope_scaling, sliding window,
// mlp_bias, quantization_config, an activation other than silu) are errors, not warnings: ignoring
// them would load a model that computes something other than what was trained.
ModelConfig parse_model_config(const Json& config, std::string_view where);
ModelConfig parse_model_config_text(std::string_view text, std::string_view where);  // bad JSON too
ModelConfig load_model_config(const std::filesystem::path& config_json);
// HF-compatible config.json content; validates first (throws like parse_model_config).
Json model_config_to_json(const ModelConfig& config);
// The consistency checks parse_model_config applies: positive sizes, heads divisible by kv heads,
// even head_dim, token ids inside the vocabulary, attention_bias / qk_norm as the model_type
// implies.
void validate_model_config(const ModelConfig& config, std::string_view where);

}  // namespace ajet::hf
