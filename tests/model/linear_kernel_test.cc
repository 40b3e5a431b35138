// The small-row linear kernel (model/linear_kernel.h) against torch's linear: every row and column tail
// of its tiles (rows not a multiple of 3, columns not a multiple of 8, K not a multiple of 16), with
// and without bias, a column sub-range, and the decoder's no-grad path that dispatches to it.
#include <gtest/gtest.h>

#include <ATen/CPUGeneratorImpl.h>
#include <torch/torch.h>

#include "model/compute.h"
#include "model/linear_kernel.h"
#include "model/qwen2.h"
#include "torch_util.h"

namespace ajet::model {
namespace {

// float32 sums of up to ~1,500 products of unit normals, in another order than BLAS.
constexpr double kKernelTol = 2e-4;

torch::Tensor kernel_normal(std::vector<int64_t> shape, uint64_t seed) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  return torch::randn(shape, gen);
}

// The decode kernels split their work with at::parallel_for; built without OpenMP that runs on one
// thread whatever the thread count (the engine's own kernels did, until 2026-12-04).
TEST(LinearKernel, ParallelLoopsOfThisBuildUseEveryThread) {
  const int before = at::get_num_threads();
  at::set_num_threads(2);
  EXPECT_EQ(own_parallel_for_threads(64), 2);
  at::set_num_threads(before);
}

TEST(LinearKernel, MatchesTorchLinearOnEveryTileTail) {
  for (int64_t m : {1, 2, 3, 4, 5, 64, 67}) {
    for (int64_t n : {1, 7, 8, 13, 64}) {
      for (int64_t k : {5, 16, 40, 512}) {
        for (bool with_bias : {false, true}) {
          const torch::Tensor x = kernel_normal({m, k}, 1), w = kernel_normal({n, k}, 2);
          const torch::Tensor bias = with_bias ? kernel_normal({n}, 3) : torch::Tensor();
          torch::Tensor y = torch::full({m, n}, 123.0f);
          linear_rows_f32(x.data_ptr<float>(), w.data_ptr<float>(), with_bias ? bias.data_ptr<float>() : nullptr,
                          y.data_ptr<float>(), m, n, k, 0, n);
          const torch::Tensor expected = torch::nn::functional::linear(x, w, bias);
          EXPECT_LT((y - expected).abs().max().item<double>(), kKernelTol)
              << "m " << m << " n " << n << " k " << k << " bias " << with_bias;
        }
      }
    }
  }
}

TEST(LinearKernel, WritesOnlyItsColumnRange) {
  const int64_t m = 5, n = 24, k = 32;
  const torch::Tensor x = kernel_normal({m, k}, 4), w = kernel_normal({n, k}, 5);
  torch::Tensor y = torch::full({m, n}, 7.0f);
  linear_rows_f32(x.data_ptr<float>(), w.data_ptr<float>(), nullptr, y.data_ptr<float>(), m, n, k, 8, 16);
  const torch::Tensor expected = torch::nn::functional::linear(x, w);
  EXPECT_LT((y.narrow(1, 8, 8) - expected.narrow(1, 8, 8)).abs().max().item<double>(), kKernelTol);
  EXPECT_TRUE(torch::all(y.narrow(1, 0, 8) == 7.0f).item<bool>());
  EXPECT_TRUE(torch::all(y.narrow(1, 16, 8) == 7.0f).item<bool>());
}

// The decoder takes the kernel for no-grad batches of a few rows: the logits must equal the grad-mode
// (torch linear) forward of the same model.
TEST(LinearKernel, NoGradForwardOfFewRowsMatchesTheGradForward) {
  Qwen2Model model = testing::random_model(testing::qwen2_config(), 11);
  const torch::Tensor ids = torch::randint(model->config().vocab_size, {3, 5}, torch::kLong);  // 15 rows
  const torch::Tensor positions = testing::arange_positions(5).expand({3, 5}).contiguous();
  const torch::Tensor with_grad = model->forward_logits(ids, positions).detach();
  torch::NoGradGuard no_grad;
  const torch::Tensor without = model->forward_logits(ids, positions);
  EXPECT_LT((without - with_grad).abs().max().item<double>(), kKernelTol);
}

}  // namespace
}  // namespace ajet::model
