// The small-row and packed linear kernels (model/linear_kernel.h) against torch's linear: every row
// and column tail of their tiles, with and without bias, a column (panel) sub-range, the packed
// copy following in-place weight updates, and the decoder's no-grad path that dispatches to them.
#include <gtest/gtest.h>

#include <ATen/CPUGeneratorImpl.h>
#include <torch/torch.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <thread>

#include "model/compute.h"
#include "model/linear_kernel.h"
#include "model/parallel.h"
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

// Every index once, whole ranges in [0, n), and `then` either -1 or the end of its range (the
// owner's next chunk), for one, two (halves with stealing) and three threads (the static split).
TEST(ParallelForStealing, RunsEveryIndexOnceWithHintsInRange) {
  const int before = at::get_num_threads();
  for (int threads : {1, 2, 3}) {
    at::set_num_threads(threads);
    for (int64_t n : {1, 2, 7, 64, 257}) {
      for (int64_t grain : {1, 16}) {
        for (int64_t chunk : {1, 3, 4}) {
          std::vector<std::atomic<int>> runs(static_cast<size_t>(n));
          std::atomic<int> bad{0};
          parallel_for_stealing(n, grain, chunk, [&](int64_t begin, int64_t end, int64_t then) {
            if (begin < 0 || end > n || begin >= end || (then != -1 && then != end)) ++bad;
            for (int64_t i = std::max<int64_t>(begin, 0); i < std::min(end, n); ++i)
              ++runs[static_cast<size_t>(i)];
          });
          EXPECT_EQ(bad.load(), 0)
              << threads << " threads, n " << n << ", grain " << grain << ", chunk " << chunk;
          for (int64_t i = 0; i < n; ++i) {
            EXPECT_EQ(runs[static_cast<size_t>(i)].load(), 1)
                << "index " << i << ": " << threads << " threads, n " << n << ", grain " << grain
                << ", chunk " << chunk;
          }
        }
      }
    }
  }
  at::set_num_threads(before);
}

// With two threads, the one done first takes chunks from the back of the other's half: here the
// first half's first chunk waits until an index of the first half has run on another thread (or 60
// s pass, which fails the test). Every index still runs once.
TEST(ParallelForStealing, TheThreadDoneFirstTakesTheOthersTail) {
  const int before = at::get_num_threads();
  at::set_num_threads(2);
  const int64_t n = 40;
  std::vector<std::atomic<int>> runs(static_cast<size_t>(n));
  std::atomic<bool> stolen{false};
  std::mutex mu;
  std::thread::id owner_of_zero;
  parallel_for_stealing(n, 1, 2, [&](int64_t begin, int64_t end, int64_t) {
    if (begin == 0) {
      {
        std::lock_guard lock(mu);
        owner_of_zero = std::this_thread::get_id();
      }
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
      while (!stolen.load() && std::chrono::steady_clock::now() < deadline)
        std::this_thread::yield();
    } else if (end <= n / 2) {
      std::lock_guard lock(mu);
      if (std::this_thread::get_id() != owner_of_zero) stolen = true;
    }
    for (int64_t i = begin; i < end; ++i) ++runs[static_cast<size_t>(i)];
  });
  EXPECT_TRUE(stolen.load());
  for (int64_t i = 0; i < n; ++i)
    EXPECT_EQ(runs[static_cast<size_t>(i)].load(), 1) << "index " << i;
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
          linear_rows_f32(x.data_ptr<float>(), w.data_ptr<float>(),
                          with_bias ? bias.data_ptr<float>() : nullptr, y.data_ptr<float>(), m, n,
                          k, 0, n);
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
  linear_rows_f32(x.data_ptr<float>(), w.data_ptr<float>(), nullptr, y.data_ptr<float>(), m, n, k,
                  8, 16);
  const torch::Tensor expected = torch::nn::functional::linear(x, w);
  EXPECT_LT((y.narrow(1, 8, 8) - expected.narrow(1, 8, 8)).abs().max().item<double>(), kKernelTol);
  EXPECT_TRUE(torch::all(y.narrow(1, 0, 8) == 7.0f).item<bool>());
  EXPECT_TRUE(torch::all(y.narrow(1, 16, 8) == 7.0f).item<bool>());
}

TEST(PackedLinearKernel, MatchesTorchLinearOnEveryTileAndPanelTail) {
  // Rows: below, at and past the 12- and 3-row tiles; columns: partial, whole and several panels.
  for (int64_t m : {1, 2, 3, 4, 5, 11, 12, 13, 25, 64, 67}) {
    for (int64_t n : {1, 7, 31, 32, 33, 100}) {
      for (int64_t k : {1, 5, 16, 40, 512}) {
        for (bool with_bias : {false, true}) {
          const torch::Tensor x = kernel_normal({m, k}, 1), w = kernel_normal({n, k}, 2);
          const torch::Tensor bias = with_bias ? kernel_normal({n}, 3) : torch::Tensor();
          torch::Tensor packed = torch::full({packed_floats(n, k)}, 55.0f);
          pack_weight_f32(w.data_ptr<float>(), n, k, packed.data_ptr<float>());
          torch::Tensor y = torch::full({m, n}, 123.0f);
          linear_packed_f32(x.data_ptr<float>(), packed.data_ptr<float>(),
                            with_bias ? bias.data_ptr<float>() : nullptr, y.data_ptr<float>(), m, n,
                            k, 0, packed_panels(n));
          const torch::Tensor expected = torch::nn::functional::linear(x, w, bias);
          EXPECT_LT((y - expected).abs().max().item<double>(), kKernelTol)
              << "m " << m << " n " << n << " k " << k << " bias " << with_bias;
        }
      }
    }
  }
}

