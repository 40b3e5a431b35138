#include "hf/hf_config.h"

#include <cmath>

#include "common/error.h"
#include "common/fs.h"
#include "hf/parse_text.h"

namespace ajet::hf {
namespace {

constexpr int64_t kMaxSize = (int64_t{1} << 31) - 1;  // keeps products of two sizes inside int64

[[noreturn]] void bad_field(std::string_view where, std::string_view field,
                            const std::string& message) {
  invalid_argument(std::string(where) + ": field '" + std::string(field) + "' " + message);
}

const Json* field(const Json& config, std::string_view key) {
  auto it = config.find(key);
  return it == config.end() || it->is_null() ? nullptr : &*it;
}

// Integer field; floats with an integral value in range are accepted (some exporters write 2.0),
// but range is checked here so that no out-of-range float is ever cast.
int64_t int_value(const Json* v, std::string_view key, std::string_view where) {
  if (v->is_number_unsigned() && v->get<uint64_t>() > static_cast<uint64_t>(INT64_MAX)) {
    bad_field(where, key, "is out of range");
  }
  if (v->is_number_float()) {
    double d = v->get<double>();
    if (!(d >= -9.0e18 && d <= 9.0e18) || d != std::trunc(d))
      bad_field(where, key, "must be an integer");
    return static_cast<int64_t>(d);
  }
  if (!v->is_number_integer())
    bad_field(where, key, "must be an integer, got " + std::string(json_type_name(*v)));
  return v->get<int64_t>();
}

std::optional<int64_t> optional_int(const Json& config, std::string_view key,
                                    std::string_view where) {
  const Json* v = field(config, key);
  if (v == nullptr) return std::nullopt;
  return int_value(v, key, where);
}

int64_t required_int(const Json& config, std::string_view key, std::string_view where) {
  auto v = optional_int(config, key, where);
  if (!v)
    invalid_argument(std::string(where) + ": missing required field '" + std::string(key) + "'");
  return *v;
}

double optional_number(const Json& config, std::string_view key, std::string_view where,
                       double fallback) {
  const Json* v = field(config, key);
  if (v == nullptr) return fallback;
  if (!v->is_number())
    bad_field(where, key, "must be a number, got " + std::string(json_type_name(*v)));
  return v->get<double>();
}

bool optional_bool(const Json& config, std::string_view key, std::string_view where,
                   bool fallback) {
  const Json* v = field(config, key);
  if (v == nullptr) return fallback;
  if (!v->is_boolean())
    bad_field(where, key, "must be a boolean, got " + std::string(json_type_name(*v)));
  return v->get<bool>();
}

// bos/eos ids: an integer or a list of integers (Llama 3 instruct lists several eos ids).
std::vector<int64_t> token_ids(const Json& config, std::string_view key, std::string_view where) {
  const Json* v = field(config, key);
  if (v == nullptr) return {};
  if (!v->is_array()) return {int_value(v, key, where)};
  std::vector<int64_t> ids;
  for (const Json& id : *v) ids.push_back(int_value(&id, key, where));
  return ids;
}

std::string default_architecture(std::string_view model_type) {
  if (model_type == "qwen2") return "Qwen2ForCausalLM";
  if (model_type == "qwen3") return "Qwen3ForCausalLM";
  return "LlamaForCausalLM";
}

void check_size(std::string_view where, std::string_view name, int64_t value) {
  if (value <= 0 || value > kMaxSize) {
    bad_field(where, name, "must be a positive integer below 2^31, got " + std::to_string(value));
  }
}

void check_token(std::string_view where, std::string_view name, int64_t id, int64_t vocab_size) {
  if (id < 0 || id >= vocab_size) {
    bad_field(where, name,
              "id " + std::to_string(id) + " is outside the vocabulary [0, " +
                  std::to_string(vocab_size) + ")");
  }
}

}  // namespace

void validate_model_config(const ModelConfig& c, std::string_view where) {
  if (c.model_type != "qwen2" && c.model_type != "qwen3" && c.model_type != "llama") {
    bad_field(where, "model_type", "'" + c.model_type + "' is not supported (qwen2, qwen3, llama)");
  }
  check_size(where, "vocab_size", c.vocab_size);
  check_size(where, "hidden_size", c.hidden_size);
  check_size(where, "intermediate_size", c.intermediate_size);
  check_size(where, "num_hidden_layers", c.num_hidden_layers);
  check_size(where, "num_attention_heads", c.num_attention_heads);
  check_size(where, "num_key_value_heads", c.num_key_value_heads);
  check_size(where, "head_dim", c.head_dim);
  check_size(where, "max_position_embeddings", c.max_position_embeddings);
  if (c.num_attention_heads % c.num_key_value_heads != 0) {
    bad_field(where, "num_key_value_heads",
              std::to_string(c.num_key_value_heads) + " does not divide num_attention_heads " +
                  std::to_string(c.num_attention_heads));
  }
  if (c.head_dim % 2 != 0)
    bad_field(where, "head_dim", std::to_string(c.head_dim) + " must be even for RoPE");
  if (!(c.rope_theta > 0 && std::isfinite(c.rope_theta)))
    bad_field(where, "rope_theta", "must be positive");
  if (!(c.rms_norm_eps > 0 && std::isfinite(c.rms_norm_eps)))
    bad_field(where, "rms_norm_eps", "must be positive");
  if (c.hidden_act != "silu") {
    bad_field(where, "hidden_act", "'" + c.hidden_act + "' is not supported (only silu)");
  }
  if (c.torch_dtype != "float32" && c.torch_dtype != "float16" && c.torch_dtype != "bfloat16") {
    bad_field(where, "torch_dtype",
              "'" + c.torch_dtype + "' is not one of float32, float16, bfloat16");
  }
  // HF builds these from model_type alone, so any other combination cannot be written as
  // config.json.
  if (c.model_type == "qwen2" && !c.attention_bias) {
    bad_field(where, "attention_bias",
              "must be true for qwen2 (its q/k/v projections always have a bias)");
  }
  if (c.qk_norm != (c.model_type == "qwen3")) {
    bad_field(where, "qk_norm",
              std::string("is implied by model_type and must be ") +
                  (c.model_type == "qwen3" ? "true" : "false") + " for " + c.model_type);
  }
  if (c.bos_token_id) check_token(where, "bos_token_id", *c.bos_token_id, c.vocab_size);
  for (int64_t id : c.eos_token_ids) check_token(where, "eos_token_id", id, c.vocab_size);
  std::optional<int64_t> first_eos;
  if (!c.eos_token_ids.empty()) first_eos = c.eos_token_ids.front();
  if (c.eos_token_id != first_eos) {
    bad_field(where, "eos_token_id", "must equal the first of eos_token_ids");
  }
}

ModelConfig parse_model_config(const Json& json, std::string_view where) {
  if (!json.is_object()) {
    invalid_argument(std::string(where) + ": expected a JSON object, got " +
                     std::string(json_type_name(json)));
  }
  ModelConfig c;
  const Json* model_type = field(json, "model_type");
  if (model_type == nullptr)
    invalid_argument(std::string(where) + ": missing required field 'model_type'");
  if (!model_type->is_string()) bad_field(where, "model_type", "must be a string");
  c.model_type = model_type->get<std::string>();
  if (c.model_type != "qwen2" && c.model_type != "qwen3" && c.model_type != "llama") {
    bad_field(where, "model_type", "'" + c.model_type + "' is not supported (qwen2, qwen3, llama)");
  }
  const bool llama = c.model_type == "llama";
  const bool qwen3 = c.model_type == "qwen3";

  if (const Json* arch = field(json, "architectures")) {
    if (!arch->is_array()) bad_field(where, "architectures", "must be a list of strings");
    for (const Json& a : *arch) {
      if (!a.is_string()) bad_field(where, "architectures", "must be a list of strings");
      c.architectures.push_back(a.get<std::string>());
    }
  }
  if (c.architectures.empty()) c.architectures.push_back(default_architecture(c.model_type));

  // Refuse what our decoder does not implement rather than load a model that computes something
  // else.
  if (field(json, "rope_scaling") != nullptr) {
    bad_field(where, "rope_scaling",
              "is not supported (only plain RoPE); got " + field(json, "rope_scaling")->dump());
  }
  if (optional_bool(json, "use_sliding_window", where, false)) {
    bad_field(where, "use_sliding_window", "is not supported (full attention only)");
  }
  if (optional_bool(json, "mlp_bias", where, false))
    bad_field(where, "mlp_bias", "is not supported");
  if (field(json, "quantization_config") != nullptr) {
    bad_field(where, "quantization_config", "is not supported (unquantized weights only)");
  }

  c.vocab_size = required_int(json, "vocab_size", where);
  c.hidden_size = required_int(json, "hidden_size", where);
  c.intermediate_size = required_int(json, "intermediate_size", where);
  c.num_hidden_layers = required_int(json, "num_hidden_layers", where);
  c.num_attention_heads = required_int(json, "num_attention_heads", where);
  check_size(where, "num_attention_heads", c.num_attention_heads);
  c.num_key_value_heads =
      optional_int(json, "num_key_value_heads", where).value_or(c.num_attention_heads);

  // Defaults below are those of transformers' Qwen2Config / Qwen3Config / LlamaConfig.
  if (auto head_dim = optional_int(json, "head_dim", where)) {
    c.head_dim = *head_dim;
  } else if (qwen3) {
    c.head_dim = 128;
  } else {
    if (c.hidden_size % c.num_attention_heads != 0) {
      bad_field(where, "hidden_size",
                std::to_string(c.hidden_size) + " is not divisible by num_attention_heads " +
                    std::to_string(c.num_attention_heads) + " (and head_dim is absent)");
    }
    c.head_dim = c.hidden_size / c.num_attention_heads;
  }
  c.max_position_embeddings =
      optional_int(json, "max_position_embeddings", where).value_or(llama ? 2048 : 32768);
  c.rope_theta = optional_number(json, "rope_theta", where, 10000.0);
  c.rms_norm_eps = optional_number(json, "rms_norm_eps", where, 1e-6);
  c.tie_word_embeddings = optional_bool(json, "tie_word_embeddings", where, false);
  // Qwen2 always has q/k/v bias (transformers ignores attention_bias for it).
  c.attention_bias =
      c.model_type == "qwen2" ? true : optional_bool(json, "attention_bias", where, false);
  c.qk_norm = qwen3;
  if (const Json* act = field(json, "hidden_act")) {
    if (!act->is_string()) bad_field(where, "hidden_act", "must be a string");
    c.hidden_act = act->get<std::string>();
  }
  // transformers >= 4.56 writes "dtype"; older versions "torch_dtype".
  for (const char* key : {"dtype", "torch_dtype"}) {
    if (const Json* dtype = field(json, key)) {
      if (!dtype->is_string()) bad_field(where, key, "must be a string");
      c.torch_dtype = dtype->get<std::string>();
    }
  }
  auto bos = token_ids(json, "bos_token_id", where);
  if (!bos.empty()) c.bos_token_id = bos.front();
  c.eos_token_ids = token_ids(json, "eos_token_id", where);
  if (llama && !json.contains("bos_token_id")) c.bos_token_id = 1;  // LlamaConfig's defaults
  if (llama && !json.contains("eos_token_id")) c.eos_token_ids = {2};
  if (!c.eos_token_ids.empty()) c.eos_token_id = c.eos_token_ids.front();

  validate_model_config(c, where);
  return c;
}

ModelConfig parse_model_config_text(std::string_view text, std::string_view where) {
  return parse_model_config(detail::parse_json_text(text, where), where);
}

ModelConfig load_model_config(const std::filesystem::path& config_json) {
  return parse_model_config_text(read_file(config_json), config_json.string());
}

Json model_config_to_json(const ModelConfig& c) {
  validate_model_config(c, "model config");
  Json j = Json::object();
  j["architectures"] = c.architectures.empty()
                           ? std::vector<std::string>{default_architecture(c.model_type)}
                           : c.architectures;
  j["model_type"] = c.model_type;
  j["vocab_size"] = c.vocab_size;
  j["hidden_size"] = c.hidden_size;
  j["intermediate_size"] = c.intermediate_size;
  j["num_hidden_layers"] = c.num_hidden_layers;
  j["num_attention_heads"] = c.num_attention_heads;
  j["num_key_value_heads"] = c.num_key_value_heads;
  j["head_dim"] = c.head_dim;
  j["max_position_embeddings"] = c.max_position_embeddings;
  j["rope_theta"] = c.rope_theta;
  j["rope_scaling"] = nullptr;
  j["rms_norm_eps"] = c.rms_norm_eps;
  j["tie_word_embeddings"] = c.tie_word_embeddings;
  if (c.model_type != "qwen2") j["attention_bias"] = c.attention_bias;  // qwen2's bias is implicit
  if (c.model_type == "llama") j["mlp_bias"] = false;
  if (c.model_type != "llama") j["use_sliding_window"] = false;
  j["hidden_act"] = c.hidden_act;
  j["torch_dtype"] = c.torch_dtype;
  j["attention_dropout"] = 0.0;
  j["initializer_range"] = 0.02;
  j["use_cache"] = true;
  j["bos_token_id"] = c.bos_token_id ? Json(*c.bos_token_id) : Json(nullptr);
  if (c.eos_token_ids.size() > 1) {
    j["eos_token_id"] = c.eos_token_ids;
  } else {
    j["eos_token_id"] = c.eos_token_id ? Json(*c.eos_token_id) : Json(nullptr);
  }
  return j;
}

}  // namespace ajet::hf
