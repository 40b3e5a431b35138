// A float32 CPU kernel for linear layers with few rows (the engine's decode steps: one row per
// running sequence), on plain pointers (no libtorch, so it compiles fast and can be built for several
// instruction sets at once). OpenBLAS packs the whole weight matrix on every call; with 64 rows that
// copy costs as much as the multiply itself (docs/benchmarks.md, 2026-12-03). This kernel reads each
// weight row once, straight from its HF layout, and reuses it for every input row from L1. Never
// allocates; never decides when it is used (model/qwen2.cc does).
#pragma once

#include <cstdint>

namespace ajet::model {

// Output columns per work unit: callers split [0, N) into ranges of whole units between threads.
inline constexpr int64_t kLinearColumnsPerUnit = 8;

// y[m, n] = sum_k x[m, k] * w[n, k] (+ bias[n]) for n in [n_begin, n_end): x (M, K), w (N, K),
// bias (N) or null, y (M, N), all row-major and contiguous. Columns outside the range are untouched.
void linear_rows_f32(const float* x, const float* w, const float* bias, float* y, int64_t m, int64_t n, int64_t k,
                     int64_t n_begin, int64_t n_end);

}  // namespace ajet::model
