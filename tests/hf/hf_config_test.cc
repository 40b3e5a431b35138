#include "hf/hf_config.h"

#include <gtest/gtest.h>

#include "common/error.h"
#include "common/fs.h"
#include "hf/test_util.h"

namespace ajet::hf {
namespace {

// The public config.json files of these checkpoints, as published on the Hugging Face hub.
constexpr const char* kQwen25_05B = R"({
  "architectures": ["Qwen2ForCausalLM"],
  "attention_dropout": 0.0,
  "bos_token_id": 151643,
  "eos_token_id": 151643,
  "hidden_act": "silu",
  "hidden_size": 896,
  "initializer_range": 0.02,
  "intermediate_size": 4864,
  "max_position_embeddings": 32768,
  "max_window_layers": 24,
  "model_type": "qwen2",
  "num_attention_heads": 14,
  "num_hidden_layers": 24,
  "num_key_value_heads": 2,
  "rms_norm_eps": 1e-06,
  "rope_theta": 1000000.0,
  "sliding_window": 32768,
  "tie_word_embeddings": true,
  "torch_dtype": "bfloat16",
  "transformers_version": "4.40.1",
  "use_cache": true,
  "use_sliding_window": false,
  "vocab_size": 151936
})";

constexpr const char* kQwen3_06B = R"({
  "architectures": ["Qwen3ForCausalLM"],
  "attention_bias": false,
  "attention_dropout": 0.0,
  "bos_token_id": 151643,
  "eos_token_id": 151645,
  "head_dim": 128,
  "hidden_act": "silu",
  "hidden_size": 1024,
  "initializer_range": 0.02,
  "intermediate_size": 3072,
  "max_position_embeddings": 40960,
  "max_window_layers": 28,
  "model_type": "qwen3",
  "num_attention_heads": 16,
  "num_hidden_layers": 28,
  "num_key_value_heads": 8,
  "rms_norm_eps": 1e-06,
  "rope_scaling": null,
  "rope_theta": 1000000,
  "sliding_window": null,
  "tie_word_embeddings": true,
  "torch_dtype": "bfloat16",
  "transformers_version": "4.51.0",
  "use_cache": true,
  "use_sliding_window": false,
  "vocab_size": 151936
})";

// TinyLlama-1.1B-Chat-v1.0 (Llama 2 architecture with grouped-query attention).
constexpr const char* kTinyLlama = R"({
  "architectures": ["LlamaForCausalLM"],
  "attention_bias": false,
  "bos_token_id": 1,
  "eos_token_id": 2,
  "hidden_act": "silu",
  "hidden_size": 2048,
  "initializer_range": 0.02,
  "intermediate_size": 5632,
  "max_position_embeddings": 2048,
  "model_type": "llama",
  "num_attention_heads": 32,
  "num_hidden_layers": 22,
  "num_key_value_heads": 4,
  "pretraining_tp": 1,
  "rms_norm_eps": 1e-05,
  "rope_scaling": null,
  "rope_theta": 10000.0,
  "tie_word_embeddings": false,
  "torch_dtype": "bfloat16",
  "transformers_version": "4.35.0",
  "use_cache": true,
  "vocab_size": 32000
})";

// Llama-3.2-1B-Instruct: llama3 rope scaling, which our decoder does not implement.
constexpr const char* kLlama32_1B = R"({
  "architectures": ["LlamaForCausalLM"],
  "attention_bias": false,
  "attention_dropout": 0.0,
  "bos_token_id": 128000,
  "eos_token_id": [128001, 128008, 128009],
  "head_dim": 64,
  "hidden_act": "silu",
  "hidden_size": 2048,
  "initializer_range": 0.02,
  "intermediate_size": 8192,
  "max_position_embeddings": 131072,
  "mlp_bias": false,
  "model_type": "llama",
  "num_attention_heads": 32,
  "num_hidden_layers": 16,
  "num_key_value_heads": 8,
  "pretraining_tp": 1,
  "rms_norm_eps": 1e-05,
  "rope_scaling": {"factor": 32.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
                   "original_max_position_embeddings": 8192, "rope_type": "llama3"},
  "rope_theta": 500000.0,
  "tie_word_embeddings": true,
  "torch_dtype": "bfloat16",
  "transformers_version": "4.45.0.dev0",
  "use_cache": true,
  "vocab_size": 128256
})";

