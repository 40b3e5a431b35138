// 8-float vectors (GCC vector extensions) and the few helpers the hand-written CPU kernels share:
// loads and stores, horizontal sums, the maximum of a row, and exp on non-positive inputs (softmax
// after its max is subtracted). Each target of AJET_MULTIVERSION lowers them to its own
// instructions (one AVX register, or two SSE ones); always inlined, so a clone's vector calling
// convention never matters.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

#include "common/multiversion.h"

namespace ajet::vec8 {
namespace {  // internal linkage: each kernel file inlines its own copies

typedef float v8f __attribute__((vector_size(32)));
typedef int32_t v8i __attribute__((vector_size(32)));

AJET_INLINE v8f load8(const float* p) {
  v8f v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

AJET_INLINE void store8(float* p, v8f v) { std::memcpy(p, &v, sizeof(v)); }

// For constants and loop invariants only: inside an AJET_MULTIVERSION clone GCC 12 builds a vector
// from a run-time scalar with a chain of 8 inserts (it lowers the constructor for the base target),
// 9 shuffle-port µops where one broadcast would do. In a hot loop, load 8 and use lane8 below.
AJET_INLINE v8f splat8(float x) { return v8f{x, x, x, x, x, x, x, x}; }

// Lane J of v in every lane: one broadcast (from memory when v was just loaded) in every clone.
template <int J>
AJET_INLINE v8f lane8(v8f v) {
  return __builtin_shuffle(v, v8i{J, J, J, J, J, J, J, J});
}

AJET_INLINE float hsum8(v8f v) {
  v8f s = v + __builtin_shuffle(v, v8i{4, 5, 6, 7, 0, 1, 2, 3});
  s = s + __builtin_shuffle(s, v8i{2, 3, 0, 1, 6, 7, 4, 5});
  return s[0] + s[1];
}

// The largest of x[0, n) (-infinity when n is 0), 8 lanes at a time: a plain loop is a scalar chain
// of dependent maxima, 4 cycles each (GCC does not vectorise it without -ffast-math).
AJET_INLINE float max_of(const float* x, int64_t n) {
  v8f m8 = splat8(-std::numeric_limits<float>::infinity());
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const v8f v = load8(x + i);
    m8 = v > m8 ? v : m8;
  }
  float m = -std::numeric_limits<float>::infinity();
  for (; i < n; ++i) m = std::max(m, x[i]);
  for (int j = 0; j < 8; ++j) m = std::max(m, m8[j]);
  return m;
}

// exp(x) for x <= 0 (softmax after subtracting the max), Cephes-style: x = n ln2 + r, |r| <= ln2 /
// 2, degree-6 polynomial for e^r, 2^n from the exponent bits. Relative error ~2e-7; branch-free so
// the softmax loop vectorises. Inputs below -87 return ~2^-126 instead of underflowing to 0.
AJET_INLINE float exp_nonpositive(float x) {
  x = x < -87.0f ? -87.0f : x;
  const float n = std::floor(x * 1.44269504088896341f + 0.5f);
  const float r = x - n * 0.693359375f + n * 2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  const float y = p * r * r + r + 1.0f;
  const int32_t bits = (static_cast<int32_t>(n) + 127) << 23;
  float scale;
  std::memcpy(&scale, &bits, sizeof(scale));
  return y * scale;
}

// exp_nonpositive on 8 lanes at once, the same steps (GCC did not vectorise the scalar loop: the
// floor and the exponent bits kept it scalar, ~10 % of a decode step's attention).
AJET_INLINE v8f exp8_nonpositive(v8f x) {
  x = x < splat8(-87.0f) ? splat8(-87.0f) : x;
  const v8f t = x * splat8(1.44269504088896341f) + splat8(0.5f);
  v8i ti = __builtin_convertvector(t, v8i);  // truncates toward zero
  v8f n = __builtin_convertvector(ti, v8f);
  const v8i above =
      n > t;  // -1 where truncation rounded up (t < 0 and not whole): floor is one less
  n += __builtin_convertvector(above, v8f);
  ti += above;
  const v8f r = x - n * splat8(0.693359375f) + n * splat8(2.12194440e-4f);
  v8f p = splat8(1.9875691500e-4f);
  p = p * r + splat8(1.3981999507e-3f);
  p = p * r + splat8(8.3334519073e-3f);
  p = p * r + splat8(4.1665795894e-2f);
  p = p * r + splat8(1.6666665459e-1f);
  p = p * r + splat8(5.0000001201e-1f);
  const v8f y = p * r * r + r + splat8(1.0f);
  const v8i bits = (ti + 127) << 23;
  v8f scale;
  std::memcpy(&scale, &bits, sizeof(scale));
  return y * scale;
}

}  // namespace
}  // namespace ajet::vec8
