// What the engine computes with: BLAS library, thread counts, device. Logged at engine start-up so a
// slow run can be traced to a reference BLAS or a single thread. Never changes numerics.
#pragma once

#include <string>

namespace ajet::model {

// Sets libtorch intra-op threads (which also bounds OpenMP/OpenBLAS threads). n <= 0 → hardware
// concurrency. libtorch starts with 1 thread here, so every engine command should call this.
void configure_threads(int n);

// One line, e.g. "BLAS /usr/lib/.../openblas-openmp/libblas.so.3 (OpenBLAS 0.3.21 ...), 2 intra-op
// threads (OpenMP), 1 inter-op, CPU capability AVX2, CUDA unavailable".
std::string describe_compute_backend();

}  // namespace ajet::model
