#include "model/presets.h"

#include "common/error.h"

namespace ajet::model {

namespace {

// Qwen2.5's embedding rows: 151,643 BPE ids + 22 special tokens, padded to a multiple of 128.
constexpr int64_t kQwen25Vocab = 151936;

// Qwen2 layout (q/k/v bias, GQA, tied embeddings, SwiGLU), sized for CPU work.
hf::ModelConfig base(int64_t hidden, int64_t layers, int64_t heads, int64_t kv_heads,
                     int64_t intermediate, int64_t max_positions) {
  hf::ModelConfig c;
  c.model_type = "qwen2";
  c.architectures = {"Qwen2ForCausalLM"};
  c.hidden_size = hidden;
  c.num_hidden_layers = layers;
  c.num_attention_heads = heads;
  c.num_key_value_heads = kv_heads;
  c.head_dim = hidden / heads;
  c.intermediate_size = intermediate;
  c.max_position_embeddings = max_positions;
  c.rope_theta = 10000.0;
  c.rms_norm_eps = 1e-6;
  c.tie_word_embeddings = true;
  c.attention_bias = true;
  c.qk_norm = false;
  c.hidden_act = "silu";
  c.torch_dtype = "float32";
  return c;
}

}  // namespace

std::vector<PresetInfo> presets() {
  return {
      {"micro", "unit tests: hidden 32, 2 layers, 4 heads (2 kv), untied"},
      {"tiny",
       "trains in minutes on 2 cores: hidden 128, 4 layers, 4 heads (2 kv), FFN 512, ~1 M + "
       "embeddings"},
      {"small",
       "realistic CPU test: hidden 512, 8 layers, 8 heads (4 kv), FFN 1536, ~25 M + embeddings"},
      {"qwen2.5-0.5b",
       "Qwen2.5-0.5B(-Instruct)'s published shape: hidden 896, 24 layers, 14 heads (2 kv), FFN "
       "4864, vocab "
       "151936, tied, rope_theta 1e6, 32768 positions; 494,032,768 parameters",
       kQwen25Vocab},
  };
}

hf::ModelConfig preset_config(std::string_view name, int64_t vocab_size) {
  if (vocab_size <= 0)
    invalid_argument("preset '" + std::string(name) + "': vocab_size must be positive");
  hf::ModelConfig c;
  if (name == "micro") {
    c = base(32, 2, 4, 2, 64, 512);
    c.tie_word_embeddings =
        false;  // keeps the separate lm_head path covered by the tests that use it
  } else if (name == "tiny") {
    c = base(128, 4, 4, 2, 512, 2048);
  } else if (name == "small") {
    c = base(512, 8, 8, 4, 1536, 4096);
  } else if (name == "qwen2.5-0.5b") {
    // Qwen/Qwen2.5-0.5B-Instruct's config.json (the base model's differs only in the chat
    // template).
    if (vocab_size > kQwen25Vocab) {
      invalid_argument("preset 'qwen2.5-0.5b' has " + std::to_string(kQwen25Vocab) +
                       " embedding rows; the tokenizer has " + std::to_string(vocab_size) +
                       " ids (use Qwen2.5's or Qwen3's tokenizer)");
    }
    c = base(896, 24, 14, 2, 4864, 32768);
    c.rope_theta = 1000000.0;
    c.torch_dtype = "bfloat16";
    c.vocab_size = kQwen25Vocab;
    return c;
  } else {
    std::string known;
    for (const auto& p : presets()) known += (known.empty() ? "" : ", ") + p.name;
    invalid_argument("unknown preset '" + std::string(name) + "' (known: " + known + ")");
  }
  c.vocab_size = vocab_size;
  return c;
}

int64_t count_parameters(const hf::ModelConfig& c) {
  const int64_t q = c.num_attention_heads * c.head_dim, kv = c.num_key_value_heads * c.head_dim;
  const int64_t h = c.hidden_size;
  int64_t layer = h                               // input_layernorm
                  + h * q + 2 * h * kv + q * h    // q, k, v, o weights
                  + h                             // post_attention_layernorm
                  + 3 * h * c.intermediate_size;  // gate, up, down
  if (c.attention_bias) layer += q + 2 * kv + (c.model_type == "qwen2" ? 0 : h);
  if (c.qk_norm) layer += 2 * c.head_dim;
  int64_t total =
      c.vocab_size * h + c.num_hidden_layers * layer + h;  // embeddings, layers, final norm
  if (!c.tie_word_embeddings) total += c.vocab_size * h;
  return total;
}

}  // namespace ajet::model
