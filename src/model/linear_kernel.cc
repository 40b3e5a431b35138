#include "model/linear_kernel.h"

#include <algorithm>
#include <cstring>

#include "common/multiversion.h"

// The vector code uses GCC vector extensions of 16 floats: one register on AVX-512, two elsewhere.
// The helpers below take and return 64-byte vectors, always inlined.
#pragma GCC diagnostic ignored "-Wpsabi"
#include "common/vec8.h"  // after the pragma: its 8-float helpers take vectors too

namespace ajet::model {
namespace {

typedef float v16f __attribute__((vector_size(64)));
typedef int32_t v16i __attribute__((vector_size(64)));

AJET_INLINE v16f load16(const float* p) {
  v16f v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

// Lane sums of 8 vectors a[0..8), as pairs: lanes 2j and 2j + 1 of the result add up to the sum of
// a[j]'s lanes. A transpose-and-add tree: each level halves the width of every vector's group of
// partial sums and puts two vectors' groups side by side, in order.
AJET_INLINE v16f pair_sums8(const v16f* a) {
  const v16i lo8 = {0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19, 20, 21, 22, 23};
  const v16i hi8 = lo8 + 8;
  v16f t[4];
  for (int j = 0; j < 4; ++j) {  // groups of 8: [a0 a1], [a2 a3], ...
    t[j] = __builtin_shuffle(a[2 * j], a[2 * j + 1], lo8) +
           __builtin_shuffle(a[2 * j], a[2 * j + 1], hi8);
  }
  const v16i lo4 = {0, 1, 2, 3, 8, 9, 10, 11, 16, 17, 18, 19, 24, 25, 26, 27};
  const v16i hi4 = lo4 + 4;
  const v16f u0 =
      __builtin_shuffle(t[0], t[1], lo4) + __builtin_shuffle(t[0], t[1], hi4);  // [a0 a1 a2 a3]
  const v16f u1 =
      __builtin_shuffle(t[2], t[3], lo4) + __builtin_shuffle(t[2], t[3], hi4);  // [a4 .. a7]
  const v16i lo2 = {0, 1, 4, 5, 8, 9, 12, 13, 16, 17, 20, 21, 24, 25, 28, 29};
  const v16i hi2 = lo2 + 2;
  return __builtin_shuffle(u0, u1, lo2) + __builtin_shuffle(u0, u1, hi2);  // [a0 .. a7] in pairs
}

// One tile: MR input rows against 8 weight rows (8 output columns). Dot products along K, 16 at a
// time; the 8 weight vectors of a step are shared by the MR rows, so each is loaded once per tile.
template <int MR>
AJET_INLINE void tile(const float* x, const float* w, const float* bias, float* y, int64_t n,
                      int64_t k) {
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
    const v16f s =
        __builtin_shuffle(p, p, even) + __builtin_shuffle(p, p, odd);  // lanes 0..7: the 8 sums
    float* out = y + r * n;
    for (int j = 0; j < 8; ++j) {
      float v = s[j];
      for (int64_t c = kv; c < k; ++c) v += x[r * k + c] * w[j * k + c];
      out[j] = bias != nullptr ? v + bias[j] : v;
    }
  }
}

AJET_INLINE void store16(float* p, v16f v) { std::memcpy(p, &v, sizeof(v)); }

// One tile of the packed kernel: MR input rows against one panel (32 output columns, `cols` of them
// real). Per K step: two weight vectors, MR broadcasts, 2 * MR multiply-adds into 2 * MR
// accumulators (24 of AVX-512's 32 registers at MR = 12).
//
// The tile also asks for [prefetch, prefetch_end) (part of the next panel) to be brought into L2, a
// few cache lines every kPrefetchSteps K steps, so the first tile of the next panel need not wait
// for it to come from memory (~11 GB/s per core, where a tile consumes ~32). Measured: ~2 points of
// the GEMM peak on `small`'s linears at 64 rows (68 -> 70 %, an A/B of two builds).
constexpr int64_t kPrefetchSteps = 8;

template <int MR>
AJET_INLINE void packed_tile(const float* x, int64_t k, const float* panel, const float* bias,
                             float* y, int64_t n, int64_t cols, const char* prefetch,
                             const char* prefetch_end) {
  v16f lo[MR] = {}, hi[MR] = {};
  constexpr int64_t kLine = 64;
  const int64_t lines = (prefetch_end - prefetch) / kLine;
  const int64_t lines_per_chunk = (lines * kPrefetchSteps + k - 1) / k;
  for (int64_t c0 = 0; c0 < k; c0 += kPrefetchSteps) {
    for (int64_t i = 0; i < lines_per_chunk && prefetch < prefetch_end; ++i, prefetch += kLine) {
      __builtin_prefetch(prefetch, 0, 2);
    }
    const int64_t c1 = std::min(k, c0 + kPrefetchSteps);
#pragma GCC unroll 2
    for (int64_t c = c0; c < c1; ++c) {
      const v16f w0 = load16(panel + c * kPackedColumns),
                 w1 = load16(panel + c * kPackedColumns + 16);
#pragma GCC unroll 12
      for (int r = 0; r < MR; ++r) {
        const float xv = x[r * k + c];
        lo[r] += xv * w0;
        hi[r] += xv * w1;
      }
    }
  }
  if (cols == kPackedColumns) {
    const v16f b0 = bias != nullptr ? load16(bias) : v16f{},
               b1 = bias != nullptr ? load16(bias + 16) : v16f{};
    for (int r = 0; r < MR; ++r) {
      store16(y + r * n, lo[r] + b0);
      store16(y + r * n + 16, hi[r] + b1);
    }
    return;
  }
  for (int r = 0; r < MR; ++r) {  // the last, partial panel
    for (int64_t j = 0; j < cols; ++j) {
      const float v = j < 16 ? lo[r][j] : hi[r][j - 16];
      y[r * n + j] = bias != nullptr ? v + bias[j] : v;
    }
  }
}

// The same tile in vectors of 8 floats (32 output columns: four per row), for CPUs without AVX-512.
// There a 16-float vector is two registers, and GCC builds packed_tile's broadcast of each input
// value into one through the stack: a store-forwarding stall per step, which left that tile ~1.8
// GFLOP/s on an AVX2 EPYC, 30-40x slower than OpenBLAS on the same rows. An 8-float broadcast is
// one vbroadcastss. 3 rows: 12 accumulators and 4 weight vectors fill AVX2's 16 registers. Each
// output is the same multiply-adds in the same order as in packed_tile, so both give the same bits.
using vec8::load8;
using vec8::store8;
using vec8::v8f;

template <int MR>
AJET_INLINE void packed_tile8(const float* x, int64_t k, const float* panel, const float* bias,
                              float* y, int64_t n, int64_t cols, const char* prefetch,
                              const char* prefetch_end) {
  v8f acc[MR][4] = {};
  constexpr int64_t kLine = 64;
  const int64_t lines = (prefetch_end - prefetch) / kLine;
  const int64_t lines_per_chunk = (lines * kPrefetchSteps + k - 1) / k;
  for (int64_t c0 = 0; c0 < k; c0 += kPrefetchSteps) {
    for (int64_t i = 0; i < lines_per_chunk && prefetch < prefetch_end; ++i, prefetch += kLine) {
      __builtin_prefetch(prefetch, 0, 2);
    }
    const int64_t c1 = std::min(k, c0 + kPrefetchSteps);
    for (int64_t c = c0; c < c1; ++c) {
      const float* row = panel + c * kPackedColumns;
      const v8f w0 = load8(row), w1 = load8(row + 8), w2 = load8(row + 16), w3 = load8(row + 24);
#pragma GCC unroll 4
      for (int r = 0; r < MR; ++r) {
        const float xv = x[r * k + c];
        acc[r][0] += xv * w0;
        acc[r][1] += xv * w1;
        acc[r][2] += xv * w2;
        acc[r][3] += xv * w3;
      }
    }
  }
  if (cols == kPackedColumns) {
    for (int r = 0; r < MR; ++r) {
      for (int q = 0; q < 4; ++q) {
        store8(y + r * n + 8 * q, bias != nullptr ? acc[r][q] + load8(bias + 8 * q) : acc[r][q]);
      }
    }
    return;
  }
  for (int r = 0; r < MR; ++r) {  // the last, partial panel
    for (int64_t j = 0; j < cols; ++j) {
      const float v = acc[r][j / 8][j % 8];
      y[r * n + j] = bias != nullptr ? v + bias[j] : v;
    }
  }
}

// One tile of MR rows: 16-float vectors (kNarrow false) or 8-float ones.
template <int MR, bool kNarrow>
AJET_INLINE void packed_tile_of(const float* x, int64_t k, const float* panel, const float* bias,
                                float* y, int64_t n, int64_t cols, const char* prefetch,
                                const char* prefetch_end) {
  if constexpr (kNarrow) {
    packed_tile8<MR>(x, k, panel, bias, y, n, cols, prefetch, prefetch_end);
  } else {
    packed_tile<MR>(x, k, panel, bias, y, n, cols, prefetch, prefetch_end);
  }
}

// Rows [0, rows) of a row block against one panel, in tiles of `mr` rows and one tile for the rest;
// the tiles share out the prefetch of `next` (the panel after this one, or null).
template <int MR, bool kNarrow>
AJET_INLINE void packed_rows(const float* x, int64_t rows, int64_t k, const float* panel,
                             const float* bias, float* y, int64_t n, int64_t cols,
                             const float* next) {
  const int64_t tiles = (rows + MR - 1) / MR;
  const char* next_bytes = reinterpret_cast<const char*>(next);
  const int64_t next_size =
      next != nullptr ? k * kPackedColumns * static_cast<int64_t>(sizeof(float)) : 0;
  auto share = [&](int64_t t) { return next_bytes + next_size * t / tiles; };
  int64_t r = 0, t = 0;
  for (; r + MR <= rows; r += MR, ++t) {
    packed_tile_of<MR, kNarrow>(x + r * k, k, panel, bias, y + r * n, n, cols, share(t),
                                share(t + 1));
  }
  const float* xr = x + r * k;
  float* yr = y + r * n;
  // clang-format off
  switch (rows - r) {
#define AJET_PACKED_REST(R)                                                                \
  case R:                                                                                  \
    if constexpr (R < MR)                                                                  \
      packed_tile_of<R, kNarrow>(xr, k, panel, bias, yr, n, cols, share(t), share(t + 1)); \
    break;
    AJET_PACKED_REST(1) AJET_PACKED_REST(2) AJET_PACKED_REST(3) AJET_PACKED_REST(4)
    AJET_PACKED_REST(5) AJET_PACKED_REST(6) AJET_PACKED_REST(7) AJET_PACKED_REST(8)
    AJET_PACKED_REST(9) AJET_PACKED_REST(10) AJET_PACKED_REST(11)
#undef AJET_PACKED_REST
    default: break;
  }
  // clang-format on
}

// AVX-512 has the 32 vector registers a 12-row tile of 16-float vectors needs; elsewhere the tiles
// are of 8-float vectors and 3 rows (packed_tile8).
bool wide_vectors() {
#if defined(__GNUC__) && defined(__x86_64__)
  static const bool avx512 = __builtin_cpu_supports("avx512f");
  return avx512;
#else
  return false;
#endif
}

}  // namespace

int64_t packed_floats(int64_t n, int64_t k) { return packed_panels(n) * kPackedColumns * k; }

void pack_weight_f32(const float* w, int64_t n, int64_t k, float* packed) {
  for (int64_t p = 0; p < packed_panels(n); ++p) {
    float* out = packed + p * kPackedColumns * k;
    for (int64_t j = 0; j < kPackedColumns; ++j) {
      const int64_t row = p * kPackedColumns + j;
      for (int64_t c = 0; c < k; ++c) out[c * kPackedColumns + j] = row < n ? w[row * k + c] : 0.0f;
    }
  }
}

AJET_MULTIVERSION
void linear_packed_f32(const float* x, const float* packed, const float* bias, float* y, int64_t m,
                       int64_t n, int64_t k, int64_t panel_begin, int64_t panel_end,
                       const float* then) {
  const bool wide = wide_vectors();
  const int64_t mr = wide ? 12 : 3;
  // Row blocks of ~256 KB of input stay in L2 while this thread's panels stream past them once
  // each.
  const int64_t block = std::max<int64_t>(mr, (256 * 1024 / std::max<int64_t>(1, k * 4)) / mr * mr);
  for (int64_t m0 = 0; m0 < m; m0 += block) {
    const int64_t rows = std::min(block, m - m0);
    for (int64_t p = panel_begin; p < panel_end; ++p) {
      const int64_t col0 = p * kPackedColumns, cols = std::min(kPackedColumns, n - col0);
      const float* panel = packed_panel(packed, k, p);
      const float* b = bias != nullptr ? bias + col0 : nullptr;
      const float* next = p + 1 < panel_end ? packed_panel(packed, k, p + 1)
                          : m0 + block >= m ? then
                                            : nullptr;
      if (wide) {
        packed_rows<12, false>(x + m0 * k, rows, k, panel, b, y + m0 * n + col0, n, cols, next);
      } else {
        packed_rows<3, true>(x + m0 * k, rows, k, panel, b, y + m0 * n + col0, n, cols, next);
      }
    }
  }
}

AJET_MULTIVERSION
void linear_rows_f32(const float* x, const float* w, const float* bias, float* y, int64_t m,
                     int64_t n, int64_t k, int64_t n_begin, int64_t n_end) {
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
