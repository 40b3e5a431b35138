// Per-row float32 CPU kernels for the no-grad forward (the engine's steps): RMSNorm and rotary
// embeddings in one pass over their rows each, where the torch-ops forward runs 6 and ~9 small
// tensor ops, each a dispatch and a pass over memory (a `tiny` decode step's ~60 ops per layer cost
// more than its arithmetic; docs/engine.md "The decode step"). On plain pointers (no libtorch),
// built for AVX-512, AVX2 and baseline x86-64 and picked at load time, as linear_kernel.h. Never
// allocates; model/qwen2.cc decides when they run and splits rows over the threads.
#pragma once

#include <cstdint>

namespace ajet::model {

// y[r, :] = weight * (x[r, :] * rsqrt(mean(x[r, :]^2) + eps)) for rows [row_begin, row_end) of x
// (rows, dim), row-major and contiguous; the products rounded in torch's order, the sum of squares
// in another.
void rms_norm_rows_f32(const float* x, const float* weight, float* y, int64_t dim, float eps,
                       int64_t row_begin, int64_t row_end);

// Rotary embedding, HF's rotate_half form, for rows [row_begin, row_end) of x (tokens * heads, D):
// row r is token r / heads at position positions[r / heads]; cos, sin are (P, D) tables with P
// above every position. y = x * cos + rotate_half(x) * sin, each product and the sum rounded as
// torch's ops round them (bit for bit the same result).
void rotary_rows_f32(const float* x, float* y, const int64_t* positions, const float* cos,
                     const float* sin, int64_t heads, int64_t head_dim, int64_t row_begin,
                     int64_t row_end);

// y[r, c] = silu(g[r, c]) * u[r, c] for rows [0, rows) and columns [col_begin, col_end) of (rows,
// cols) row-major matrices; y may be g. silu(g) = g * sigmoid(g), with exp on -|g| (vec8.h), so it
// never overflows. The gated MLP's activation, fused into the projections' parallel region.
void silu_mul_cols_f32(const float* g, const float* u, float* y, int64_t rows, int64_t cols,
                       int64_t col_begin, int64_t col_end);

// y[r, c] += a[r, c] over the same column range: a residual added where the projection wrote y.
void add_cols_f32(float* y, const float* a, int64_t rows, int64_t cols, int64_t col_begin,
                  int64_t col_end);

// Whether model/qwen2.cc uses these kernels (on unless turned off): engine_bench measures the step
// with and without them in one process.
void set_row_kernels_enabled(bool on);
bool row_kernels_enabled();

}  // namespace ajet::model
