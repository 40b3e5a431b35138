// Checkpoints: resuming gives bit-identical parameters to an uninterrupted run (full fine-tuning
// with a KL reference, and LoRA with dropout), keep-last pruning, the latest pointer, the caller's
// blob, errors that name what is missing, and a LoRA checkpoint's model/ = the merged model (issue
// 13).
#include "train/checkpoint.h"

#include <gtest/gtest.h>

#include "common/error.h"
#include "common/fs.h"
#include "common/json.h"
#include "config/config.h"
#include "model/model_dir.h"
#include "model/model_source.h"
#include "train/lora.h"
#include "train_test_util.h"

namespace ajet::train {
namespace {

using testing::clone_model;
using testing::probe_logits;
using train_data::testing::random_batch;

std::vector<torch::Tensor> snapshot(Trainer& t) {
  std::vector<torch::Tensor> out;
  for (const auto& item : t.model()->named_parameters(/*recurse=*/true))
    out.push_back(item.value().detach().clone());
  return out;
}

void expect_bit_identical(const std::vector<torch::Tensor>& a,
                          const std::vector<torch::Tensor>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) EXPECT_TRUE(torch::equal(a[i], b[i])) << "parameter " << i;
}

void resume_case(train_data::TrainerOptions o, const std::string& tag) {
  testing::ScratchDir dir;
  auto base = testing::random_model(testing::qwen2_config(), 11);
  std::vector<train_data::Batch> batches;
  for (int i = 0; i < 3; ++i)
    batches.push_back(random_batch(2, 4, 6, 5, 61, 70 + static_cast<uint64_t>(i)));

  Trainer a(clone_model(base), o);
  a.train_step(batches[0]);
  a.train_step(batches[1]);
  CheckpointOptions co;
  co.base_dir = dir / "ckpt";
  const auto saved = save_checkpoint(a, co, Json{{"cursor", 17}});
  EXPECT_EQ(saved.filename(), "global_step_2");
  a.train_step(batches[2]);
  auto uninterrupted = snapshot(a);

  Trainer b(clone_model(base), o);  // a fresh process would start from the same config
  LoadedCheckpoint loaded = load_checkpoint(b, *latest_checkpoint(co.base_dir));
  EXPECT_EQ(loaded.user, (Json{{"cursor", 17}}));
  EXPECT_EQ(loaded.policy_version, 2);
  EXPECT_EQ(loaded.global_step, 2 * o.mini_batch_num * o.ppo_epochs);
  EXPECT_EQ(b.global_step(), loaded.global_step);
  b.train_step(batches[2]);
  SCOPED_TRACE(tag);
  expect_bit_identical(snapshot(b), uninterrupted);
  auto sa = a.state(), sb = b.state();
  ASSERT_EQ(sa.optimizer.size(), sb.optimizer.size());
  for (size_t i = 0; i < sa.optimizer.size(); ++i) {
    EXPECT_EQ(sa.optimizer[i].step, sb.optimizer[i].step);
    EXPECT_TRUE(torch::equal(sa.optimizer[i].exp_avg_sq, sb.optimizer[i].exp_avg_sq));
  }
  EXPECT_EQ(sa.shuffle_rng, sb.shuffle_rng);
}

TEST(Checkpoint, ResumeIsBitIdenticalFullFineTuning) {
  train_data::TrainerOptions o = testing::test_options();
  o.loss.use_kl = true;  // the reference must be the run's initial weights, not the checkpoint's
  o.loss.kl_coef = 0.1;
  o.mini_batch_num = 2;  // shuffling: the RNG state matters
  o.optim.warmup_steps = 2;
  o.optim.cosine = true;
  o.optim.total_steps = 12;
  o.optim.grad_clip = 1.0;
  resume_case(o, "full");
}

TEST(Checkpoint, ResumeIsBitIdenticalLoraWithDropout) {
  train_data::TrainerOptions o = testing::test_options();
  o.lora.rank = 4;
  o.lora.dropout = 0.2;  // the torch generator state matters
  o.optim.lr = 1e-2;
  o.loss.use_kl = true;
  o.loss.kl_coef = 0.1;
  o.ppo_epochs = 2;
  resume_case(o, "lora");
}

TEST(Checkpoint, KeepsTheNewestAndPointsAtTheLatest) {
  testing::ScratchDir dir;
  train_data::TrainerOptions o = testing::test_options();
  Trainer t(testing::random_model(testing::qwen2_config(), 12), o);
  CheckpointOptions co;
  co.base_dir = dir / "ckpt";
  co.keep_last = 2;
  EXPECT_FALSE(latest_checkpoint(co.base_dir).has_value());
  for (int i = 0; i < 3; ++i) {
    t.train_step(random_batch(1, 3, 4, 3, 61, 80 + static_cast<uint64_t>(i)));
    save_checkpoint(t, co, Json{{"i", i}});
  }
  std::vector<std::string> names;
  for (const auto& e : std::filesystem::directory_iterator(co.base_dir))
    names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  EXPECT_EQ(names, (std::vector<std::string>{"global_step_2", "global_step_3",
                                             "latest"}));  // nothing half-written
  EXPECT_EQ(latest_checkpoint(co.base_dir)->filename(), "global_step_3");
  for (const char* f : {"model/config.json", "model/model.safetensors", "optimizer.safetensors",
                        "trainer_state.json"}) {
    EXPECT_TRUE(std::filesystem::exists(co.base_dir / "global_step_3" / f)) << f;
  }
  config::Config c;
  c.trainer_common.checkpoint_base_dir = "/x/ckpt";
  c.trainer_common.max_checkpoints_to_keep = 5;
  c.model.path = "/models/base";
  CheckpointOptions from = CheckpointOptions::from_config(c);
  EXPECT_EQ(from.base_dir, "/x/ckpt");
  EXPECT_EQ(from.keep_last, 5);
  EXPECT_EQ(from.base_model_name_or_path, "/models/base");
  EXPECT_TRUE(checkpoint_due(20, 40));
  EXPECT_FALSE(checkpoint_due(20, 41));
  EXPECT_FALSE(checkpoint_due(0, 40));
}

TEST(Checkpoint, LoadErrorsNameWhatIsWrong) {
  testing::ScratchDir dir;
  train_data::TrainerOptions o = testing::test_options();
  Trainer t(testing::random_model(testing::qwen2_config(), 13), o);
  t.train_step(random_batch(1, 3, 4, 3, 61, 90));
  CheckpointOptions co;
  co.base_dir = dir / "ckpt";
  auto path = save_checkpoint(t, co);
  std::filesystem::remove(path / "optimizer.safetensors");
  try {
    load_checkpoint(t, path);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("optimizer.safetensors"), std::string::npos) << e.what();
  }
  train_data::TrainerOptions lo = o;
  lo.lora.rank = 2;
  Trainer lt(testing::random_model(testing::qwen2_config(), 13), lo);
  try {
    load_checkpoint(lt, save_checkpoint(t, co));
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("without LoRA"), std::string::npos) << e.what();
  }
  EXPECT_THROW(load_checkpoint(t, dir / "nope"), Error);
}

