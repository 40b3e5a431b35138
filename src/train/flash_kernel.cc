#include "train/flash_kernel.h"

#include <dlfcn.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>

#include "common/multiversion.h"
#include "common/vec8.h"

namespace ajet::train {
namespace {

// CBLAS's ABI (row-major 101, no transpose 111, transpose 112; 32-bit integers, as Debian's
// OpenBLAS).
using Sgemm = void (*)(int, int, int, int, int, int, float, const float*, int, const float*, int,
                       float, float*, int);
using Dgemm = void (*)(int, int, int, int, int, int, double, const double*, int, const double*, int,
                       double, double*, int);
constexpr int kRowMajor = 101, kNo = 111, kTrans = 112;

struct Blas {
  Sgemm s = nullptr;
  Dgemm d = nullptr;
};

const Blas& blas() {
  static const Blas b{reinterpret_cast<Sgemm>(dlsym(RTLD_DEFAULT, "cblas_sgemm")),
                      reinterpret_cast<Dgemm>(dlsym(RTLD_DEFAULT, "cblas_dgemm"))};
  return b;
}

// C (m, n) = alpha-free A op B + beta C, row-major: a_t / b_t transpose A (k, m) / B (n, k).
void gemm(bool a_t, bool b_t, int64_t m, int64_t n, int64_t k, const float* a, int64_t lda,
          const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  blas().s(kRowMajor, a_t ? kTrans : kNo, b_t ? kTrans : kNo, static_cast<int>(m),
           static_cast<int>(n), static_cast<int>(k), 1.0f, a, static_cast<int>(lda), b,
           static_cast<int>(ldb), beta, c, static_cast<int>(ldc));
}
void gemm(bool a_t, bool b_t, int64_t m, int64_t n, int64_t k, const double* a, int64_t lda,
          const double* b, int64_t ldb, double beta, double* c, int64_t ldc) {
  blas().d(kRowMajor, a_t ? kTrans : kNo, b_t ? kTrans : kNo, static_cast<int>(m),
           static_cast<int>(n), static_cast<int>(k), 1.0, a, static_cast<int>(lda), b,
           static_cast<int>(ldb), beta, c, static_cast<int>(ldc));
}

// x[0, n) = exp(x - shift), returning their sum; -inf entries (masked keys) give 0. shift is the
// row's running maximum (forward) or its log-sum-exp (backward), so x - shift <= 0 up to rounding.
AJET_MULTIVERSION
float exp_shifted(float* x, int64_t n, float shift) {
  using namespace vec8;
  const float lowest = -std::numeric_limits<float>::infinity();
  v8f sum8 = splat8(0.0f);
  const v8f s8 = splat8(shift), zero = splat8(0.0f), ninf = splat8(lowest);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const v8f x8 = load8(x + i);
    v8f e = exp8_nonpositive(x8 - s8);
    e = x8 == ninf ? zero : e;
    store8(x + i, e);
    sum8 += e;
  }
  float sum = hsum8(sum8);
  for (; i < n; ++i) {
    x[i] = x[i] == lowest ? 0.0f : vec8::exp_nonpositive(x[i] - shift);
    sum += x[i];
  }
  return sum;
}
double exp_shifted(double* x, int64_t n, double shift) {
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) {
    x[i] = std::exp(x[i] - shift);  // exp(-inf) = 0
    sum += x[i];
  }
  return sum;
}

// The forward's online-softmax step on one score tile s (rows, n): per row, the running maximum m
// and sum l move to this tile, s becomes exp(s - m) (its probabilities up to the final 1 / l), and
// the output row o (d) is rescaled to the new maximum. Rows with nothing visible yet stay all 0.
AJET_MULTIVERSION
void online_softmax_tile(float* s, int64_t rows, int64_t n, float* m, float* l, float* o,
                         int64_t d) {
  const float ninf = -std::numeric_limits<float>::infinity();
  for (int64_t r = 0; r < rows; ++r) {
    float* row = s + r * n;
    const float top = std::max(m[r], vec8::max_of(row, n));
    if (top == ninf) {
      std::fill(row, row + n, 0.0f);
      continue;
    }
    const float rescale = m[r] == ninf ? 0.0f : std::exp(m[r] - top);
    l[r] = l[r] * rescale + exp_shifted(row, n, top);
    m[r] = top;
    if (rescale != 1.0f) {
      float* orow = o + r * d;
#pragma omp simd
      for (int64_t c = 0; c < d; ++c) orow[c] *= rescale;
    }
  }
}
template <typename T>
void online_softmax_tile(T* s, int64_t rows, int64_t n, T* m, T* l, T* o, int64_t d) {
  const T ninf = -std::numeric_limits<T>::infinity();
  for (int64_t r = 0; r < rows; ++r) {
    T* row = s + r * n;
    T top = m[r];
    for (int64_t i = 0; i < n; ++i) top = std::max(top, row[i]);
    if (top == ninf) {
      std::fill(row, row + n, T(0));
      continue;
    }
    const T rescale = m[r] == ninf ? T(0) : std::exp(m[r] - top);
    l[r] = l[r] * rescale + exp_shifted(row, n, top);
    m[r] = top;
    for (int64_t c = 0; c < d; ++c) o[r * d + c] *= rescale;
  }
}

