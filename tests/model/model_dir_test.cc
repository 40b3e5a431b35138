// HF model directory I/O: bit-identical round trips (float32, bfloat16, sharded), dtype conversion
// on load, atomic replacement, and one error naming every missing / extra / mis-shaped tensor.
#include <gtest/gtest.h>

#include "common/error.h"
#include "common/fs.h"
#include "common/json.h"
#include "hf/checkpoint.h"
#include "hf/safetensors.h"
#include "model/model_dir.h"
#include "test_util.h"
#include "torch_util.h"

namespace ajet::model {
namespace {

namespace fs = std::filesystem;
using testing::arange_positions;
using testing::qwen2_config;
using testing::qwen3_config;
using testing::random_model;
using testing::ScratchDir;

void expect_same_parameters(Qwen2Model& a, Qwen2Model& b) {
  auto pa = a->hf_named_parameters(), pb = b->hf_named_parameters();
  ASSERT_EQ(pa.size(), pb.size());
  for (size_t i = 0; i < pa.size(); ++i) {
    EXPECT_EQ(pa[i].first, pb[i].first);
    EXPECT_EQ(pa[i].second.scalar_type(), pb[i].second.scalar_type()) << pa[i].first;
    EXPECT_TRUE(torch::equal(pa[i].second, pb[i].second)) << pa[i].first;
  }
}

torch::Tensor logits_of(Qwen2Model& model) {
  auto ids = torch::tensor({{3, 1, 4, 1, 5, 9, 2, 6}}, torch::kLong);  // (1, 8)
  return model->forward_logits(ids, arange_positions(8));
}

TEST(ModelDir, SaveLoadRoundTripIsBitIdentical) {
  ScratchDir dir;
  testing::write_byte_tokenizer(dir / "tok");
  for (const auto& config : {qwen2_config(), qwen3_config()}) {
    SCOPED_TRACE(config.model_type);
    auto model = random_model(config, 21);
    save_model_dir(model, dir / "m", SaveOptions{dir / "tok"});
    for (const char* f : {"config.json", "model.safetensors", "generation_config.json",
                          "tokenizer.json", "tokenizer_config.json"}) {
      EXPECT_TRUE(fs::exists(dir / "m" / f)) << f;
    }
    auto loaded = load_model_dir(dir / "m");
    expect_same_parameters(model, loaded);
    EXPECT_EQ(loaded->config(), model->config());
    EXPECT_TRUE(torch::equal(logits_of(model), logits_of(loaded)));
    // HF's layout: tied checkpoints carry no lm_head, and the metadata says format "pt".
    auto ckpt = hf::SafetensorsCheckpoint::open(dir / "m");
    EXPECT_EQ(ckpt.find("lm_head.weight").has_value(), !config.tie_word_embeddings);
    EXPECT_EQ(ckpt.files().at(0).metadata().at("format"), "pt");
  }
}

TEST(ModelDir, BFloat16RoundTripAndConversionOnLoad) {
  ScratchDir dir;
  auto model = random_model(qwen2_config(), 22);
  save_model_dir(model, dir / "f32");
  // float32 file loaded as bfloat16 == the float32 parameters rounded to bfloat16.
  auto as_bf16 = load_model_dir(dir / "f32", LoadOptions{torch::kBFloat16});
  auto reference = random_model(qwen2_config(), 22);
  reference->to(torch::kBFloat16);
  expect_same_parameters(reference, as_bf16);
  // bfloat16 is saved as BF16 and reloads bit-identically.
  save_model_dir(as_bf16, dir / "bf16");
  EXPECT_EQ(hf::load_model_config(dir / "bf16" / "config.json").torch_dtype, "bfloat16");
  auto ckpt = hf::SafetensorsCheckpoint::open(dir / "bf16");
  EXPECT_EQ(ckpt.get("model.norm.weight").dtype, hf::DType::kBF16);
  auto again = load_model_dir(dir / "bf16", LoadOptions{torch::kBFloat16});
  expect_same_parameters(as_bf16, again);
}

TEST(ModelDir, ShardedCheckpointLoads) {
  ScratchDir dir;
  auto model = random_model(qwen3_config(), 23);
  save_model_dir(model, dir / "m", SaveOptions{std::nullopt, /*max_shard_bytes=*/20'000});
  ASSERT_TRUE(fs::exists(dir / "m" / "model.safetensors.index.json"));
  EXPECT_FALSE(fs::exists(dir / "m" / "model.safetensors"));
  EXPECT_GT(hf::SafetensorsCheckpoint::open(dir / "m").files().size(), 2u);
  auto loaded = load_model_dir(dir / "m");
  expect_same_parameters(model, loaded);
}

TEST(ModelDir, SaveReplacesAnExistingDirectoryAndLeavesNoTempFiles) {
  ScratchDir dir;
  fs::create_directories(dir / "m");
  testing::write_text(dir / "m" / "stale.bin", "old");
  auto model = random_model(qwen2_config(), 24);
  save_model_dir(model, dir / "m");
  EXPECT_FALSE(fs::exists(dir / "m" / "stale.bin"));
  size_t entries = 0;
  for (const auto& e : fs::directory_iterator(dir.path())) {
    ++entries;
    EXPECT_EQ(e.path().filename(), "m");
  }
  EXPECT_EQ(entries, 1u);
  auto loaded = load_model_dir(dir / "m");
  expect_same_parameters(model, loaded);
}

TEST(ModelDir, MismatchedTensorsAreAllNamedInOneError) {
  ScratchDir dir;
  auto model = random_model(qwen2_config(), 25);
  save_model_dir(model, dir / "m");
  // Rewrite the weights: drop one tensor, add one, and give one a wrong shape.
  std::vector<torch::Tensor> keep;
  std::vector<hf::TensorView> views;
  auto add = [&](const std::string& name, torch::Tensor t) {
    t = t.detach().contiguous();
    keep.push_back(t);
    views.push_back({name,
                     hf::DType::kF32,
                     t.sizes().vec(),
                     {static_cast<const std::byte*>(t.data_ptr()), t.nbytes()}});
  };
  for (auto& [name, p] : model->hf_named_parameters()) {
    if (name == "model.layers.1.mlp.up_proj.weight") continue;  // missing
    if (name == "model.norm.weight") {
      add(name, torch::ones({31}));  // mis-shaped (32)
      continue;
    }
    add(name, p);
  }
  add("model.layers.7.self_attn.q_proj.weight", torch::ones({2, 2}));     // extra
  add("model.layers.0.self_attn.rotary_emb.inv_freq", torch::ones({4}));  // ignored buffer
  hf::write_safetensors(dir / "m" / "model.safetensors", views);

  auto target = random_model(qwen2_config(), 26);
  auto before = logits_of(target);
  try {
    load_weights(target, dir / "m");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(msg.find("3 problems"), std::string::npos) << msg;
    EXPECT_NE(msg.find("missing tensor 'model.layers.1.mlp.up_proj.weight'"), std::string::npos)
        << msg;
    EXPECT_NE(msg.find("unexpected tensor 'model.layers.7.self_attn.q_proj.weight'"),
              std::string::npos)
        << msg;
    EXPECT_NE(msg.find("'model.norm.weight' has shape [31] but the model expects [32]"),
              std::string::npos)
        << msg;
    EXPECT_EQ(msg.find("inv_freq"), std::string::npos) << msg;
    EXPECT_NE(msg.find((dir / "m").string()), std::string::npos) << msg;
  }
  EXPECT_TRUE(torch::equal(before, logits_of(target)));  // nothing was half-loaded
}

TEST(ModelDir, TiedModelAcceptsACheckpointThatCarriesLmHead) {
  ScratchDir dir;
  auto model = random_model(qwen3_config(), 27);
  std::vector<torch::Tensor> keep;
  std::vector<hf::TensorView> views;
  auto params = model->hf_named_parameters();
  params.emplace_back("lm_head.weight", params.front().second);  // as some exporters write it
  for (auto& [name, p] : params) {
    auto t = p.detach().contiguous();
    keep.push_back(t);
    views.push_back({name,
                     hf::DType::kF32,
                     t.sizes().vec(),
                     {static_cast<const std::byte*>(t.data_ptr()), t.nbytes()}});
  }
  fs::create_directories(dir / "m");
  hf::write_safetensors(dir / "m" / "model.safetensors", views);
  write_file_atomic(dir / "m" / "config.json", hf::model_config_to_json(model->config()).dump());
  auto loaded = load_model_dir(dir / "m");
  expect_same_parameters(model, loaded);
}

TEST(ModelDir, MissingPiecesAreNamed) {
  ScratchDir dir;
  try {
    load_model_dir(dir / "nope");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("nope"), std::string::npos);
  }
  fs::create_directories(dir / "empty");
  try {
    load_model_dir(dir / "empty");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("config.json"), std::string::npos);
  }
  auto model = random_model(qwen2_config(), 28);
  EXPECT_THROW(save_model_dir(model, dir / "m", SaveOptions{dir / "no-tokenizer"}), Error);
  EXPECT_FALSE(fs::exists(dir / "m"));
}

}  // namespace
}  // namespace ajet::model