ModelConfig parse(const std::string& text) {
  return parse_model_config(parse_json(text, "config.json"), "config.json");
}

Json edited(const char* base, const std::function<void(Json&)>& edit) {
  Json j = Json::parse(base);
  edit(j);
  return j;
}

// Parsing `json` must fail with a message that starts with the source and mentions every part.
void expect_rejected(const Json& json, const std::vector<std::string>& parts) {
  try {
    parse_model_config(json, "cfg/config.json");
    ADD_FAILURE() << "accepted; expected an error mentioning " << parts.front();
  } catch (const Error& e) {
    std::string message = e.what();
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_EQ(message.rfind("cfg/config.json: ", 0), 0u) << message;
    for (const auto& part : parts)
      EXPECT_NE(message.find(part), std::string::npos) << "'" << part << "' not in: " << message;
  }
}

TEST(HfConfig, Qwen25_05B) {
  ModelConfig c = parse(kQwen25_05B);
  EXPECT_EQ(c.model_type, "qwen2");
  EXPECT_EQ(c.architectures, std::vector<std::string>{"Qwen2ForCausalLM"});
  EXPECT_EQ(c.vocab_size, 151936);
  EXPECT_EQ(c.hidden_size, 896);
  EXPECT_EQ(c.intermediate_size, 4864);
  EXPECT_EQ(c.num_hidden_layers, 24);
  EXPECT_EQ(c.num_attention_heads, 14);
  EXPECT_EQ(c.num_key_value_heads, 2);
  EXPECT_EQ(c.head_dim, 64);  // 896 / 14
  EXPECT_EQ(c.max_position_embeddings, 32768);
  EXPECT_EQ(c.rope_theta, 1e6);
  EXPECT_EQ(c.rms_norm_eps, 1e-6);
  EXPECT_TRUE(c.tie_word_embeddings);
  EXPECT_TRUE(c.attention_bias);  // implicit for qwen2
  EXPECT_FALSE(c.qk_norm);
  EXPECT_EQ(c.torch_dtype, "bfloat16");
  EXPECT_EQ(c.bos_token_id, 151643);
  EXPECT_EQ(c.eos_token_id, 151643);
  EXPECT_EQ(c.eos_token_ids, std::vector<int64_t>{151643});
}

TEST(HfConfig, Qwen3_06B) {
  ModelConfig c = parse(kQwen3_06B);
  EXPECT_EQ(c.model_type, "qwen3");
  EXPECT_EQ(c.hidden_size, 1024);
  EXPECT_EQ(c.num_attention_heads, 16);
  EXPECT_EQ(c.num_key_value_heads, 8);
  EXPECT_EQ(c.head_dim, 128);  // from the config, not 1024 / 16
  EXPECT_EQ(c.max_position_embeddings, 40960);
  EXPECT_EQ(c.rope_theta, 1e6);  // an integer in the file
  EXPECT_FALSE(c.attention_bias);
  EXPECT_TRUE(c.qk_norm);
  EXPECT_TRUE(c.tie_word_embeddings);
  EXPECT_EQ(c.eos_token_id, 151645);
}

TEST(HfConfig, TinyLlama) {
  ModelConfig c = parse(kTinyLlama);
  EXPECT_EQ(c.model_type, "llama");
  EXPECT_EQ(c.head_dim, 64);  // 2048 / 32
  EXPECT_EQ(c.num_key_value_heads, 4);
  EXPECT_EQ(c.rms_norm_eps, 1e-5);
  EXPECT_EQ(c.rope_theta, 10000.0);
  EXPECT_FALSE(c.attention_bias);
  EXPECT_FALSE(c.qk_norm);
  EXPECT_FALSE(c.tie_word_embeddings);
  EXPECT_EQ(c.bos_token_id, 1);
  EXPECT_EQ(c.eos_token_id, 2);
}

TEST(HfConfig, EosListKeepsEveryIdAndRopeScalingIsRefused) {
  expect_rejected(Json::parse(kLlama32_1B), {"'rope_scaling'", "llama3"});
  ModelConfig c =
      parse_model_config(edited(kLlama32_1B, [](Json& j) { j.erase("rope_scaling"); }), "c");
  EXPECT_EQ(c.eos_token_id, 128001);
  EXPECT_EQ(c.eos_token_ids, (std::vector<int64_t>{128001, 128008, 128009}));
  EXPECT_EQ(c.head_dim, 64);
  Json back = model_config_to_json(c);
  EXPECT_EQ(back["eos_token_id"], Json::parse("[128001, 128008, 128009]"));
}

