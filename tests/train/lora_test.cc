// LoRA: only adapters train, a fresh adapter changes nothing, the merged export computes what the
// adapted model computes, PEFT names and config, adapters disabled = the base (the KL reference).
#include "train/lora.h"

#include <gtest/gtest.h>

#include "common/error.h"
#include "common/fs.h"
#include "common/json.h"
#include "hf/safetensors.h"
#include "model/model_dir.h"
#include "model/model_source.h"
#include "train_test_util.h"

namespace ajet::train {
namespace {

using testing::clone_model;
using testing::probe_logits;
using train_data::testing::random_batch;

train_data::LoraOptions lora(int64_t rank, std::vector<std::string> targets = {"all-linear"}) {
  train_data::LoraOptions o;
  o.rank = rank;
  o.alpha = 8;
  o.target_modules = std::move(targets);
  return o;
}

TEST(Lora, ResolvesTargetsLikePeft) {
  EXPECT_EQ(resolve_lora_targets({"all-linear"}).size(), 7u);
  auto qv = resolve_lora_targets({"v_proj", "q_proj"});
  ASSERT_EQ(qv.size(), 2u);
  EXPECT_EQ(qv[0], model::Proj::kQ);
  EXPECT_EQ(qv[1], model::Proj::kV);
  try {
    resolve_lora_targets({"q_proj", "lm_head"});
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'lm_head'"), std::string::npos) << e.what();
  }
}

TEST(Lora, FreshAdaptersChangeNothingAndOnlyThemTrain) {
  auto m = testing::random_model(testing::qwen2_config(), 1);
  auto base = clone_model(m);
  auto before = probe_logits(m);
  train_data::TrainerOptions o = testing::test_options();
  o.lora = lora(4);
  o.optim.lr = 1e-2;
  Trainer trainer(m, o);
  EXPECT_TRUE(torch::equal(probe_logits(m), before));  // B = 0
  auto params = trainer.trainable_parameters();
  EXPECT_EQ(params.size(), static_cast<size_t>(m->num_layers() * 7 * 2));
  for (auto& [name, p] : params) EXPECT_NE(name.find(".lora_"), std::string::npos) << name;
  for (int i = 0; i < 3; ++i)
    trainer.train_step(random_batch(2, 4, 6, 5, 61, 30 + static_cast<uint64_t>(i)));
  auto now = m->hf_named_parameters();
  auto orig = base->hf_named_parameters();
  for (size_t i = 0; i < now.size(); ++i)
    EXPECT_TRUE(torch::equal(now[i].second, orig[i].second)) << now[i].first;
  bool moved = false;
  for (auto& [name, p] : lora_named_parameters(m)) {
    if (name.find("lora_B") != std::string::npos && p.abs().max().item<float>() > 0) moved = true;
  }
  EXPECT_TRUE(moved);
  EXPECT_FALSE(torch::equal(probe_logits(m), before));
  // Disabled adapters are exactly the base model: the KL reference of a LoRA run.
  set_lora_enabled(m, false);
  EXPECT_TRUE(torch::equal(probe_logits(m), probe_logits(base)));
  set_lora_enabled(m, true);
}

TEST(Lora, KlReferenceIsTheBaseModel) {
  auto m = testing::random_model(testing::qwen2_config(), 2);
  train_data::TrainerOptions o = testing::test_options();
  o.lora = lora(2, {"q_proj", "down_proj"});
  o.optim.lr = 5e-2;
  o.loss.use_kl = true;
  o.loss.kl_coef = 0.1;
  o.loss.kl_type = train_data::KlType::kK1;
  Trainer trainer(m, o);
  EXPECT_FALSE(trainer.reference_model().has_value());
  train_data::Batch b = random_batch(2, 4, 6, 5, 61, 40);
  train_data::TrainMetrics first = trainer.train_step(b);
  EXPECT_LT(std::abs(first.kl),
            1e-6);  // adapters start at zero: policy == reference (up to packing order)
  trainer.train_step(b);
  train_data::TrainMetrics third = trainer.train_step(b);
  EXPECT_GT(std::abs(third.kl), 1e-5);
}

TEST(Lora, PeftLayoutAndMergedExport) {
  testing::ScratchDir dir;
  auto m = testing::random_model(testing::qwen2_config(), 3);
  train_data::TrainerOptions o = testing::test_options();
  o.lora = lora(4);
  o.optim.lr = 2e-2;
  Trainer trainer(m, o);
  for (int i = 0; i < 2; ++i)
    trainer.train_step(random_batch(2, 4, 6, 5, 61, 50 + static_cast<uint64_t>(i)));
  auto adapted = probe_logits(m);
  std::vector<torch::Tensor> weights_before;
  for (auto& [name, p] : m->hf_named_parameters()) weights_before.push_back(p.detach().clone());

  // PEFT adapter files.
  save_peft_adapter(m, dir / "adapter", o.lora, "some/base-model");
  auto file = hf::SafetensorsFile::open(dir / "adapter" / "adapter_model.safetensors");
  const auto& c = m->config();
  const hf::TensorInfo* qa =
      file.find("base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight");
  const hf::TensorInfo* qb =
      file.find("base_model.model.model.layers.0.self_attn.q_proj.lora_B.weight");
  const hf::TensorInfo* db =
      file.find("base_model.model.model.layers.1.mlp.down_proj.lora_B.weight");
  ASSERT_TRUE(qa && qb && db);
  EXPECT_EQ(qa->shape, (std::vector<int64_t>{4, c.hidden_size}));
  EXPECT_EQ(qb->shape, (std::vector<int64_t>{c.num_attention_heads * c.head_dim, 4}));
  EXPECT_EQ(db->shape, (std::vector<int64_t>{c.hidden_size, 4}));
  EXPECT_EQ(file.tensors().size(), static_cast<size_t>(c.num_hidden_layers * 7 * 2));
  Json cfg = parse_json(read_file(dir / "adapter" / "adapter_config.json"), "adapter_config.json");
  EXPECT_EQ(cfg["peft_type"], "LORA");
  EXPECT_EQ(cfg["task_type"], "CAUSAL_LM");
  EXPECT_EQ(cfg["r"], 4);
  EXPECT_EQ(cfg["lora_alpha"], 8.0);
  EXPECT_EQ(cfg["lora_dropout"], 0.0);
  EXPECT_EQ(cfg["base_model_name_or_path"], "some/base-model");
  EXPECT_EQ(cfg["target_modules"].size(), 7u);
  train_data::LoraOptions read = read_peft_config(dir / "adapter");
  EXPECT_EQ(read.rank, 4);
  EXPECT_EQ(read.alpha, 8);

  // Loading the adapter into a fresh copy of the base reproduces the adapted model exactly.
  auto fresh = testing::random_model(testing::qwen2_config(), 3);
  attach_lora(fresh, read, 99);
  load_peft_adapter(fresh, dir / "adapter");
  EXPECT_TRUE(torch::equal(probe_logits(fresh), adapted));

  // Merged export: W + (alpha / r) B A in HF layout computes the adapted model's logits.
  save_merged_model(m, dir / "merged", o.lora, "some/base-model");
  EXPECT_TRUE(std::filesystem::exists(dir / "merged" / model::kMergedLoraFile));
  auto merged = model::load_model_dir(dir / "merged");
  EXPECT_LT(testing::relative_difference({probe_logits(merged)}, {adapted}), 1e-5);
  auto after = m->hf_named_parameters();
  for (size_t i = 0; i < after.size(); ++i)
    EXPECT_TRUE(torch::equal(after[i].second, weights_before[i])) << after[i].first;
  auto merged_params = merged->hf_named_parameters();
  for (size_t i = 0; i < merged_params.size(); ++i) {
    if (merged_params[i].first == "model.layers.0.self_attn.q_proj.weight") {
      EXPECT_FALSE(
          torch::equal(merged_params[i].second, weights_before[i]));  // the adapter was merged in
    }
  }

  // A mismatched adapter is refused with the tensor named.
  auto other = testing::random_model(testing::qwen2_config(), 3);
  attach_lora(other, lora(2), 1);
  try {
    load_peft_adapter(other, dir / "adapter");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("wrong shape"), std::string::npos) << e.what();
  }
}

TEST(Lora, DropoutOnlyInTraining) {
  auto m = testing::random_model(testing::qwen2_config(), 4);
  train_data::LoraOptions o = lora(4);
  o.dropout = 0.5;
  attach_lora(m, o, 5);
  {
    torch::NoGradGuard no_grad;
    for (auto& [name, p] : lora_named_parameters(m)) p.normal_(0.0, 0.5);
  }
  m->eval();
  EXPECT_TRUE(torch::equal(probe_logits(m), probe_logits(m)));
  m->train();
  torch::manual_seed(1);
  auto a = probe_logits(m);
  auto b = probe_logits(m);
  EXPECT_FALSE(torch::equal(a, b));
  m->eval();
}

// The masks come from the run's seed, not from the process's default generator: the same seed gives
// the same masks whatever else was drawn before, another seed other masks (same weights).
TEST(Lora, DropoutMasksFollowTheSeed) {
  auto base = testing::random_model(testing::qwen2_config(), 4);
  train_data::LoraOptions o = lora(4);
  o.dropout = 0.5;
  auto with_seed = [&](uint64_t seed) {
    auto m = testing::clone_model(base);
    attach_lora(m, o, seed);
    torch::NoGradGuard no_grad;
    auto gen = at::make_generator<at::CPUGeneratorImpl>(11);
    for (auto& [name, p] : lora_named_parameters(m))
      p.normal_(0.0, 0.5, gen);  // the same weights for every seed
    m->train();
    return m;
  };
  auto a = with_seed(1), b = with_seed(1), c = with_seed(2);
  EXPECT_TRUE(lora_dropout_generator(a).defined());
  torch::manual_seed(3);
  const torch::Tensor la = probe_logits(a);
  torch::rand({1000});  // the default generator moves on
  EXPECT_TRUE(torch::equal(probe_logits(b), la));
  EXPECT_FALSE(torch::equal(probe_logits(c), la));
  EXPECT_FALSE(torch::equal(probe_logits(a), la));  // the next masks
}

}  // namespace
}  // namespace ajet::train

namespace ajet::train {
namespace {

TEST(Lora, CopyParametersMovesWeightsAndAdapters) {
  auto trained = testing::random_model(testing::qwen2_config(), 6);
  attach_lora(trained, lora(2), 1);
  {
    torch::NoGradGuard no_grad;
    for (auto& [name, p] : lora_named_parameters(trained)) p.normal_(0.0, 0.3);
  }
  auto serving = testing::random_model(testing::qwen2_config(), 7);
  attach_lora(serving, lora(2), 2);
  copy_parameters(trained, serving);
  EXPECT_TRUE(torch::equal(probe_logits(serving), probe_logits(trained)));
  auto plain = testing::random_model(testing::qwen2_config(), 7);
  EXPECT_THROW(copy_parameters(trained, plain), Error);  // adapters missing in the target
}

}  // namespace
}  // namespace ajet::train
