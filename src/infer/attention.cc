#include "infer/attention.h"

#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>

#include "common/error.h"

// The CPU kernel is compiled for AVX-512, AVX2+FMA and baseline x86-64, picked at load time, so one
// binary is fast on the machine it runs on without -march=native.
#if defined(__GNUC__) && defined(__x86_64__) && !defined(__clang__)
#define AJET_MULTIVERSION __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define AJET_MULTIVERSION
#endif
#define AJET_INLINE inline __attribute__((always_inline))

namespace ajet::infer {
namespace {

at::Tensor int64_tensor(const std::vector<int64_t>& values, at::Device device) {
  return at::tensor(at::ArrayRef<int64_t>(values), at::TensorOptions().dtype(at::kLong)).to(device);
}

AJET_INLINE float dot(const float* a, const float* b, int64_t n) {
  float sum = 0;
#pragma omp simd reduction(+ : sum)
  for (int64_t i = 0; i < n; ++i) sum += a[i] * b[i];
  return sum;
}

AJET_INLINE void axpy(float* y, float a, const float* x, int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) y[i] += a * x[i];
}

// exp(x) for x <= 0 (softmax after subtracting the max), Cephes-style: x = n ln2 + r, |r| <= ln2 / 2,
// degree-6 polynomial for e^r, 2^n from the exponent bits. Relative error ~2e-7; branch-free so the
// softmax loop vectorises. Inputs below -87 return ~2^-126 instead of underflowing to 0.
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

struct KernelArgs {
  const float* q;       // (N, H, D)
  float* out;           // (N, H, D)
  const float* keys;    // (num_blocks, block_size, Hkv, D)
  const float* values;  // (num_blocks, block_size, Hkv, D)
  int64_t heads, kv_heads, head_dim, block_size;
  float scale;
  const AttentionBatch* batch;
};

// Work items [begin, end) of (token, kv head) pairs: the G = H / Hkv query heads of one token that read
// one kv head, so each cached key and value is loaded once for all of them. Two passes: scores, then
// softmax-weighted sum of values; float32 throughout. `scores` is scratch for (G, L).
AJET_MULTIVERSION
void attend_items(const KernelArgs& a, int64_t begin, int64_t end, std::vector<float>& scores) {
  const int64_t group = a.heads / a.kv_heads;
  const int64_t d = a.head_dim;
  const int64_t bs = a.block_size;
  const int64_t pos_stride = a.kv_heads * d;  // floats between consecutive positions of a block
  const std::vector<AttentionSegment>& segments = a.batch->segments();
  const int32_t* tables = a.batch->block_tables().data();
  const int32_t* token_segment = a.batch->token_segment().data();
  float inv_sum[64];
  for (int64_t item = begin; item < end; ++item) {
    const int64_t t = item / a.kv_heads;
    const int64_t g = item % a.kv_heads;
    const AttentionSegment& seg = segments[token_segment[t]];
    const int64_t len = seg.start_pos + (t - seg.token_begin) + 1;  // positions [0, len) are visible
    const int32_t* table = tables + seg.table_begin;
    const float* qg = a.q + (t * a.heads + g * group) * d;  // (G, D)
    if (scores.size() < static_cast<size_t>(group * len)) scores.resize(static_cast<size_t>(group * len));
    float* s = scores.data();  // (G, len)

    for (int64_t p0 = 0, b = 0; p0 < len; p0 += bs, ++b) {
      const int64_t n = std::min(bs, len - p0);
      const float* kb = a.keys + (static_cast<int64_t>(table[b]) * bs * a.kv_heads + g) * d;
      for (int64_t j = 0; j < n; ++j) {
        const float* kp = kb + j * pos_stride;
        for (int64_t h = 0; h < group; ++h) s[h * len + p0 + j] = dot(qg + h * d, kp, d) * a.scale;
      }
    }
    for (int64_t h = 0; h < group; ++h) {
      float* row = s + h * len;
      float m = -std::numeric_limits<float>::infinity();
#pragma omp simd reduction(max : m)
      for (int64_t p = 0; p < len; ++p) m = std::max(m, row[p]);
      float sum = 0;
#pragma omp simd reduction(+ : sum)
      for (int64_t p = 0; p < len; ++p) {
        const float e = exp_nonpositive(row[p] - m);
        row[p] = e;
        sum += e;
      }
      inv_sum[h] = 1.0f / sum;
    }
    float* og = a.out + (t * a.heads + g * group) * d;  // (G, D)
    std::memset(og, 0, sizeof(float) * group * d);
    for (int64_t p0 = 0, b = 0; p0 < len; p0 += bs, ++b) {
      const int64_t n = std::min(bs, len - p0);
      const float* vb = a.values + (static_cast<int64_t>(table[b]) * bs * a.kv_heads + g) * d;
      for (int64_t j = 0; j < n; ++j) {
        const float* vp = vb + j * pos_stride;
        for (int64_t h = 0; h < group; ++h) axpy(og + h * d, s[h * len + p0 + j], vp, d);
      }
    }
    for (int64_t h = 0; h < group; ++h) {
      float* o = og + h * d;
      const float f = inv_sum[h];
#pragma omp simd
      for (int64_t i = 0; i < d; ++i) o[i] *= f;
    }
  }
}

at::Tensor attention_cpu_kernel(const at::Tensor& q, const KvCache& cache, int64_t layer, const AttentionBatch& batch) {
  const int64_t n = q.size(0), heads = q.size(1), d = q.size(2);
  const int64_t kv_heads = cache.shape().num_kv_heads;
  if (heads / kv_heads > 64) invalid_argument("attention: more than 64 query heads per kv head");
  at::Tensor qc = q.contiguous();
  at::Tensor out = at::empty({n, heads, d}, q.options());
  at::Tensor keys = cache.keys(layer);
  at::Tensor values = cache.values(layer);
  KernelArgs args{qc.data_ptr<float>(), out.data_ptr<float>(), keys.data_ptr<float>(), values.data_ptr<float>(),
                  heads, kv_heads, d, cache.shape().block_size, static_cast<float>(1.0 / std::sqrt(double(d))),
                  &batch};
  at::parallel_for(0, n * kv_heads, 1, [&](int64_t begin, int64_t end) {
    thread_local std::vector<float> scores;
    attend_items(args, begin, end, scores);
  });
  return out.view({n, heads * d});
}

at::Tensor attention_torch_ops(const at::Tensor& q, const KvCache& cache, int64_t layer, const AttentionBatch& batch) {
  const int64_t n = q.size(0), heads = q.size(1), d = q.size(2);
  const int64_t kv_heads = cache.shape().num_kv_heads;
  const int64_t group = heads / kv_heads;
  const double scale = 1.0 / std::sqrt(static_cast<double>(d));
  at::Tensor keys = cache.keys(layer);  // (num_blocks, block_size, Hkv, D)
  at::Tensor values = cache.values(layer);
  at::Tensor out = at::empty({n, heads, d}, q.options());
  const at::TensorOptions index_options = at::TensorOptions().dtype(at::kLong).device(q.device());
  for (const AttentionSegment& seg : batch.segments()) {
    const int64_t t = seg.num_tokens;
    const int64_t len = seg.start_pos + t;
    at::Tensor table = batch.tables_tensor().narrow(0, seg.table_begin, seg.table_size);
    at::Tensor k = keys.index_select(0, table).reshape({-1, kv_heads, d}).narrow(0, 0, len).to(at::kFloat);  // (L, Hkv, D)
    at::Tensor v = values.index_select(0, table).reshape({-1, kv_heads, d}).narrow(0, 0, len).to(at::kFloat);
    // Query head h = kv * G + i reads kv head kv: (T, H, D) → (Hkv, G * T, D).
    at::Tensor qs = q.narrow(0, seg.token_begin, t).to(at::kFloat).reshape({t, kv_heads, group, d})
                        .permute({1, 2, 0, 3}).reshape({kv_heads, group * t, d});
    at::Tensor scores = at::matmul(qs, k.permute({1, 2, 0})).mul_(scale).view({kv_heads, group, t, len});
    at::Tensor query_pos = at::arange(seg.start_pos, len, index_options).unsqueeze(1);  // (T, 1)
    at::Tensor key_pos = at::arange(0, len, index_options).unsqueeze(0);                // (1, L)
    scores.masked_fill_(key_pos > query_pos, -std::numeric_limits<float>::infinity());
    at::Tensor probs = at::softmax(scores, -1).view({kv_heads, group * t, len});
    at::Tensor o = at::matmul(probs, v.permute({1, 0, 2}));  // (Hkv, G * T, D)
    out.narrow(0, seg.token_begin, t).copy_(o.view({kv_heads, group, t, d}).permute({2, 0, 1, 3}).reshape({t, heads, d}));
  }
  return out.view({n, heads * d});
}

}  // namespace

