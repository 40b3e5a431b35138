#include "model/linear_kernel.h"

#include <cstring>

// Built for AVX-512, AVX2+FMA and baseline x86-64, picked at load time (as src/infer/attention_kernel.cc).
// The vector code uses GCC vector extensions of 16 floats: one register on AVX-512, two elsewhere.
#if defined(__GNUC__) && defined(__x86_64__) && !defined(__clang__)
#define AJET_LINEAR_MULTIVERSION __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define AJET_LINEAR_MULTIVERSION
#endif
#define AJET_LINEAR_INLINE inline __attribute__((always_inline))
// The helpers below take and return 64-byte vectors; they are always inlined, so the other clones'
// calling conventions for them never matter.
#pragma GCC diagnostic ignored "-Wpsabi"

namespace ajet::model {
namespace {

typedef float v16f __attribute__((vector_size(64)));
typedef int32_t v16i __attribute__((vector_size(64)));

AJET_LINEAR_INLINE v16f load16(const float* p) {
  v16f v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

// Lane sums of 8 vectors a[0..8), as pairs: lanes 2j and 2j + 1 of the result add up to the sum of
// a[j]'s lanes. A transpose-and-add tree: each level halves the width of every vector's group of
// partial sums and puts two vectors' groups side by side, in order.
AJET_LINEAR_INLINE v16f pair_sums8(const v16f* a) {
  const v16i lo8 = {0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19, 20, 21, 22, 23};
  const v16i hi8 = lo8 + 8;
  v16f t[4];
  for (int j = 0; j < 4; ++j) {  // groups of 8: [a0 a1], [a2 a3], ...
    t[j] = __builtin_shuffle(a[2 * j], a[2 * j + 1], lo8) + __builtin_shuffle(a[2 * j], a[2 * j + 1], hi8);
  }
  const v16i lo4 = {0, 1, 2, 3, 8, 9, 10, 11, 16, 17, 18, 19, 24, 25, 26, 27};
  const v16i hi4 = lo4 + 4;
  const v16f u0 = __builtin_shuffle(t[0], t[1], lo4) + __builtin_shuffle(t[0], t[1], hi4);  // [a0 a1 a2 a3]
  const v16f u1 = __builtin_shuffle(t[2], t[3], lo4) + __builtin_shuffle(t[2], t[3], hi4);  // [a4 .. a7]
  const v16i lo2 = {0, 1, 4, 5, 8, 9, 12, 13, 16, 17, 20, 21, 24, 25, 28, 29};
  const v16i hi2 = lo2 + 2;
  return __builtin_shuffle(u0, u1, lo2) + __builtin_shuffle(u0, u1, hi2);  // [a0 .. a7] in pairs
}

// One tile: MR input rows against 8 weight rows (8 output columns). Dot products along K, 16 at a
// time; the 8 weight vectors of a step are shared by the MR rows, so each is loaded once per tile.
template <int MR>
AJET_LINEAR_INLINE void tile(const float* x, const float* w, const float* bias, float* y, int64_t n, int64_t k) {
  v16f acc[MR][8] = {};
  const int64_t kv = k - k % 16;
  for (int64_t c = 0; c < kv; c += 16) {
    v16f xv[MR];
#pragma GCC unroll 4
    for (int r = 0; r < MR; ++r) xv[r] = load16(x + r * k + c);
#pragma GCC unroll 8
    for (int j = 0; j < 8; ++j) {
      const v16f wv = load16(w + j * k + c);
#pragma GCC unroll 4
      for (int r = 0; r < MR; ++r) acc[r][j] += xv[r] * wv;
    }
  }
  const v16i even = {0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30};
  const v16i odd = even + 1;
  for (int r = 0; r < MR; ++r) {
    const v16f p = pair_sums8(acc[r]);
    const v16f s = __builtin_shuffle(p, p, even) + __builtin_shuffle(p, p, odd);  // lanes 0..7: the 8 sums
    float* out = y + r * n;
    for (int j = 0; j < 8; ++j) {
      float v = s[j];
      for (int64_t c = kv; c < k; ++c) v += x[r * k + c] * w[j * k + c];
      out[j] = bias != nullptr ? v + bias[j] : v;
    }
  }
}

}  // namespace

AJET_LINEAR_MULTIVERSION
void linear_rows_f32(const float* x, const float* w, const float* bias, float* y, int64_t m, int64_t n, int64_t k,
                     int64_t n_begin, int64_t n_end) {
  int64_t n0 = n_begin;
  // Loop order: a block of 8 weight rows stays in L1 while every input row (in L2) passes by it.
  for (; n0 + kLinearColumnsPerUnit <= n_end; n0 += kLinearColumnsPerUnit) {
    const float* wt = w + n0 * k;
    const float* bt = bias != nullptr ? bias + n0 : nullptr;
    int64_t m0 = 0;
    for (; m0 + 3 <= m; m0 += 3) tile<3>(x + m0 * k, wt, bt, y + m0 * n + n0, n, k);
    if (m - m0 == 2) tile<2>(x + m0 * k, wt, bt, y + m0 * n + n0, n, k);
    if (m - m0 == 1) tile<1>(x + m0 * k, wt, bt, y + m0 * n + n0, n, k);
  }
  for (; n0 < n_end; ++n0) {  // fewer than 8 columns left
    for (int64_t r = 0; r < m; ++r) {
      float v = 0;
      for (int64_t c = 0; c < k; ++c) v += x[r * k + c] * w[n0 * k + c];
      y[r * n + n0] = bias != nullptr ? v + bias[n0] : v;
    }
  }
}

}  // namespace ajet::model
