#include "infer/attention_kernel.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <utility>

// The vector code uses GCC vector extensions (8 floats, common/vec8.h), which every target of
// AJET_MULTIVERSION lowers to its own instructions. The helpers take and return 32-byte vectors,
// always inlined: the ABI note GCC gives for passing them does not apply (silenced before the
// include).
#pragma GCC diagnostic ignored "-Wpsabi"

#include "common/multiversion.h"
#include "common/vec8.h"

namespace ajet::infer {
namespace {

using namespace ajet::vec8;
using ajet::vec8::load8;  // beside the bfloat16 overload below

// A key or value row's 8 elements as floats: float32 as it is, bfloat16 (its bits as uint16_t)
// widened exactly (the top half of a float32).
typedef uint16_t v8h __attribute__((vector_size(16)));
AJET_INLINE v8f load8(const uint16_t* p) {
  v8h h;
  std::memcpy(&h, p, sizeof(h));
  const v8i bits = __builtin_convertvector(h, v8i) << 16;
  v8f v;
  std::memcpy(&v, &bits, sizeof(v));
  return v;
}
AJET_INLINE float to_float(float x) { return x; }
AJET_INLINE float to_float(uint16_t x) {
  const uint32_t bits = static_cast<uint32_t>(x) << 16;
  float v;
  std::memcpy(&v, &bits, sizeof(v));
  return v;
}

// out[i] = sum of a[i]'s lanes, for 8 vectors at once (a transpose-and-add tree).
AJET_INLINE v8f reduce8x8(const v8f* a) {
  const v8i lo = {0, 1, 2, 3, 8, 9, 10, 11}, hi = {4, 5, 6, 7, 12, 13, 14, 15};
  v8f x = __builtin_shuffle(a[0], a[1], lo) + __builtin_shuffle(a[0], a[1], hi);  // a0 x4 | a1 x4
  v8f y = __builtin_shuffle(a[2], a[3], lo) + __builtin_shuffle(a[2], a[3], hi);  // a2 x4 | a3 x4
  v8f z = __builtin_shuffle(a[4], a[5], lo) + __builtin_shuffle(a[4], a[5], hi);
  v8f w = __builtin_shuffle(a[6], a[7], lo) + __builtin_shuffle(a[6], a[7], hi);
  const v8i even = {0, 1, 8, 9, 4, 5, 12, 13}, odd = {2, 3, 10, 11, 6, 7, 14, 15};
  v8f xy = __builtin_shuffle(x, y, even) + __builtin_shuffle(x, y, odd);  // a0 a0 a2 a2 a1 a1 a3 a3
  v8f zw = __builtin_shuffle(z, w, even) + __builtin_shuffle(z, w, odd);  // a4 a4 a6 a6 a5 a5 a7 a7
  v8f r = __builtin_shuffle(xy, zw, v8i{0, 2, 8, 10, 4, 6, 12, 14}) +
          __builtin_shuffle(xy, zw, v8i{1, 3, 9, 11, 5, 7, 13, 15});  // a0 a2 a4 a6 a1 a3 a5 a7
  return __builtin_shuffle(r, v8i{0, 4, 1, 5, 2, 6, 3, 7});
}

// float32 to bfloat16 bits as c10::BFloat16 does (to nearest, ties to even; a NaN becomes 0x7fc0),
// so a row the kernel writes is the row KvCache::write would have written.
AJET_INLINE uint16_t to_bfloat16(float x) {
  if (std::isnan(x)) return 0x7fc0;
  uint32_t bits;
  std::memcpy(&bits, &x, sizeof(bits));
  return static_cast<uint16_t>((bits + 0x7fff + ((bits >> 16) & 1)) >> 16);
}
AJET_INLINE void store_row(float* dst, const float* src, int64_t d) {
  std::memcpy(dst, src, sizeof(float) * d);
}
AJET_INLINE void store_row(uint16_t* dst, const float* src, int64_t d) {
  for (int64_t i = 0; i < d; ++i) dst[i] = to_bfloat16(src[i]);
}

// Softmax of each of the G rows of s (G, len) in place; returns nothing, rows sum to 1.
AJET_INLINE void softmax_rows(float* s, int64_t group, int64_t len) {
  for (int64_t h = 0; h < group; ++h) {
    float* row = s + h * len;
    const float m = max_of(row, len);
    float sum = 0;
    int64_t p = 0;
    v8f sum8 = {};
    for (; p + 8 <= len; p += 8) {
      const v8f e = exp8_nonpositive(load8(row + p) - splat8(m));
      store8(row + p, e);
      sum8 += e;
    }
    for (; p < len; ++p) {
      const float e = exp_nonpositive(row[p] - m);
      row[p] = e;
      sum += e;
    }
    sum += hsum8(sum8);
    const float inv = 1.0f / sum;
#pragma omp simd
    for (int64_t p = 0; p < len; ++p) row[p] *= inv;
  }
}

// Where each visible position of the sequence keeps its key (and value) row for kv head g: filled
// once per item by walking the block table, so the inner loops never divide by the block size.
struct RowAddress {
  const int64_t* offsets;  // (len)
  AJET_INLINE int64_t offset(int64_t p) const { return offsets[p]; }
};

// Element offset of the first row of kv head g in cache block `block`.
AJET_INLINE int64_t block_rows(const CpuAttentionArgs& a, int32_t block, int64_t g) {
  return (static_cast<int64_t>(block) * a.kv_heads + g) * a.block_size * a.head_dim;
}

void fill_offsets(const CpuAttentionArgs& a, const int32_t* table, int64_t kv_head, int64_t len,
                  int64_t* out) {
  int64_t p = 0;
  for (int64_t b = 0; p < len; ++b) {
    const int64_t base = block_rows(a, table[b], kv_head);
    for (int64_t j = 0; j < a.block_size && p < len; ++j, ++p) out[p] = base + j * a.head_dim;
  }
}

// Position of a tile's first token in its sequence.
AJET_INLINE int64_t first_position(const AttentionSegment& seg, const AttentionTile& tile) {
  return seg.start_pos + (tile.first_token - seg.token_begin);
}

// One item: R = T * G query rows (T tokens of the tile, G heads each) against one kv head. Row r is
// token r / G, head r % G; token i sees positions [0, first_len + i). Scores for all rows (R, len),
// causal mask, softmax, then the weighted sum of values.
struct Item {
  const float* q;      // first row: (T, H, D) rows of the tile's first token, offset to head g * G
  float* out;          // same layout as q
  int64_t row_stride;  // floats between tokens (H * D)
  int64_t tokens, group, first_len;
  const float* const* q_rows;  // (tokens * group) q_row(r) of every row, computed once per item
  AJET_INLINE const float* q_row(int64_t r, int64_t d) const {
    return q + (r / group) * row_stride + (r % group) * d;
  }
  AJET_INLINE float* out_row(int64_t r, int64_t d) const {
    return out + (r / group) * row_stride + (r % group) * d;
  }
  AJET_INLINE int64_t row_len(int64_t r) const { return first_len + r / group; }
};

// Normalises each row over the positions it may see and zeroes the rest. Each row's softmax runs
// over its own length, never the tile's: which of its positions fall in the vector lanes and which
// in the scalar tail then depends on the row alone, so a token's attention is the same bits
// whatever tile (prefill chunk, decode step) it is computed in (model::set_batch_invariant relies
// on it).
AJET_INLINE void mask_and_softmax(const Item& it, float* s, int64_t len) {
  const int64_t rows = it.tokens * it.group;
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t row_len = it.row_len(r);
    softmax_rows(s + r * len, 1, row_len);
    for (int64_t p = row_len; p < len; ++p) s[r * len + p] = 0.0f;
  }
}

// Scores of query rows [r0, r0 + RB) against the 8 keys kp: each key vector is loaded once for the
// RB rows (a decode token's G heads share its kv head), 8 * RB accumulators.
template <typename T, int RB>
AJET_INLINE void score_rows(const Item& it, const T* const* kp, int64_t nd, int64_t r0, float* s,
                            int64_t len, int64_t p0, const v8f& scale) {
  const float* qr[RB];
  for (int r = 0; r < RB; ++r)
    qr[r] = it.q_rows[r0 + r];  // not q_row: a division per row and 8 keys
  v8f acc[RB][8] = {};
  for (int64_t c = 0; c < nd; ++c) {
    v8f k[8];
    for (int i = 0; i < 8; ++i) k[i] = load8(kp[i] + 8 * c);
    for (int r = 0; r < RB; ++r) {
      const v8f qv = load8(qr[r] + 8 * c);
      for (int i = 0; i < 8; ++i) acc[r][i] += qv * k[i];
    }
  }
  for (int r = 0; r < RB; ++r) store8(s + (r0 + r) * len + p0, reduce8x8(acc[r]) * scale);
}

// Outputs of rows [r0, r0 + RB) of one token: the weighted sum of values, each value vector loaded
// once for the RB rows.
template <typename T, int RB, int ND>
AJET_INLINE void value_rows(const Item& it, const T* values, const RowAddress& addr, const float* s,
                            int64_t len, int64_t r0) {
  constexpr int64_t d = ND * 8;
  v8f acc[RB][ND] = {};
  const float* w[RB];
  for (int r = 0; r < RB; ++r) w[r] = s + (r0 + r) * len;
  const int64_t row_len = it.row_len(r0);
  auto position = [&](int64_t p, const v8f* wv) {
    const T* vp = values + addr.offset(p);
    for (int64_t c = 0; c < ND; ++c) {
      const v8f v = load8(vp + 8 * c);
      for (int r = 0; r < RB; ++r) acc[r][c] += wv[r] * v;
    }
  };
  int64_t p = 0;
  // 8 positions' weights per load, each broadcast with lane8 (splat8 of a scalar costs 9 µops
  // here).
  for (; p + 8 <= row_len; p += 8) {
    v8f w8[RB];
    for (int r = 0; r < RB; ++r) w8[r] = load8(w[r] + p);
    [&]<int... J>(std::integer_sequence<int, J...>) {
      auto one = [&]<int K>() {
        v8f wv[RB];
        for (int r = 0; r < RB; ++r) wv[r] = lane8<K>(w8[r]);
        position(p + K, wv);
      };
      (one.template operator()<J>(), ...);
    }
    (std::make_integer_sequence<int, 8>{});
  }
  for (; p < row_len; ++p) {
    v8f wv[RB];
    for (int r = 0; r < RB; ++r) wv[r] = splat8(w[r][p]);
    position(p, wv);
  }
  for (int r = 0; r < RB; ++r) {
    float* o = it.out_row(r0 + r, d);
    for (int64_t c = 0; c < ND; ++c) store8(o + 8 * c, acc[r][c]);
  }
}

// D = 8 * nd: scores of 8 keys at a time, then values accumulated in registers. With ND > 0 (nd =
// ND, a compile-time constant at the common head sizes) two query rows go at a time, each loaded
// key and value serving both; ND = 0 takes nd at run time (any D = 8 * nd <= 256), one row at a
// time.
template <typename T, int ND>
AJET_INLINE void attend_item_vec(const CpuAttentionArgs& a, const RowAddress& addr, const Item& it,
                                 float* s, int64_t runtime_nd = ND) {
  const T* keys = static_cast<const T*>(a.keys);
  const T* values = static_cast<const T*>(a.values);
  constexpr int64_t kLine = 64 / sizeof(T);  // elements per cache line
  const int64_t nd = ND > 0 ? ND : runtime_nd, d = nd * 8;
  // Two rows share each load while their accumulators fit the registers (2 x 8 for the scores, 2 x
  // ND for the values: AVX-512's 32).
  constexpr int kPair = ND > 0 && ND <= 8 ? 2 : 1;
  const int64_t rows = it.tokens * it.group;
  const int64_t len = it.first_len + it.tokens - 1;  // the tile's last token sees the most
  const v8f scale8 = splat8(a.scale);                // once per item (splat8 is 9 µops)
  int64_t p0 = 0;
  for (; p0 + 8 <= len; p0 += 8) {
    const T* kp[8];
    for (int i = 0; i < 8; ++i) kp[i] = keys + addr.offset(p0 + i);
    // The cache is far bigger than any CPU cache and its blocks are scattered, so the hardware
    // prefetcher restarts at every block: ask for the next keys, and for these positions' values
    // (read after the softmax), while the dot products run.
    for (int i = 0; i < 8; ++i) {
      const T* vp = values + addr.offset(p0 + i);
      for (int64_t line = 0; line < d; line += kLine) __builtin_prefetch(vp + line);
      if (p0 + 8 + i < len) {
        const T* next = keys + addr.offset(p0 + 8 + i);
        for (int64_t line = 0; line < d; line += kLine) __builtin_prefetch(next + line);
      }
    }
    int64_t r = 0;
    for (; r + kPair <= rows; r += kPair) score_rows<T, kPair>(it, kp, nd, r, s, len, p0, scale8);
    for (; r < rows; ++r) score_rows<T, 1>(it, kp, nd, r, s, len, p0, scale8);
  }
  for (; p0 < len; ++p0) {
    const T* kp = keys + addr.offset(p0);
    for (int64_t r = 0; r < rows; ++r) {
      const float* qr = it.q_rows[r];
      v8f acc = {};
      for (int64_t c = 0; c < nd; ++c) acc += load8(qr + 8 * c) * load8(kp + 8 * c);
      s[r * len + p0] = hsum8(acc) * a.scale;
    }
  }
  mask_and_softmax(it, s, len);
  if constexpr (ND > 0) {
    // Pairs of one token's rows only: their lengths are equal, so no row multiplies another's
    // values by a masked weight (0 * an infinite value would be NaN).
    for (int64_t t = 0; t < it.tokens; ++t) {
      int64_t r = t * it.group;
      const int64_t end = r + it.group;
      for (; r + kPair <= end; r += kPair) value_rows<T, kPair, ND>(it, values, addr, s, len, r);
      for (; r < end; ++r) value_rows<T, 1, ND>(it, values, addr, s, len, r);
    }
  } else {
    constexpr int64_t kMaxNd = 32;  // D <= 256 keeps the accumulators on the stack
    for (int64_t r = 0; r < rows; ++r) {
      const float* w = s + r * len;
      v8f acc[kMaxNd] = {};
      for (int64_t p = 0; p < it.row_len(r); ++p) {
        const T* vp = values + addr.offset(p);
        const v8f wv = splat8(w[p]);
        for (int64_t c = 0; c < nd; ++c) acc[c] += wv * load8(vp + 8 * c);
      }
      float* o = it.out_row(r, d);
      for (int64_t c = 0; c < nd; ++c) store8(o + 8 * c, acc[c]);
    }
  }
}

// Any D: plain loops (the vectoriser does what it can).
template <typename T>
AJET_INLINE void attend_item_scalar(const CpuAttentionArgs& a, const RowAddress& addr,
                                    const Item& it, float* s) {
  const T* keys = static_cast<const T*>(a.keys);
  const T* values = static_cast<const T*>(a.values);
  const int64_t d = a.head_dim;
  const int64_t rows = it.tokens * it.group;
  const int64_t len = it.first_len + it.tokens - 1;
  for (int64_t p = 0; p < len; ++p) {
    const T* kp = keys + addr.offset(p);
    for (int64_t r = 0; r < rows; ++r) {
      const float* qr = it.q_row(r, d);
      float dot = 0;
      for (int64_t i = 0; i < d; ++i) dot += qr[i] * to_float(kp[i]);
      s[r * len + p] = dot * a.scale;
    }
  }
  mask_and_softmax(it, s, len);
  for (int64_t r = 0; r < rows; ++r) {
    float* o = it.out_row(r, d);
    std::memset(o, 0, sizeof(float) * d);
    for (int64_t p = 0; p < it.row_len(r); ++p) {
      const T* vp = values + addr.offset(p);
      const float w = s[r * len + p];
      for (int64_t i = 0; i < d; ++i) o[i] += w * to_float(vp[i]);
    }
  }
}

template <typename T>
AJET_INLINE void attend_items(const CpuAttentionArgs& a, int64_t begin, int64_t end,
                              AttentionScratch& scratch, int64_t then) {
  const int64_t group = a.heads / a.kv_heads;
  const int64_t d = a.head_dim;
  // Zig-zag over tiles (0, last, 1, last - 1, ...) so every contiguous range of items is balanced.
  auto tile_of = [&](int64_t item) -> const AttentionTile& {
    const int64_t slot = item / a.kv_heads;
    return a.tiles[slot % 2 == 0 ? slot / 2 : a.num_tiles - 1 - slot / 2];
  };
  for (int64_t item = begin; item < end; ++item) {
    const int64_t g = item % a.kv_heads;
    const AttentionTile& tile = tile_of(item);
    const AttentionSegment& seg = a.segments[tile.segment];
    if (const int64_t following = item + 1 < end ? item + 1 : then; following >= 0) {
      // The next item's first keys (the start of its first block) come in while this item runs: the
      // kernel prefetches ahead within an item, but the first keys of each would otherwise wait for
      // memory, ~1,000 times a step per thread on `small` x64.
      const AttentionTile& next = tile_of(following);
      const AttentionSegment& ns = a.segments[next.segment];
      const int64_t rows_ahead =
          std::min<int64_t>({8, a.block_size, first_position(ns, next) + next.num_tokens});
      const int64_t first = block_rows(a, a.block_tables[ns.table_begin], following % a.kv_heads);
      const char* kp = static_cast<const char*>(a.keys) + first * static_cast<int64_t>(sizeof(T));
      const int64_t bytes = rows_ahead * d * static_cast<int64_t>(sizeof(T));
      for (int64_t line = 0; line < bytes; line += 64) __builtin_prefetch(kp + line);
    }
    Item it;
    it.q = a.q + (tile.first_token * a.heads + g * group) * d;
    it.out = a.out + (tile.first_token * a.heads + g * group) * d;
    it.row_stride = a.heads * d;
    it.tokens = tile.num_tokens;
    it.group = group;
    const int64_t first_pos = first_position(seg, tile);
    it.first_len = first_pos + 1;
    const int64_t len = it.first_len + it.tokens - 1;
    const size_t need = static_cast<size_t>(it.tokens * group * len);
    if (scratch.scores.size() < need) scratch.scores.resize(need);
    if (scratch.offsets.size() < static_cast<size_t>(len))
      scratch.offsets.resize(static_cast<size_t>(len));
    fill_offsets(a, a.block_tables + seg.table_begin, g, len, scratch.offsets.data());
    const int64_t rows = it.tokens * group;
    if (scratch.q_rows.size() < static_cast<size_t>(rows))
      scratch.q_rows.resize(static_cast<size_t>(rows));
    for (int64_t r = 0; r < rows; ++r) scratch.q_rows[static_cast<size_t>(r)] = it.q_row(r, d);
    it.q_rows = scratch.q_rows.data();
    if (a.new_keys != nullptr) {
      // This tile's new rows of kv head g (written by no other item, read by none but this one).
      T* keys = static_cast<T*>(const_cast<void*>(a.keys));
      T* values = static_cast<T*>(const_cast<void*>(a.values));
      for (int64_t i = 0; i < it.tokens; ++i) {
        const int64_t pos = first_pos + i;
        const int64_t dst = scratch.offsets[static_cast<size_t>(pos)];
        const int64_t src = ((tile.first_token + i) * a.kv_heads + g) * d;
        store_row(keys + dst, a.new_keys + src, d);
        store_row(values + dst, a.new_values + src, d);
      }
    }
    const RowAddress addr{scratch.offsets.data()};
    float* s = scratch.scores.data();  // (R, len) scores, then weights
    // Constant ND at the common head sizes lets the compiler unroll and keep accumulators in
    // registers.
    switch (d) {
      case 16: attend_item_vec<T, 2>(a, addr, it, s); break;
      case 32: attend_item_vec<T, 4>(a, addr, it, s); break;
      case 64: attend_item_vec<T, 8>(a, addr, it, s); break;
      case 128: attend_item_vec<T, 16>(a, addr, it, s); break;
      default:
        if (d % 8 == 0 && d <= 256) {
          attend_item_vec<T, 0>(a, addr, it, s, d / 8);
        } else {
          attend_item_scalar<T>(a, addr, it, s);
        }
    }
  }
}

}  // namespace

AJET_MULTIVERSION
void attend_cpu_f32(const CpuAttentionArgs& a, int64_t begin, int64_t end,
                    AttentionScratch& scratch, int64_t then) {
  if (a.kv_type == KvElementType::kBFloat16) {
    attend_items<uint16_t>(a, begin, end, scratch, then);
  } else {
    attend_items<float>(a, begin, end, scratch, then);
  }
}

}  // namespace ajet::infer
