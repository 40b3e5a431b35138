#include "gemm_peak.h"

#include <ATen/Parallel.h>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cstdio>

namespace ajet::bench {

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

}  // namespace

std::string GemmPeak::describe() const {
  char buf[160];
  std::snprintf(buf, sizeof(buf), "%.1f GFLOP/s (float32 %lld^3 matmul, %d threads, best of %d)",
                gflops, static_cast<long long>(n), threads, reps);
  return buf;
}

GemmPeak measure_gemm_peak(const GemmPeakOptions& options) {
  const int before = at::get_num_threads();
  const int threads = options.threads > 0 ? options.threads : before;
  at::set_num_threads(threads);
  torch::NoGradGuard no_grad;
  GemmPeak best;
  best.threads = threads;
  best.reps = options.reps;
  for (int64_t n : options.sizes) {
    auto a = torch::randn({n, n}), b = torch::randn({n, n}), c = torch::empty({n, n});
    const double flops =
        2.0 * static_cast<double>(n) * static_cast<double>(n) * static_cast<double>(n);
    // Warm-up: first-touch of the output, BLAS buffers, thread pool wake-up; also sizes the loop.
    auto t0 = Clock::now();
    torch::mm_out(c, a, b);
    const double one = std::max(seconds_since(t0), 1e-6);
    const int per_rep = std::max(1, static_cast<int>(options.min_seconds / one));
    for (int r = 0; r < options.reps; ++r) {
      t0 = Clock::now();
      for (int i = 0; i < per_rep; ++i) torch::mm_out(c, a, b);
      const double gflops = per_rep * flops / seconds_since(t0) / 1e9;
      if (gflops > best.gflops) {
        best.gflops = gflops;
        best.n = n;
      }
    }
  }
  at::set_num_threads(before);
  return best;
}

}  // namespace ajet::bench
