// The no-grad row kernels (model/row_kernels.h) against the torch-ops forward they replace: RMSNorm
// within float32 rounding of a sum in another order, rotary embeddings bit for bit, at head sizes
// and widths with vector tails, positions that grow the table, and several threads.
#include <gtest/gtest.h>

#include <ATen/CPUGeneratorImpl.h>
#include <torch/torch.h>

#include "model/qwen2.h"
#include "model/row_kernels.h"

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
      EXPECT_LT(((got - expected).abs() / (expected.abs() + 1e-3)).max().item<double>(), 2e-6)
          << "dim " << dim;
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
    EXPECT_TRUE(torch::equal(got, expected))
        << "head_dim " << head_dim << ", max diff " << (got - expected).abs().max().item<double>();
    // The engine's layout: (tokens, heads, D) against (tokens) positions.
    const torch::Tensor flat = rotary.apply(x.view({15, 4, head_dim}), positions.view({15}));
    EXPECT_TRUE(torch::equal(flat, expected.view({15, 4, head_dim})));
  }
}

TEST(RowKernels, SiluProductMatchesTorchOnItsColumnsOnly) {
  const int64_t rows = 3, cols = 45;
  torch::Tensor g = normal({rows, cols}, 5) * 6.0;
  // Large, tiny, zero and signed-zero inputs: sigmoid saturates without overflow.
  g[0][7] = 100.0f, g[0][8] = -100.0f, g[0][9] = 0.0f, g[0][10] = -0.0f, g[0][11] = 1e-8f,
  g[0][12] = -1e-8f;
  g[1][20] = 88.0f, g[1][21] = -88.0f, g[2][30] = 1000.0f, g[2][31] = -1000.0f;
  const torch::Tensor u = normal({rows, cols}, 6);
  const torch::Tensor expected = torch::silu(g) * u;
  // Column ranges with and without 8-wide vectors and tails, written into another tensor and in
  // place.
  for (auto [begin, end] : {std::pair<int64_t, int64_t>{0, 45}, {5, 37}, {40, 45}, {3, 3}}) {
    torch::Tensor y = torch::full({rows, cols}, 55.0f);
    silu_mul_cols_f32(g.data_ptr<float>(), u.data_ptr<float>(), y.data_ptr<float>(), rows, cols,
                      begin, end);
    torch::Tensor in_place = g.clone();
    silu_mul_cols_f32(in_place.data_ptr<float>(), u.data_ptr<float>(), in_place.data_ptr<float>(),
                      rows, cols, begin, end);
    for (int64_t c = 0; c < cols; ++c) {
      const bool inside = c >= begin && c < end;
      for (int64_t r = 0; r < rows; ++r) {
        const float want = expected[r][c].item<float>();
        const float got = y[r][c].item<float>();
        if (inside) {
          EXPECT_NEAR(got, want, 1e-6 * std::abs(want) + 1e-30) << "r " << r << " c " << c;
          EXPECT_EQ(in_place[r][c].item<float>(), got);
        } else {
          EXPECT_EQ(got, 55.0f) << "column " << c << " is outside [" << begin << ", " << end << ")";
          EXPECT_EQ(in_place[r][c].item<float>(), g[r][c].item<float>());
        }
      }
    }
  }
}

TEST(RowKernels, ResidualAddIsTorchAddOnItsColumnsOnly) {
  const torch::Tensor y0 = normal({4, 37}, 7), a = normal({4, 37}, 8);
  torch::Tensor y = y0.clone();
  add_cols_f32(y.data_ptr<float>(), a.data_ptr<float>(), 4, 37, 9, 33);
  torch::Tensor expected = y0.clone();
  expected.narrow(1, 9, 24).copy_(a.narrow(1, 9, 24) + y0.narrow(1, 9, 24));
  EXPECT_TRUE(torch::equal(y, expected));
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
