// What a "model" directory holds and the line loaders log about it: a plain model, a merged LoRA
// model, a trainer checkpoint, a PEFT adapter over its base (merged while loading, checked against
// W + (alpha / r) B A computed here), and errors that say what was expected.
#include <gtest/gtest.h>
#include <spdlog/sinks/ostream_sink.h>

#include <sstream>

#include "common/error.h"
#include "common/fs.h"
#include "common/json.h"
#include "common/log.h"
#include "hf/safetensors.h"
#include "model/model_dir.h"
#include "model/model_source.h"
#include "test_util.h"
#include "torch_util.h"

namespace ajet::model {
namespace {

namespace fs = std::filesystem;
using testing::random_model;
using testing::ScratchDir;

// Captures what ajet::log() writes at info and above while alive.
class LogCapture {
 public:
  LogCapture() : sink_(std::make_shared<spdlog::sinks::ostream_sink_mt>(out_)) {
    log().sinks().push_back(sink_);
  }
  ~LogCapture() {
    auto& sinks = log().sinks();
    sinks.erase(std::remove(sinks.begin(), sinks.end(), sink_), sinks.end());
  }
  std::string text() const { return out_.str(); }

 private:
  std::ostringstream out_;
  std::shared_ptr<spdlog::sinks::ostream_sink_mt> sink_;
};

hf::TensorView view_of(const std::string& name, const torch::Tensor& t) {
  return hf::TensorView{
      name, hf::DType::kF32, t.sizes().vec(),
      std::span<const std::byte>(static_cast<const std::byte*>(t.data_ptr()), t.nbytes())};
}

// A PEFT adapter on layer 0's q_proj and layer 1's down_proj with random A (r, in) and B (out, r).
struct Adapter {
  torch::Tensor qa, qb, da, db;
};
Adapter write_adapter(Qwen2Model& model, const fs::path& dir, const fs::path& base, int64_t r,
                      double alpha) {
  torch::manual_seed(5);
  const auto& c = model->config();
  const int64_t q_out = c.num_attention_heads * c.head_dim;
  Adapter a{torch::randn({r, c.hidden_size}), torch::randn({q_out, r}),
            torch::randn({r, c.intermediate_size}), torch::randn({c.hidden_size, r})};
  fs::create_directories(dir);
  hf::write_safetensors(
      dir / "adapter_model.safetensors",
      {view_of("base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight", a.qa),
       view_of("base_model.model.model.layers.0.self_attn.q_proj.lora_B.weight", a.qb),
       view_of("base_model.model.model.layers.1.mlp.down_proj.lora_A.weight", a.da),
       view_of("base_model.model.model.layers.1.mlp.down_proj.lora_B.weight", a.db)});
  Json config = {{"peft_type", "LORA"},
                 {"base_model_name_or_path", base.string()},
                 {"r", r},
                 {"lora_alpha", alpha},
                 {"target_modules", {"q_proj", "down_proj"}}};
  write_file_atomic(dir / "adapter_config.json", config.dump(2));
  return a;
}

torch::Tensor weight(Qwen2Model& m, const std::string& name) {
  for (auto& [n, p] : m->hf_named_parameters()) {
    if (n == name) return p.detach();
  }
  ADD_FAILURE() << name;
  return {};
}

TEST(ModelSource, PlainMergedAndCheckpointDirectoriesSayWhatTheyAre) {
  ScratchDir dir;
  testing::write_byte_tokenizer(dir / "tok");
  auto model = random_model(testing::qwen2_config(), 41);
  save_model_dir(model, dir / "plain", SaveOptions{dir / "tok"});
  SaveOptions merged;
  merged.tokenizer_dir = dir / "tok";
  merged.extra_files.emplace_back(
      kMergedLoraFile,
      Json{{"base_model_name_or_path", "/models/base"}, {"r", 4}, {"lora_alpha", 8}}.dump());
  save_model_dir(model, dir / "ckpt" / "global_step_3" / "model", merged);
  write_file_atomic(dir / "ckpt" / "global_step_3" / "trainer_state.json",
                    Json{{"lora", true}}.dump());

  EXPECT_EQ(resolve_model_source(dir / "plain").description, "model " + (dir / "plain").string());
  {
    LogCapture log;
    load_model_dir(dir / "ckpt" / "global_step_3" / "model");
    EXPECT_NE(log.text().find("loaded merged model " +
                              (dir / "ckpt" / "global_step_3" / "model").string() +
                              " (base /models/base + LoRA r=4, alpha 8"),
              std::string::npos)
        << log.text();
  }
  {
    LogCapture log;  // the checkpoint directory itself means its model/
    load_model_dir(dir / "ckpt" / "global_step_3");
    EXPECT_NE(log.text().find("loaded merged model"), std::string::npos) << log.text();
  }
  {
    LogCapture log;
    load_model_dir(dir / "plain");
    EXPECT_NE(log.text().find("loaded model " + (dir / "plain").string()), std::string::npos)
        << log.text();
  }
  fs::create_directories(dir / "empty");
  try {
    resolve_model_source(dir / "empty");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("no config.json"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("adapter_config.json"), std::string::npos) << e.what();
  }
}

TEST(ModelSource, PeftAdapterIsMergedIntoItsBaseAsWPlusScaleBA) {
  ScratchDir dir;
  testing::write_byte_tokenizer(dir / "tok");
  auto base = random_model(testing::qwen2_config(), 42);
  save_model_dir(base, dir / "base", SaveOptions{dir / "tok"});
  const Adapter a = write_adapter(base, dir / "adapter", dir / "base", 2, 6.0);

  const ModelSource source = resolve_model_source(dir / "adapter");
  EXPECT_EQ(source.weights, dir / "base");
  EXPECT_EQ(source.tokenizer_dir, dir / "base");  // the adapter has none
  LogCapture log;
  auto merged = load_model_dir(dir / "adapter");
  EXPECT_NE(log.text().find("loaded base model " + (dir / "base").string() + " + adapter " +
                            (dir / "adapter").string()),
            std::string::npos)
      << log.text();
  const double scale = 6.0 / 2;
  auto q =
      weight(base, "model.layers.0.self_attn.q_proj.weight") + scale * torch::matmul(a.qb, a.qa);
  auto d = weight(base, "model.layers.1.mlp.down_proj.weight") + scale * torch::matmul(a.db, a.da);
  EXPECT_TRUE(
      torch::allclose(weight(merged, "model.layers.0.self_attn.q_proj.weight"), q, 1e-5, 1e-5));
  EXPECT_TRUE(
      torch::allclose(weight(merged, "model.layers.1.mlp.down_proj.weight"), d, 1e-5, 1e-5));
  EXPECT_TRUE(torch::equal(weight(merged, "model.layers.0.self_attn.k_proj.weight"),
                           weight(base, "model.layers.0.self_attn.k_proj.weight")));

  // An adapter for another shape is refused with the module named, and the model is unchanged.
  auto other = random_model(testing::qwen3_config(), 43);
  auto before = weight(other, "model.layers.0.self_attn.q_proj.weight").clone();
  try {
    merge_peft_adapter(other, dir / "adapter");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("model.layers"), std::string::npos) << e.what();
  }
  EXPECT_TRUE(torch::equal(weight(other, "model.layers.0.self_attn.q_proj.weight"), before));
}

}  // namespace
}  // namespace ajet::model