TEST(HfConfig, DefaultsFollowTransformersPerModelType) {
  Json minimal = {{"vocab_size", 1000},
                  {"hidden_size", 64},
                  {"intermediate_size", 128},
                  {"num_hidden_layers", 2},
                  {"num_attention_heads", 4}};
  minimal["model_type"] = "qwen2";
  ModelConfig qwen2 = parse_model_config(minimal, "c");
  EXPECT_EQ(qwen2.num_key_value_heads, 4);
  EXPECT_EQ(qwen2.head_dim, 16);
  EXPECT_EQ(qwen2.max_position_embeddings, 32768);
  EXPECT_EQ(qwen2.rope_theta, 10000.0);
  EXPECT_EQ(qwen2.rms_norm_eps, 1e-6);
  EXPECT_FALSE(qwen2.tie_word_embeddings);
  EXPECT_TRUE(qwen2.attention_bias);
  EXPECT_EQ(qwen2.torch_dtype, "float32");
  EXPECT_FALSE(qwen2.bos_token_id.has_value());
  EXPECT_FALSE(qwen2.eos_token_id.has_value());

  minimal["model_type"] = "qwen3";
  ModelConfig qwen3 = parse_model_config(minimal, "c");
  EXPECT_EQ(qwen3.head_dim, 128);  // Qwen3Config's default, not hidden / heads
  EXPECT_FALSE(qwen3.attention_bias);
  EXPECT_TRUE(qwen3.qk_norm);

  minimal["model_type"] = "llama";
  ModelConfig llama = parse_model_config(minimal, "c");
  EXPECT_EQ(llama.head_dim, 16);
  EXPECT_EQ(llama.max_position_embeddings, 2048);
  EXPECT_FALSE(llama.attention_bias);
  EXPECT_EQ(llama.bos_token_id, 1);  // LlamaConfig defaults
  EXPECT_EQ(llama.eos_token_id, 2);
  minimal["attention_bias"] = true;
  minimal["bos_token_id"] = nullptr;
  llama = parse_model_config(minimal, "c");
  EXPECT_TRUE(llama.attention_bias);
  EXPECT_FALSE(llama.bos_token_id.has_value());

  minimal["model_type"] = "qwen2";
  minimal["attention_bias"] = false;  // transformers ignores it for qwen2, and so do we
  EXPECT_TRUE(parse_model_config(minimal, "c").attention_bias);
}

