// The no-grad row kernels (model/row_kernels.h) against the torch-ops forward they replace: RMSNorm
// within float32 rounding of a sum in another order, rotary embeddings bit for bit, at head sizes and
// widths with vector tails, positions that grow the table, and several threads.
#include <gtest/gtest.h>

#include <ATen/CPUGeneratorImpl.h>
#include <torch/torch.h>

#include "model/qwen2.h"

namespace ajet::model {
namespace {

torch::Tensor normal(std::vector<int64_t> shape, uint64_t seed) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  return torch::randn(shape, gen);
}

class RowKernelThreads : public ::testing::Test {
 protected:
  void SetUp() override {
    before_ = at::get_num_threads();
    at::set_num_threads(2);
  }
  void TearDown() override { at::set_num_threads(before_); }
  int before_ = 1;
};

TEST_F(RowKernelThreads, RmsNormMatchesTheTorchOpsForward) {
  for (int64_t dim : {1, 3, 17, 128, 896}) {
    RMSNorm norm(dim, 1e-6);
    {
      torch::NoGradGuard init;
      norm->weight.copy_(normal({dim}, 1) * 0.5 + 1.0);
    }
    for (std::vector<int64_t> shape : {std::vector<int64_t>{1, dim}, {7, dim}, {3, 70, dim}}) {
      const torch::Tensor x = normal(shape, 2) * 3.0;
      torch::Tensor expected;
      {
        torch::AutoGradMode grad(true);
        expected = norm->forward(x).detach();
      }
      torch::NoGradGuard no_grad;
      const torch::Tensor got = norm->forward(x);
      ASSERT_EQ(got.sizes(), expected.sizes());
      EXPECT_LT(((got - expected).abs() / (expected.abs() + 1e-3)).max().item<double>(), 2e-6) << "dim " << dim;
    }
  }
}

TEST_F(RowKernelThreads, RotaryIsBitForBitTheTorchOpsForward) {
  for (int64_t head_dim : {2, 6, 64, 128}) {
    Rotary rotary(head_dim, 10000.0, 16);  // 16 rows at first: the positions below grow the table
    auto gen = at::make_generator<at::CPUGeneratorImpl>(3);
    const torch::Tensor positions = torch::randint(0, 300, {3, 5}, gen, torch::kLong);
    const torch::Tensor x = normal({3, 5, 4, head_dim}, 4);
    torch::Tensor expected;
    {
      torch::AutoGradMode grad(true);
      expected = rotary.apply(x, positions);
    }
    torch::NoGradGuard no_grad;
    const torch::Tensor got = rotary.apply(x, positions);
    EXPECT_TRUE(torch::equal(got, expected)) << "head_dim " << head_dim << ", max diff "
                                             << (got - expected).abs().max().item<double>();
    // The engine's layout: (tokens, heads, D) against (tokens) positions.
    const torch::Tensor flat = rotary.apply(x.view({15, 4, head_dim}), positions.view({15}));
    EXPECT_TRUE(torch::equal(flat, expected.view({15, 4, head_dim})));
  }
}

TEST_F(RowKernelThreads, RotaryRefusesNegativePositionsOnBothPaths) {
  Rotary rotary(8, 10000.0, 16);
  const torch::Tensor x = normal({2, 1, 8}, 5);
  const torch::Tensor positions = torch::tensor({3, -1}, torch::kLong);
  EXPECT_THROW(rotary.apply(x, positions), std::exception);
  torch::NoGradGuard no_grad;
  EXPECT_THROW(rotary.apply(x, positions), std::exception);
}

}  // namespace
}  // namespace ajet::model
