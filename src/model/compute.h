// What the engine computes with: BLAS library, thread counts, device. Logged at engine start-up so
// a slow run can be traced to a reference BLAS or a single thread. Never changes numerics.
#pragma once

#include <cstdint>
#include <string>

namespace ajet::model {

// Sets libtorch intra-op threads (which also bounds OpenMP/OpenBLAS threads). n <= 0 → hardware
// concurrency. libtorch starts with 1 thread here, so every engine command should call this.
void configure_threads(int n);

// One line, e.g. "BLAS /usr/lib/.../openblas-openmp/libblas.so.3 (OpenBLAS 0.3.21 ...), 2 intra-op
// threads (OpenMP), 1 inter-op, CPU capability AVX2, CUDA unavailable".
std::string describe_compute_backend();

// How many threads an at::parallel_for compiled into this project's own code runs on, for `items`
// work items of grain 1 (at most the intra-op thread count). at::parallel_for is a header template:
// a translation unit built without -fopenmp gets a serial loop, whatever at::set_num_threads says,
// which is how the engine's own kernels once ran on one thread of two.
int own_parallel_for_threads(int64_t items);

}  // namespace ajet::model
