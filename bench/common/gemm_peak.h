// The float32 GEMM peak the benches compare model FLOPs against (MFU), measured in the same run as
// the benchmark, at the thread count the benchmark itself computes with. Benches only: it never
// changes the caller's thread count for good (it restores it) and never runs in the engine.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace ajet::bench {

struct GemmPeak {
  double gflops = 0;  // best GFLOP/s over every size and repetition (wall clock)
  int64_t n = 0;      // the square size that reached it
  int threads = 0;    // intra-op threads it was measured with
  int reps = 0;       // timed repetitions per size
  std::string describe()
      const;  // e.g. "57.3 GFLOP/s (float32 2048^3 matmul, 2 threads, best of 5)"
};

struct GemmPeakOptions {
  int threads = 0;  // intra-op threads; <= 0: the caller's current count
  std::vector<int64_t> sizes = {1024, 1536, 2048};  // square n x n x n products
  int reps = 5;              // timed repetitions per size (after one warm-up)
  double min_seconds = 0.2;  // each timed repetition runs products this long
};

// Best-of-reps GFLOP/s of n x n x n float32 matmuls into a preallocated output (no allocation in
// the timed loop), each size warmed up first, each repetition timing enough products to last
// `min_seconds` (one 1024^3 product is ~35 ms on 2 cores: too short to time alone on a shared
// host).
GemmPeak measure_gemm_peak(const GemmPeakOptions& options = {});

}  // namespace ajet::bench