// Rows past the kernel's L2 row block (256 KB of input): every block is computed.
TEST(PackedLinearKernel, CoversEveryRowBlock) {
  const int64_t m = 300, n = 40, k = 384;  // blocks of 168 rows at K = 384
  const torch::Tensor x = kernel_normal({m, k}, 6), w = kernel_normal({n, k}, 7);
  torch::Tensor packed = torch::empty({packed_floats(n, k)});
  pack_weight_f32(w.data_ptr<float>(), n, k, packed.data_ptr<float>());
  torch::Tensor y = torch::full({m, n}, 9.0f);
  linear_packed_f32(x.data_ptr<float>(), packed.data_ptr<float>(), nullptr, y.data_ptr<float>(), m,
                    n, k, 0, 2);
  EXPECT_LT((y - torch::nn::functional::linear(x, w)).abs().max().item<double>(), kKernelTol);
}

TEST(PackedLinearKernel, WritesOnlyItsPanels) {
  const int64_t m = 5, n = 96, k = 32;
  const torch::Tensor x = kernel_normal({m, k}, 4), w = kernel_normal({n, k}, 5);
  torch::Tensor packed = torch::empty({packed_floats(n, k)});
  pack_weight_f32(w.data_ptr<float>(), n, k, packed.data_ptr<float>());
  torch::Tensor y = torch::full({m, n}, 7.0f);
  linear_packed_f32(x.data_ptr<float>(), packed.data_ptr<float>(), nullptr, y.data_ptr<float>(), m,
                    n, k, 1, 2);
  const torch::Tensor expected = torch::nn::functional::linear(x, w);
  EXPECT_LT((y.narrow(1, 32, 32) - expected.narrow(1, 32, 32)).abs().max().item<double>(),
            kKernelTol);
  EXPECT_TRUE(torch::all(y.narrow(1, 0, 32) == 7.0f).item<bool>());
  EXPECT_TRUE(torch::all(y.narrow(1, 64, 32) == 7.0f).item<bool>());
}

// The packed copy follows its weight: an in-place update (what an optimizer step or a weight sync
// does) and a new tensor both make linear_forward use the new values, never the stale copy.
TEST(PackedLinearKernel, PackedWeightFollowsInPlaceUpdatesAndNewTensors) {
  torch::NoGradGuard no_grad;
  PackedWeight packed;
  const torch::Tensor x = kernel_normal({16, 48}, 8);
  torch::Tensor w = kernel_normal({40, 48}, 9);
  auto check = [&](const char* when) {
    const torch::Tensor y = linear_forward(x, w, torch::Tensor(), &packed);
    EXPECT_LT((y - torch::nn::functional::linear(x, w)).abs().max().item<double>(), kKernelTol)
        << when;
  };
  check("first use");
  w.add_(1.0);
  check("after add_");
  w.copy_(kernel_normal({40, 48}, 10));
  check("after copy_");
  w = kernel_normal({40, 48}, 11);
  check("a new tensor");
  w = kernel_normal({24, 48}, 12);
  check("a new shape");
}

// The decoder takes the kernels for no-grad batches (packed weights, or the small-row kernel with
// packing off): the logits must equal the grad-mode (torch linear) forward of the same model, and a
// training step's in-place update must reach the next no-grad forward.
TEST(LinearKernel, NoGradForwardMatchesTheGradForward) {
  Qwen2Model model = testing::random_model(testing::qwen2_config(), 11);
  for (int64_t t : {5, 40}) {  // 15 and 120 rows
    for (bool packing : {true, false}) {
      for (int64_t i = 0; i < model->num_layers(); ++i)
        model->layer(i)->set_weight_packing(packing);
      const torch::Tensor ids = torch::randint(model->config().vocab_size, {3, t}, torch::kLong);
      const torch::Tensor positions = testing::arange_positions(t).expand({3, t}).contiguous();
      const torch::Tensor with_grad = model->forward_logits(ids, positions).detach();
      torch::NoGradGuard no_grad;
      const torch::Tensor without = model->forward_logits(ids, positions);
      EXPECT_LT((without - with_grad).abs().max().item<double>(), kKernelTol)
          << t << " tokens, packing " << packing;
    }
  }
  const torch::Tensor ids = torch::randint(model->config().vocab_size, {3, 5}, torch::kLong);
  const torch::Tensor positions = testing::arange_positions(5).expand({3, 5}).contiguous();
  for (int64_t i = 0; i < model->num_layers(); ++i) model->layer(i)->set_weight_packing(true);
  {
    torch::NoGradGuard no_grad;
    (void)model->forward_logits(ids, positions);  // packs every weight
    for (auto& p : model->parameters()) p.mul_(0.9);
  }
  const torch::Tensor with_grad = model->forward_logits(ids, positions).detach();
  torch::NoGradGuard no_grad;
  EXPECT_LT((model->forward_logits(ids, positions) - with_grad).abs().max().item<double>(),
            kKernelTol);
}

}  // namespace
}  // namespace ajet::model