torch::Tensor weight(model::Qwen2Model& m, const std::string& name) {
  for (auto& [n, p] : m->hf_named_parameters()) {
    if (n == name) return p.detach();
  }
  ADD_FAILURE() << name;
  return {};
}

bool starts_with(const std::string& s, const std::string& prefix) {
  return s.rfind(prefix, 0) == 0;
}

TEST(Checkpoint, LoraModelDirIsTheMergedModel) {
  testing::ScratchDir dir;
  model::testing::write_byte_tokenizer(dir / "tok");
  auto base = testing::random_model(testing::qwen2_config(), 14);
  model::save_model_dir(base, dir / "base");
  train_data::TrainerOptions o = testing::test_options();
  o.lora.rank = 4;
  o.lora.alpha = 8;
  o.optim.lr = 2e-2;
  Trainer t(clone_model(base), o);
  for (int i = 0; i < 2; ++i)
    t.train_step(random_batch(2, 4, 6, 5, 61, 100 + static_cast<uint64_t>(i)));
  CheckpointOptions co;
  co.base_dir = dir / "ckpt";
  co.tokenizer_dir = dir / "tok";
  co.base_model_name_or_path = (dir / "base").string();
  const auto path = save_checkpoint(t, co);
  for (const char* f : {"model/config.json", "model/model.safetensors", "model/tokenizer.json",
                        "model/ajet_merged_lora.json", "adapter/adapter_model.safetensors",
                        "adapter/adapter_config.json"}) {
    EXPECT_TRUE(std::filesystem::exists(path / f)) << f;
  }

  // model/ computes what base + adapter computes, and is not the base.
  const auto adapted = probe_logits(t.model());
  auto merged = model::load_model_dir(path / "model");
  EXPECT_LT(testing::relative_difference({probe_logits(merged)}, {adapted}), 1e-5);
  EXPECT_GT(testing::relative_difference({probe_logits(merged)}, {probe_logits(base)}), 1e-3);
  EXPECT_FALSE(torch::equal(weight(merged, "model.layers.0.self_attn.q_proj.weight"),
                            weight(base, "model.layers.0.self_attn.q_proj.weight")));
  EXPECT_TRUE(
      starts_with(model::resolve_model_source(path / "model").description, "merged model "));
  // adapter/ over its base (adapter_config.json's base_model_name_or_path) is the same model.
  auto via_adapter = model::load_model_dir(path / "adapter");
  EXPECT_LT(testing::relative_difference({probe_logits(via_adapter)}, {adapted}), 1e-5);
  EXPECT_TRUE(starts_with(model::resolve_model_source(path / "adapter").description,
                          "base model " + (dir / "base").string() + " + adapter "));

  // Resuming keeps the trainer's base (same fingerprint) and loads the adapter: bit for bit.
  Trainer resumed(clone_model(base), o);
  const LoadedCheckpoint loaded = load_checkpoint(resumed, path);
  EXPECT_TRUE(starts_with(loaded.weights, "base model (the trainer's")) << loaded.weights;
  EXPECT_TRUE(torch::equal(probe_logits(resumed.model()), adapted));
  // A trainer started on the merged model/ instead of the base is refused: the adapter would count
  // twice.
  Trainer on_merged(model::load_model_dir(path / "model"), o);
  try {
    load_checkpoint(on_merged, path);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("fingerprint"), std::string::npos) << e.what();
  }

  // A checkpoint written before merged export (model/ = the base, no "lora_base"): loaders merge
  // its adapter in and say so; resuming reads model/ as the base.
  model::save_model_dir(base, path / "model", model::SaveOptions{dir / "tok"});
  Json state = parse_json(read_file(path / "trainer_state.json"), "trainer_state.json");
  state.erase("lora_base");
  write_file_atomic(path / "trainer_state.json", state.dump(1));
  EXPECT_TRUE(starts_with(model::resolve_model_source(path / "model").description,
                          "base model " + (path / "model").string() + " + adapter "));
  auto old_layout = model::load_model_dir(path / "model");
  EXPECT_LT(testing::relative_difference({probe_logits(old_layout)}, {adapted}), 1e-5);
  Trainer old(testing::random_model(testing::qwen2_config(), 99), o);
  EXPECT_TRUE(
      starts_with(load_checkpoint(old, path).weights, "base model " + (path / "model").string()));
  EXPECT_TRUE(torch::equal(probe_logits(old.model()), adapted));
}

}  // namespace
}  // namespace ajet::train
