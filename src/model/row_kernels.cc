#include "model/row_kernels.h"

#include <atomic>
#include <cmath>

#include "common/multiversion.h"
#include "common/vec8.h"

// Multiply-add contraction is off below so that a * b + c * d rounds both products, as torch's
// separate tensor ops do.

namespace ajet::model {
namespace {
std::atomic<bool> g_enabled{true};
}  // namespace
void set_row_kernels_enabled(bool on) { g_enabled.store(on, std::memory_order_relaxed); }
bool row_kernels_enabled() { return g_enabled.load(std::memory_order_relaxed); }
}  // namespace ajet::model

#pragma GCC push_options
#pragma GCC optimize("fp-contract=off")

namespace ajet::model {

AJET_MULTIVERSION
void rms_norm_rows_f32(const float* x, const float* weight, float* y, int64_t dim, float eps,
                       int64_t row_begin, int64_t row_end) {
  for (int64_t r = row_begin; r < row_end; ++r) {
    const float* xr = x + r * dim;
    float* yr = y + r * dim;
    float sum = 0;
#pragma omp simd reduction(+ : sum)
    for (int64_t i = 0; i < dim; ++i) sum += xr[i] * xr[i];
    const float inv = 1.0f / std::sqrt(sum / static_cast<float>(dim) + eps);
#pragma omp simd
    for (int64_t i = 0; i < dim; ++i) yr[i] = weight[i] * (xr[i] * inv);
  }
}

AJET_MULTIVERSION
void rotary_rows_f32(const float* x, float* y, const int64_t* positions, const float* cos,
                     const float* sin, int64_t heads, int64_t head_dim, int64_t row_begin,
                     int64_t row_end) {
  const int64_t half = head_dim / 2;
  for (int64_t r = row_begin; r < row_end; ++r) {
    const int64_t p = positions[r / heads];
    const float* xr = x + r * head_dim;
    const float* c = cos + p * head_dim;
    const float* s = sin + p * head_dim;
    float* yr = y + r * head_dim;
#pragma omp simd
    for (int64_t i = 0; i < half; ++i) {
      const float lo = xr[i], hi = xr[i + half];
      yr[i] = lo * c[i] - hi * s[i];
      yr[i + half] = hi * c[i + half] + lo * s[i + half];
    }
  }
}

AJET_MULTIVERSION
void silu_mul_cols_f32(const float* g, const float* u, float* y, int64_t rows, int64_t cols,
                       int64_t col_begin, int64_t col_end) {
  using namespace vec8;
  auto one = [](float gv, float uv) {
    const float e = exp_nonpositive(-std::fabs(gv));  // exp(-|g|)
    const float sig = gv >= 0.0f ? 1.0f / (1.0f + e) : e / (1.0f + e);
    return gv * sig * uv;
  };
  for (int64_t r = 0; r < rows; ++r) {
    const float* gr = g + r * cols;
    const float* ur = u + r * cols;
    float* yr = y + r * cols;
    int64_t c = col_begin;
    for (; c + 8 <= col_end; c += 8) {
      const v8f gv = load8(gr + c);
      const v8f neg = gv < splat8(0.0f) ? gv : -gv;  // -|g|
      const v8f e = exp8_nonpositive(neg);
      const v8f sig = (gv >= splat8(0.0f) ? splat8(1.0f) : e) / (splat8(1.0f) + e);
      store8(yr + c, gv * sig * load8(ur + c));
    }
    for (; c < col_end; ++c) yr[c] = one(gr[c], ur[c]);
  }
}

AJET_MULTIVERSION
void add_cols_f32(float* y, const float* a, int64_t rows, int64_t cols, int64_t col_begin,
                  int64_t col_end) {
  for (int64_t r = 0; r < rows; ++r) {
    float* yr = y + r * cols;
    const float* ar = a + r * cols;
#pragma omp simd
    for (int64_t c = col_begin; c < col_end; ++c) yr[c] = ar[c] + yr[c];
  }
}

}  // namespace ajet::model

#pragma GCC pop_options
