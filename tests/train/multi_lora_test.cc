// Several LoRA adapters on one base in one forward (train/multi_lora.h): a batch whose sequences
// use different adapters gives each sequence what a forward of it alone with its adapter gives
// (float tolerance), slot -1 gives the base model, and a bad routing is refused with a message.
#include "train/multi_lora.h"

#include <ATen/CPUGeneratorImpl.h>
#include <gtest/gtest.h>

#include "common/error.h"
#include "train_test_util.h"

namespace ajet::train {
namespace {

// Both ways a mixed batch runs: every present adapter at once with a mask (few ranks in all), and
// each adapter's rows gathered and added back.
class MultiLoraPaths : public ::testing::TestWithParam<int64_t> {
 protected:
  void SetUp() override { MultiLoraAdapter::masked_max_rank = GetParam(); }
  void TearDown() override { MultiLoraAdapter::masked_max_rank = 128; }
};
INSTANTIATE_TEST_SUITE_P(MultiLora, MultiLoraPaths, ::testing::Values(128, 0));

TEST_P(MultiLoraPaths, MixedBatchEqualsEachSequenceAloneWithItsAdapter) {
  auto m = testing::random_model(testing::qwen2_config(), 1);
  const int64_t B = 6, T = 5;
  torch::Tensor ids = torch::randint(0, m->config().vocab_size, {B, T},
                                     at::make_generator<at::CPUGeneratorImpl>(3), torch::kInt64);
  torch::Tensor positions = torch::arange(T, torch::kInt64).unsqueeze(0).expand({B, T});
  torch::NoGradGuard no_grad;
  const torch::Tensor base = m->forward_logits(ids, positions);

  std::shared_ptr<LoraRouting> routing = attach_multi_lora(m, {"all-linear"});
  train_data::LoraOptions o;
  o.alpha = 8;
  for (int k = 0; k < 3; ++k) {
    o.rank = 2 + 2 * k;  // ranks differ per adapter
    EXPECT_EQ(add_random_adapter(m, o, 10 + uint64_t(k)), k);
  }
  const std::vector<int32_t> seq_slot = {0, 1, 2, -1, 1, 0};
  std::vector<int32_t> rows;
  for (int32_t s : seq_slot) rows.insert(rows.end(), size_t(T), s);
  routing->set(rows);
  const torch::Tensor mixed = m->forward_logits(ids, positions);

  for (int64_t b = 0; b < B; ++b) {
    routing->set_all(seq_slot[size_t(b)]);
    const torch::Tensor alone =
        m->forward_logits(ids.slice(0, b, b + 1), positions.slice(0, b, b + 1));
    EXPECT_TRUE(torch::allclose(mixed.slice(0, b, b + 1), alone, 1e-4, 1e-5)) << "sequence " << b;
    if (seq_slot[size_t(b)] < 0) {
      EXPECT_TRUE(torch::allclose(alone, base.slice(0, b, b + 1), 1e-5, 1e-6));
    } else {
      EXPECT_FALSE(torch::allclose(alone, base.slice(0, b, b + 1), 1e-3, 1e-3))
          << "adapter " << seq_slot[size_t(b)] << " changed nothing";
    }
  }
  // Two adapters differ from each other.
  routing->set_all(0);
  const torch::Tensor a0 = m->forward_logits(ids, positions);
  routing->set_all(1);
  EXPECT_FALSE(torch::allclose(a0, m->forward_logits(ids, positions), 1e-3, 1e-3));

  routing->set({0, 1});  // 2 rows for a batch of 30
  try {
    m->forward_logits(ids, positions);
    ADD_FAILURE() << "a routing of the wrong size was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("the routing has 2 rows, the input 30"), std::string::npos)
        << e.what();
  }
  rows.assign(size_t(B * T), 7);
  rows[0] = 0;
  routing->set(rows);
  EXPECT_THROW(m->forward_logits(ids, positions), Error);  // slot 7 does not exist
}

}  // namespace
}  // namespace ajet::train

namespace ajet::train {
namespace {

// A model sharing the base: the same outputs, the same storage, adapters of its own.
TEST(MultiLora, SharedBaseModelHoldsTheSameWeightsAndItsOwnAdapters) {
  hf::ModelConfig config = testing::qwen2_config();
  config.tie_word_embeddings = true;
  auto m = testing::random_model(config, 1);
  std::shared_ptr<LoraRouting> routing = attach_multi_lora(m, {"all-linear"});
  model::Qwen2Model shared = model::share_base_weights(m);
  auto a = m->hf_named_parameters(), b = shared->hf_named_parameters();
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].first, b[i].first);
    EXPECT_EQ(a[i].second.data_ptr(), b[i].second.data_ptr()) << a[i].first;
  }
  train_data::LoraOptions o;
  o.rank = 2;
  attach_lora(shared, o, 3);
  EXPECT_TRUE(has_lora(shared));
  torch::Tensor ids = torch::arange(6, torch::kInt64).unsqueeze(0);
  torch::NoGradGuard no_grad;
  EXPECT_TRUE(
      torch::allclose(m->forward_logits(ids, ids), shared->forward_logits(ids, ids), 1e-5, 1e-6));
}

}  // namespace
}  // namespace ajet::train