TEST(HfConfig, MissingAndInconsistentFieldsAreNamed) {
  for (const char* field : {"vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
                            "num_attention_heads", "model_type"}) {
    expect_rejected(edited(kQwen25_05B, [&](Json& j) { j.erase(field); }),
                    {"missing required field", field});
  }
  expect_rejected(edited(kQwen25_05B, [](Json& j) { j["hidden_size"] = 900; }),
                  {"'hidden_size'", "900", "not divisible", "14"});
  expect_rejected(edited(kQwen25_05B, [](Json& j) { j["num_key_value_heads"] = 3; }),
                  {"'num_key_value_heads'", "does not divide", "14"});
  expect_rejected(edited(kQwen25_05B, [](Json& j) { j["num_hidden_layers"] = 0; }),
                  {"'num_hidden_layers'", "positive"});
  expect_rejected(edited(kQwen25_05B, [](Json& j) { j["vocab_size"] = -5; }), {"'vocab_size'"});
  expect_rejected(edited(kQwen25_05B, [](Json& j) { j["num_attention_heads"] = 0; }),
                  {"'num_attention_heads'"});
  expect_rejected(edited(kQwen3_06B, [](Json& j) { j["head_dim"] = 63; }), {"'head_dim'", "even"});
  expect_rejected(edited(kQwen25_05B, [](Json& j) { j["vocab_size"] = "big"; }),
                  {"'vocab_size'", "integer", "string"});
  expect_rejected(edited(kQwen25_05B, [](Json& j) { j["hidden_size"] = 896.5; }),
                  {"'hidden_size'", "integer"});
  expect_rejected(edited(kQwen25_05B, [](Json& j) { j["hidden_size"] = 1e300; }),
                  {"'hidden_size'", "integer"});
  expect_rejected(edited(kQwen25_05B, [](Json& j) { j["hidden_size"] = 18446744073709551615ull; }),
                  {"'hidden_size'", "out of range"});
  expect_rejected(edited(kQwen25_05B, [](Json& j) { j["rms_norm_eps"] = 0; }), {"'rms_norm_eps'"});
  expect_rejected(edited(kQwen25_05B, [](Json& j) { j["rope_theta"] = "1e6"; }),
                  {"'rope_theta'", "number"});
  expect_rejected(edited(kQwen25_05B, [](Json& j) { j["tie_word_embeddings"] = 1; }),
                  {"'tie_word_embeddings'", "boolean"});
  expect_rejected(edited(kQwen25_05B, [](Json& j) { j["hidden_act"] = "gelu"; }),
                  {"'hidden_act'", "gelu", "silu"});
  expect_rejected(edited(kQwen25_05B, [](Json& j) { j["model_type"] = "mistral"; }),
                  {"'model_type'", "mistral"});
  expect_rejected(edited(kQwen25_05B, [](Json& j) { j["torch_dtype"] = "float64"; }),
                  {"'torch_dtype'", "float64"});
  expect_rejected(edited(kQwen25_05B, [](Json& j) { j["use_sliding_window"] = true; }),
                  {"'use_sliding_window'"});
  expect_rejected(edited(kTinyLlama, [](Json& j) { j["mlp_bias"] = true; }), {"'mlp_bias'"});
  expect_rejected(edited(kTinyLlama,
                         [](Json& j) {
                           j["quantization_config"] = {{"bits", 4}};
                         }),
                  {"'quantization_config'"});
  expect_rejected(edited(kQwen25_05B, [](Json& j) { j["eos_token_id"] = 151936; }),
                  {"'eos_token_id'", "vocabulary"});
  expect_rejected(edited(kQwen25_05B,
                         [](Json& j) {
                           j["eos_token_id"] = Json::array({1, "x"});
                         }),
                  {"'eos_token_id'"});
  expect_rejected(edited(kQwen25_05B, [](Json& j) { j["bos_token_id"] = -1; }), {"'bos_token_id'"});
  expect_rejected(edited(kQwen25_05B, [](Json& j) { j["architectures"] = "Qwen2ForCausalLM"; }),
                  {"'architectures'"});
  expect_rejected(Json::array(), {"object"});
}

TEST(HfConfig, ToJsonRoundTripsAndValidates) {
  for (const char* text : {kQwen25_05B, kQwen3_06B, kTinyLlama}) {
    ModelConfig c = parse(text);
    Json j = model_config_to_json(c);
    EXPECT_EQ(parse_model_config(j, "round trip"), c) << j.dump();
    EXPECT_EQ(j["model_type"], c.model_type);
    EXPECT_EQ(j["architectures"], Json(c.architectures));
  }
  ModelConfig c = parse(kQwen25_05B);
  c.architectures.clear();
  EXPECT_EQ(model_config_to_json(c)["architectures"], Json::parse(R"(["Qwen2ForCausalLM"])"));
  c.attention_bias = false;  // not expressible for qwen2
  EXPECT_THROW(model_config_to_json(c), Error);
  c = parse(kQwen3_06B);
  c.qk_norm = false;
  EXPECT_THROW(model_config_to_json(c), Error);
}

TEST(HfConfig, LoadNamesTheFile) {
  testing::ScratchDir dir;
  write_file_atomic(dir / "config.json", kQwen3_06B);
  EXPECT_EQ(load_model_config(dir / "config.json").head_dim, 128);
  write_file_atomic(dir / "config.json", R"({"model_type": "qwen2"})");
  try {
    load_model_config(dir / "config.json");
    FAIL() << "accepted";
  } catch (const Error& e) {
    EXPECT_NE(
        std::string(e.what()).find((dir / "config.json").string() + ": missing required field"),
        std::string::npos)
        << e.what();
  }
  write_file_atomic(dir / "config.json", "{\"model_type\": ");
  EXPECT_THROW(load_model_config(dir / "config.json"), Error);
  // A number too large for a double is an error, not an escaping nlohmann exception (found by
  // fuzzing).
  write_file_atomic(dir / "config.json", R"({"model_type": "qwen2", "hidden_size": 1e+600})");
  EXPECT_THROW(load_model_config(dir / "config.json"), Error);
  EXPECT_THROW(load_model_config(dir / "absent.json"), Error);
}

}  // namespace
}  // namespace ajet::hf
