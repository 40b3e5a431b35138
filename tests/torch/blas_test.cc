// A libtorch program that measures single-threaded float32 GEMM. The reference BLAS runs ~3.5
// GFLOP/s here, OpenBLAS 40-57, so the loose bound of 10 GFLOP/s tells them apart without noise
// failing it.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <chrono>
#include <cstdio>

namespace {

TEST(Torch, TinyProgramRuns) {
  torch::Tensor a = torch::ones({2, 3});
  torch::Tensor b = torch::ones({3, 4});
  torch::Tensor c = torch::matmul(a, b);  // (2, 4), every entry 3
  EXPECT_EQ(c.size(0), 2);
  EXPECT_FLOAT_EQ(c[1][2].item<float>(), 3.0f);
}

TEST(Torch, GemmIsNotReferenceBlas) {
  torch::set_num_threads(1);
  const int64_t n = 512;
  torch::manual_seed(0);
  torch::Tensor a = torch::randn({n, n});
  torch::Tensor b = torch::randn({n, n});
  torch::Tensor c = torch::matmul(a, b);  // warm-up
  double best_gflops = 0;
  for (int rep = 0; rep < 5; ++rep) {
    auto t0 = std::chrono::steady_clock::now();
    const int iters = 8;
    for (int i = 0; i < iters; ++i) c = torch::matmul(a, b);
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    best_gflops = std::max(best_gflops, 2.0 * n * n * n * iters / s / 1e9);
  }
  std::printf("single-thread float32 GEMM %lldx%lld: %.1f GFLOP/s\n", (long long)n, (long long)n,
              best_gflops);
  RecordProperty("gflops", std::to_string(best_gflops));
  EXPECT_GT(best_gflops, 10.0)
      << "matmul is running on a reference BLAS; install libopenblas0-openmp";
}

}  // namespace
