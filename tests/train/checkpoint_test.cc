// Checkpoints: resuming gives bit-identical parameters to an uninterrupted run (full fine-tuning with
// a KL reference, and LoRA with dropout), keep-last pruning, the latest pointer, the caller's blob,
// and errors that name what is missing.
#include "train/checkpoint.h"

#include <gtest/gtest.h>

#include "common/error.h"
#include "config/config.h"
#include "train_test_util.h"

namespace ajet::train {
namespace {

using testing::clone_model;
using testing::random_batch;

std::vector<torch::Tensor> snapshot(Trainer& t) {
  std::vector<torch::Tensor> out;
  for (const auto& item : t.model()->named_parameters(/*recurse=*/true)) out.push_back(item.value().detach().clone());
  return out;
}

void expect_bit_identical(const std::vector<torch::Tensor>& a, const std::vector<torch::Tensor>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) EXPECT_TRUE(torch::equal(a[i], b[i])) << "parameter " << i;
}

void resume_case(TrainerOptions o, const std::string& tag) {
  testing::ScratchDir dir;
  auto base = testing::random_model(testing::qwen2_config(), 11);
  std::vector<Batch> batches;
  for (int i = 0; i < 3; ++i) batches.push_back(random_batch(2, 4, 6, 5, 61, 70 + static_cast<uint64_t>(i)));

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
  TrainerOptions o = testing::test_options();
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
  TrainerOptions o = testing::test_options();
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
  TrainerOptions o = testing::test_options();
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
  for (const auto& e : std::filesystem::directory_iterator(co.base_dir)) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  EXPECT_EQ(names, (std::vector<std::string>{"global_step_2", "global_step_3", "latest"}));  // nothing half-written
  EXPECT_EQ(latest_checkpoint(co.base_dir)->filename(), "global_step_3");
  for (const char* f : {"model/config.json", "model/model.safetensors", "optimizer.safetensors", "trainer_state.json"}) {
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
  TrainerOptions o = testing::test_options();
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
  TrainerOptions lo = o;
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

}  // namespace
}  // namespace ajet::train