AttentionBatch::AttentionBatch(std::vector<AttentionSegment> segments, std::vector<int32_t> block_tables,
                               int64_t block_size, at::Device device)
    : segments_(std::move(segments)), block_tables_(std::move(block_tables)), block_size_(block_size) {
  std::vector<int64_t> positions;
  for (size_t s = 0; s < segments_.size(); ++s) {
    const AttentionSegment& seg = segments_[s];
    if (seg.token_begin != static_cast<int64_t>(token_segment_.size())) {
      fail(ErrorCode::kInternal, "attention batch: segments must tile the batch in order");
    }
    if (seg.table_begin + seg.table_size > static_cast<int64_t>(block_tables_.size())) {
      fail(ErrorCode::kInternal, "attention batch: block table out of range");
    }
    for (int64_t i = 0; i < seg.num_tokens; ++i) {
      const int64_t pos = seg.start_pos + i;
      if (pos / block_size >= seg.table_size) {
        fail(ErrorCode::kInternal, "attention batch: position " + std::to_string(pos) + " has no block");
      }
      token_segment_.push_back(static_cast<int32_t>(s));
      slots_.push_back(int64_t{block_tables_[seg.table_begin + pos / block_size]} * block_size + pos % block_size);
      positions.push_back(pos);
    }
  }
  slots_tensor_ = int64_tensor(slots_, device);
  positions_ = int64_tensor(positions, device);
  tables_tensor_ = int64_tensor(std::vector<int64_t>(block_tables_.begin(), block_tables_.end()), device);
}

at::Tensor cached_attention(const at::Tensor& q, const KvCache& cache, int64_t layer, const AttentionBatch& batch,
                            AttentionImpl impl) {
  const int64_t kv_heads = cache.shape().num_kv_heads;
  if (q.dim() != 3 || q.size(0) != batch.num_tokens() || q.size(2) != cache.shape().head_dim ||
      q.size(1) % kv_heads != 0) {
    invalid_argument("attention: q must be (N, H, D) with N = batch tokens, D = cache head_dim, H % Hkv == 0");
  }
  const bool kernel_fits = q.is_cpu() && q.scalar_type() == at::kFloat && cache.keys(layer).is_cpu() &&
                           cache.keys(layer).scalar_type() == at::kFloat;
  if (impl == AttentionImpl::kAuto) impl = kernel_fits ? AttentionImpl::kCpuKernel : AttentionImpl::kTorchOps;
  if (impl == AttentionImpl::kCpuKernel) {
    if (!kernel_fits) invalid_argument("attention: the CPU kernel needs float32 tensors on the CPU");
    return attention_cpu_kernel(q, cache, layer, batch);
  }
  return attention_torch_ops(q, cache, layer, batch);
}

}  // namespace ajet::infer
