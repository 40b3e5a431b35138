#include "model/row_kernels.h"

#include <atomic>
#include <cmath>

#include "common/multiversion.h"

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
void rms_norm_rows_f32(const float* x, const float* weight, float* y, int64_t dim, float eps, int64_t row_begin,
                       int64_t row_end) {
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
void rotary_rows_f32(const float* x, float* y, const int64_t* positions, const float* cos, const float* sin,
                     int64_t heads, int64_t head_dim, int64_t row_begin, int64_t row_end) {
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

}  // namespace ajet::model

#pragma GCC pop_options