// dS = P * (dP - delta) over a row, in place in dp.
AJET_MULTIVERSION
void softmax_grad_row(const float* p, float* dp, int64_t n, float delta) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) dp[i] = p[i] * (dp[i] - delta);
}
void softmax_grad_row(const double* p, double* dp, int64_t n, double delta) {
  for (int64_t i = 0; i < n; ++i) dp[i] = p[i] * (dp[i] - delta);
}

// s (rows, n) += the mask of keys [k0, k0 + n) of the block, where they are past its full keys.
template <typename T>
void add_mask(const FlashTile<T>& t, T* s, int64_t k0, int64_t n) {
  const int64_t first = std::max(k0, t.full_keys);
  if (first >= k0 + n) return;
  const int64_t masked = t.keys - t.full_keys;
  for (int64_t r = 0; r < t.rep; ++r) {
    for (int64_t i = 0; i < t.tq; ++i) {
      const float* b = t.bias + i * masked + (first - t.full_keys);
      T* row = s + (r * t.tq + i) * n + (first - k0);
      for (int64_t c = 0; c < k0 + n - first; ++c) row[c] += static_cast<T>(b[c]);
    }
  }
}

}  // namespace

bool flash_available() { return blas().s != nullptr && blas().d != nullptr; }

int64_t flash_scratch(int64_t rows, int64_t d) {
  (void)d;
  return 2 * rows * kFlashKeyTile +
         2 * rows;  // scores / probabilities, their gradient; row max and sum
}

template <typename T>
void flash_forward(const FlashTile<T>& t, T* o, T* lse, T* scratch) {
  const int64_t rows = t.rep * t.tq, d = t.d;
  T* s = scratch;                             // (rows, tile)
  T* m = scratch + 2 * rows * kFlashKeyTile;  // (rows,) running maximum
  T* l = m + rows;                            // (rows,) running sum
  const T ninf = -std::numeric_limits<T>::infinity();
  std::fill(m, m + rows, ninf);
  std::fill(l, l + rows, T(0));
  std::fill(o, o + rows * d, T(0));
  for (int64_t k0 = 0; k0 < t.keys; k0 += kFlashKeyTile) {
    const int64_t n = std::min(kFlashKeyTile, t.keys - k0);
    gemm(false, true, rows, n, d, t.q, d, t.k + k0 * d, d, T(0), s, n);  // S = Q K^T
    add_mask(t, s, k0, n);
    online_softmax_tile(s, rows, n, m, l, o, d);
    gemm(false, false, rows, d, n, s, n, t.v + k0 * d, d, T(1), o, d);  // O += P V
  }
  for (int64_t r = 0; r < rows; ++r) {
    if (l[r] == T(0)) {  // a row with no visible key attends to nothing
      lse[r] = ninf;
      continue;
    }
    const T inv = T(1) / l[r];
    T* orow = o + r * d;
    for (int64_t c = 0; c < d; ++c) orow[c] *= inv;
    lse[r] = m[r] + std::log(l[r]);
  }
}

template <typename T>
void flash_backward(const FlashTile<T>& t, const T* dout, const T* delta, const T* lse, T* dq,
                    T* dk, T* dv, T* scratch) {
  const int64_t rows = t.rep * t.tq, d = t.d;
  T* p = scratch;                          // (rows, tile)
  T* dp = scratch + rows * kFlashKeyTile;  // (rows, tile)
  const T ninf = -std::numeric_limits<T>::infinity();
  std::fill(dq, dq + rows * d, T(0));
  for (int64_t k0 = 0; k0 < t.keys; k0 += kFlashKeyTile) {
    const int64_t n = std::min(kFlashKeyTile, t.keys - k0);
    gemm(false, true, rows, n, d, t.q, d, t.k + k0 * d, d, T(0), p, n);  // S = Q K^T
    add_mask(t, p, k0, n);
    for (int64_t r = 0; r < rows; ++r) {
      if (lse[r] == ninf) {
        std::fill(p + r * n, p + (r + 1) * n, T(0));
      } else {
        exp_shifted(p + r * n, n, lse[r]);  // P
      }
    }
    gemm(true, false, n, d, rows, p, n, dout, d, T(1), dv + k0 * d, d);    // dV += P^T dO
    gemm(false, true, rows, n, d, dout, d, t.v + k0 * d, d, T(0), dp, n);  // dP = dO V^T
    for (int64_t r = 0; r < rows; ++r) softmax_grad_row(p + r * n, dp + r * n, n, delta[r]);  // dS
    gemm(false, false, rows, d, n, dp, n, t.k + k0 * d, d, T(1), dq, d);  // dQ += dS K
    gemm(true, false, n, d, rows, dp, n, t.q, d, T(1), dk + k0 * d, d);   // dK += dS^T Q
  }
}

template void flash_forward<float>(const FlashTile<float>&, float*, float*, float*);
template void flash_forward<double>(const FlashTile<double>&, double*, double*, double*);
template void flash_backward<float>(const FlashTile<float>&, const float*, const float*,
                                    const float*, float*, float*, float*, float*);
template void flash_backward<double>(const FlashTile<double>&, const double*, const double*,
                                     const double*, double*, double*, double*, double*);

}  // namespace ajet::train
