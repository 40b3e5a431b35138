#include "infer/attention.h"

#include <ATen/Parallel.h>

// at::parallel_for below is a header template: under libtorch's OpenMP backend it is a serial loop
// unless this file is compiled with -fopenmp (ajet_link_openmp in CMake).
#if AT_PARALLEL_OPENMP && !defined(INTRA_OP_PARALLEL)
#error "compile with OpenMP (ajet_link_openmp): at::parallel_for would run on one thread"
#endif

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>

#include "common/error.h"

namespace ajet::infer {
at::Tensor int64_tensor(const std::vector<int64_t>& values, at::Device device) {
  return at::tensor(at::ArrayRef<int64_t>(values), at::TensorOptions().dtype(at::kLong)).to(device);
}

namespace {

at::Tensor attention_cpu_kernel(const at::Tensor& q, const KvCache& cache, int64_t layer, const AttentionBatch& batch) {
  const int64_t n = q.size(0), heads = q.size(1), d = q.size(2);
  const int64_t kv_heads = cache.shape().num_kv_heads;
  at::Tensor qc = q.contiguous();
  at::Tensor out = at::empty({n, heads, d}, q.options());
  at::Tensor keys = cache.keys(layer);
  at::Tensor values = cache.values(layer);
  CpuAttentionArgs args{qc.data_ptr<float>(), out.data_ptr<float>(), keys.data_ptr<float>(), values.data_ptr<float>(),
                        heads, kv_heads, d, cache.shape().block_size, static_cast<float>(1.0 / std::sqrt(double(d))),
                        batch.segments().data(), batch.block_tables().data(), batch.tiles().data(),
                        static_cast<int64_t>(batch.tiles().size())};
  at::parallel_for(0, static_cast<int64_t>(batch.tiles().size()) * kv_heads, 1, [&](int64_t begin, int64_t end) {
    thread_local AttentionScratch scratch;
    attend_cpu_f32(args, begin, end, scratch);
  });
  return out.view({n, heads * d});
}

at::Tensor attention_torch_ops(const at::Tensor& q, const KvCache& cache, int64_t layer, const AttentionBatch& batch) {
  const int64_t n = q.size(0), heads = q.size(1), d = q.size(2);
  const int64_t kv_heads = cache.shape().num_kv_heads;
  const int64_t group = heads / kv_heads;
  const double scale = 1.0 / std::sqrt(static_cast<double>(d));
  at::Tensor keys = cache.keys(layer);  // (num_blocks, Hkv, block_size, D)
  at::Tensor values = cache.values(layer);
  at::Tensor out = at::empty({n, heads, d}, q.options());
  const at::TensorOptions index_options = at::TensorOptions().dtype(at::kLong).device(q.device());
  for (const AttentionSegment& seg : batch.segments()) {
    const int64_t t = seg.num_tokens;
    const int64_t len = seg.start_pos + t;
    at::Tensor table = batch.tables_tensor().narrow(0, seg.table_begin, seg.table_size);
    // (blocks, Hkv, block_size, D) → (L, Hkv, D)
    at::Tensor k = keys.index_select(0, table).permute({0, 2, 1, 3}).reshape({-1, kv_heads, d}).narrow(0, 0, len).to(at::kFloat);
    at::Tensor v = values.index_select(0, table).permute({0, 2, 1, 3}).reshape({-1, kv_heads, d}).narrow(0, 0, len).to(at::kFloat);
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
    for (int64_t i = 0; i < seg.num_tokens; i += kTileTokens) {
      tiles_.push_back({static_cast<int32_t>(s), static_cast<int32_t>(seg.token_begin + i),
                        static_cast<int32_t>(std::min(kTileTokens, seg.num_tokens - i))});
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
