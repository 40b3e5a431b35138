// A float32 CPU kernel for linear layers with few rows (the engine's decode steps: one row per
// running sequence), on plain pointers (no libtorch, so it compiles fast and can be built for
// several instruction sets at once). OpenBLAS packs the whole weight matrix on every call; with 64
// rows that copy costs as much as the multiply itself (docs/benchmarks.md, 2026-12-03). This kernel
// reads each weight row once, straight from its HF layout, and reuses it for every input row from
// L1. Never allocates; never decides when it is used (model/qwen2.cc does).
#pragma once

#include <cstdint>

namespace ajet::model {

// Output columns per work unit: callers split [0, N) into ranges of whole units between threads.
inline constexpr int64_t kLinearColumnsPerUnit = 8;

// y[m, n] = sum_k x[m, k] * w[n, k] (+ bias[n]) for n in [n_begin, n_end): x (M, K), w (N, K),
// bias (N) or null, y (M, N), all row-major and contiguous. Columns outside the range are
// untouched.
void linear_rows_f32(const float* x, const float* w, const float* bias, float* y, int64_t m,
                     int64_t n, int64_t k, int64_t n_begin, int64_t n_end);

// The packed layout: the weight (N, K) cut into panels of kPackedColumns output columns, each panel
// stored K-major (panel p, row k holds w[p * 32 + 0..31, k]), the last panel zero-padded. A GEMM
// kernel then reads each panel as one contiguous stream and broadcasts the input rows against it
// (outer products), which keeps the multiply units busy where the dot-product kernel above spends
// its time on horizontal sums. Made once per weight version (model/qwen2.h PackedWeight).
inline constexpr int64_t kPackedColumns = 32;

// Panels of an (N, K) weight: N / kPackedColumns, rounded up.
inline int64_t packed_panels(int64_t n) { return (n + kPackedColumns - 1) / kPackedColumns; }

// Panel p of a packed (N, K) weight; null for p < 0 (no panel: a kernel's "nothing next").
inline const float* packed_panel(const float* packed, int64_t k, int64_t p) {
  return p < 0 ? nullptr : packed + p * kPackedColumns * k;
}

// Floats the packed copy of an (N, K) weight needs.
int64_t packed_floats(int64_t n, int64_t k);

// Writes w (N, K, row-major, contiguous) into `packed` (packed_floats(n, k) floats).
void pack_weight_f32(const float* w, int64_t n, int64_t k, float* packed);

// y[m, n] = sum_k x[m, k] * w[n, k] (+ bias[n]) from the packed copy, for the columns of panels
// [panel_begin, panel_end): x (M, K), bias (N) or null, y (M, N), row-major and contiguous. Any M.
// Each panel's tiles prefetch the next panel of the range; `then`, when not null, is the panel (of
// a packed weight with the same K) the caller computes after this range, prefetched during the last
// one.
void linear_packed_f32(const float* x, const float* packed, const float* bias, float* y, int64_t m,
                       int64_t n, int64_t k, int64_t panel_begin, int64_t panel_end,
                       const float* then = nullptr);

}  // namespace ajet::model
