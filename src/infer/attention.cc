#include "infer/attention.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>

#include "common/error.h"
#include "model/parallel.h"

namespace ajet::infer {
at::Tensor int64_tensor(const std::vector<int64_t>& values, at::Device device) {
  return at::tensor(at::ArrayRef<int64_t>(values), at::TensorOptions().dtype(at::kLong)).to(device);
}

namespace {

// new_k / new_v: the batch's (N, Hkv, D) float32 keys and values for the items to write themselves
// (every tile a whole segment), or undefined when they are in the cache already.
at::Tensor attention_cpu_kernel(const at::Tensor& q, const KvCache& cache, int64_t layer,
                                const AttentionBatch& batch, const at::Tensor& new_k = {},
                                const at::Tensor& new_v = {}) {
  const int64_t n = q.size(0), heads = q.size(1), d = q.size(2);
  const int64_t kv_heads = cache.shape().num_kv_heads;
  at::Tensor qc = q.contiguous();
  at::Tensor out = at::empty({n, heads, d}, q.options());
  at::Tensor keys = cache.keys(layer);
  at::Tensor values = cache.values(layer);
  const KvElementType kv_type =
      keys.scalar_type() == at::kBFloat16 ? KvElementType::kBFloat16 : KvElementType::kFloat32;
  CpuAttentionArgs args{qc.data_ptr<float>(),
                        out.data_ptr<float>(),
                        keys.data_ptr(),
                        values.data_ptr(),
                        kv_type,
                        heads,
                        kv_heads,
                        d,
                        cache.shape().block_size,
                        static_cast<float>(1.0 / std::sqrt(double(d))),
                        batch.segments().data(),
                        batch.block_tables().data(),
                        batch.tiles().data(),
                        static_cast<int64_t>(batch.tiles().size())};
  if (new_k.defined()) {
    args.new_keys = new_k.data_ptr<float>();
    args.new_values = new_v.data_ptr<float>();
  }
  // A tile's kv heads at a time (adjacent in each block): 4 items of `small` decode are ~12 µs.
  model::parallel_for_stealing(static_cast<int64_t>(batch.tiles().size()) * kv_heads, 1, kv_heads,
                               [&](int64_t begin, int64_t end, int64_t then) {
                                 thread_local AttentionScratch scratch;
                                 attend_cpu_f32(args, begin, end, scratch, then);
                               });
  return out.view({n, heads * d});
}

at::Tensor attention_torch_ops(const at::Tensor& q, const KvCache& cache, int64_t layer,
                               const AttentionBatch& batch) {
  const int64_t n = q.size(0), heads = q.size(1), d = q.size(2);
  const int64_t kv_heads = cache.shape().num_kv_heads;
  const int64_t group = heads / kv_heads;
  const double scale = 1.0 / std::sqrt(static_cast<double>(d));
  at::Tensor keys = cache.keys(layer);  // (num_blocks, Hkv, block_size, D)
  at::Tensor values = cache.values(layer);
  at::Tensor out = at::empty({n, heads, d}, q.options());
  const at::TensorOptions index_options = at::TensorOptions().dtype(at::kLong).device(q.device());
  // Decode rows (one-token segments) in one batch: a few launches per layer instead of ~15 per
  // sequence, which is what a GPU step is bound by. Rows padded to the longest length; padding
  // masked out.
  const AttentionBatch::DecodeGather& dg = batch.decode_gather(kv_heads);
  if (!dg.segments.empty()) {
    const int64_t b = static_cast<int64_t>(dg.segments.size()), len = dg.max_len;
    at::Tensor k = keys.reshape({-1, d})
                       .index_select(0, dg.cache_rows)
                       .view({b, kv_heads, len, d})
                       .to(at::kFloat);
    at::Tensor v = values.reshape({-1, d})
                       .index_select(0, dg.cache_rows)
                       .view({b, kv_heads, len, d})
                       .to(at::kFloat);
    at::Tensor qs =
        q.index_select(0, dg.rows).to(at::kFloat).view({b, kv_heads, group, d});  // (B, Hkv, G, D)
    at::Tensor scores = at::matmul(qs, k.transpose(2, 3)).mul_(scale);            // (B, Hkv, G, L)
    scores.masked_fill_(dg.padding, -std::numeric_limits<float>::infinity());
    at::Tensor o = at::matmul(at::softmax(scores, -1), v);  // (B, Hkv, G, D)
    out.index_copy_(0, dg.rows, o.view({b, heads, d}).to(out.scalar_type()));
  }
  for (const AttentionSegment& seg : batch.segments()) {
    if (seg.num_tokens == 1) continue;  // attended above
    const int64_t t = seg.num_tokens;
    const int64_t len = seg.start_pos + t;
    at::Tensor table = batch.tables_tensor().narrow(0, seg.table_begin, seg.table_size);
    // (blocks, Hkv, block_size, D) → (L, Hkv, D)
    at::Tensor k = keys.index_select(0, table)
                       .permute({0, 2, 1, 3})
                       .reshape({-1, kv_heads, d})
                       .narrow(0, 0, len)
                       .to(at::kFloat);
    at::Tensor v = values.index_select(0, table)
                       .permute({0, 2, 1, 3})
                       .reshape({-1, kv_heads, d})
                       .narrow(0, 0, len)
                       .to(at::kFloat);
    // Query head h = kv * G + i reads kv head kv: (T, H, D) → (Hkv, G * T, D).
    at::Tensor qs = q.narrow(0, seg.token_begin, t)
                        .to(at::kFloat)
                        .reshape({t, kv_heads, group, d})
                        .permute({1, 2, 0, 3})
                        .reshape({kv_heads, group * t, d});
    at::Tensor scores =
        at::matmul(qs, k.permute({1, 2, 0})).mul_(scale).view({kv_heads, group, t, len});
    at::Tensor query_pos = at::arange(seg.start_pos, len, index_options).unsqueeze(1);  // (T, 1)
    at::Tensor key_pos = at::arange(0, len, index_options).unsqueeze(0);                // (1, L)
    scores.masked_fill_(key_pos > query_pos, -std::numeric_limits<float>::infinity());
    at::Tensor probs = at::softmax(scores, -1).view({kv_heads, group * t, len});
    at::Tensor o = at::matmul(probs, v.permute({1, 0, 2}));  // (Hkv, G * T, D)
    out.narrow(0, seg.token_begin, t)
        .copy_(o.view({kv_heads, group, t, d}).permute({2, 0, 1, 3}).reshape({t, heads, d}));
  }
  return out.view({n, heads * d});
}

// The implementation `impl` resolves to for q over this cache (kAuto: the kernel where it fits);
// fails when the kernel is asked for and does not fit.
AttentionImpl resolve_impl(const at::Tensor& q, const KvCache& cache, int64_t layer,
                           const AttentionBatch& batch, AttentionImpl impl) {
  const int64_t kv_heads = cache.shape().num_kv_heads;
  if (q.dim() != 3 || q.size(0) != batch.num_tokens() || q.size(2) != cache.shape().head_dim ||
      q.size(1) % kv_heads != 0) {
    invalid_argument(
        "attention: q must be (N, H, D) with N = batch tokens, D = cache head_dim, H % Hkv == 0");
  }
  const at::ScalarType kv = cache.keys(layer).scalar_type();
  const bool kernel_fits = q.is_cpu() && q.scalar_type() == at::kFloat &&
                           cache.keys(layer).is_cpu() && (kv == at::kFloat || kv == at::kBFloat16);
  if (impl == AttentionImpl::kAuto)
    impl = kernel_fits ? AttentionImpl::kCpuKernel : AttentionImpl::kTorchOps;
  if (impl == AttentionImpl::kCpuKernel && !kernel_fits) {
    invalid_argument(
        "attention: the CPU kernel needs float32 queries and a float32 or bfloat16 cache on the "
        "CPU");
  }
  return impl;
}

}  // namespace

AttentionBatch::AttentionBatch(std::vector<AttentionSegment> segments,
                               std::vector<int32_t> block_tables, int64_t block_size,
                               at::Device device)
    : segments_(std::move(segments)),
      block_tables_(std::move(block_tables)),
      block_size_(block_size),
      device_(device) {
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
        fail(ErrorCode::kInternal,
             "attention batch: position " + std::to_string(pos) + " has no block");
      }
      token_segment_.push_back(static_cast<int32_t>(s));
      slots_.push_back(int64_t{block_tables_[seg.table_begin + pos / block_size]} * block_size +
                       pos % block_size);
      positions.push_back(pos);
    }
    for (int64_t i = 0; i < seg.num_tokens; i += kTileTokens) {
      tiles_.push_back({static_cast<int32_t>(s), static_cast<int32_t>(seg.token_begin + i),
                        static_cast<int32_t>(std::min(kTileTokens, seg.num_tokens - i))});
    }
  }
  slots_tensor_ = int64_tensor(slots_, device);
  positions_ = int64_tensor(positions, device);
  tables_tensor_ =
      int64_tensor(std::vector<int64_t>(block_tables_.begin(), block_tables_.end()), device);
}

const AttentionBatch::DecodeGather& AttentionBatch::decode_gather(int64_t kv_heads) const {
  std::call_once(decode_once_, [&] {
    std::vector<int64_t> rows;
    for (size_t s = 0; s < segments_.size(); ++s) {
      const AttentionSegment& seg = segments_[s];
      if (seg.num_tokens != 1) continue;
      decode_.segments.push_back(static_cast<int32_t>(s));
      decode_.max_len = std::max(decode_.max_len, seg.start_pos + 1);
      rows.push_back(seg.token_begin);
    }
    if (decode_.segments.empty()) return;
    const int64_t b = static_cast<int64_t>(rows.size()), len = decode_.max_len;
    std::vector<int64_t> cache_rows(static_cast<size_t>(b * kv_heads * len),
                                    0);  // padding reads row 0, masked
    std::vector<uint8_t> padding(static_cast<size_t>(b * len), 1);
    for (int64_t i = 0; i < b; ++i) {
      const AttentionSegment& seg = segments_[decode_.segments[i]];
      for (int64_t p = 0; p <= seg.start_pos; ++p) {
        const int64_t block = block_tables_[seg.table_begin + p / block_size_];
        for (int64_t g = 0; g < kv_heads; ++g) {
          cache_rows[(i * kv_heads + g) * len + p] =
              (block * kv_heads + g) * block_size_ + p % block_size_;
        }
        padding[i * len + p] = 0;
      }
    }
    decode_.rows = int64_tensor(rows, device_);
    decode_.cache_rows = int64_tensor(cache_rows, device_);
    decode_.padding =
        at::tensor(at::ArrayRef<uint8_t>(padding), at::TensorOptions().dtype(at::kByte))
            .to(at::kBool)
            .view({b, 1, 1, len})
            .to(device_);
  });
  return decode_;
}

at::Tensor cached_attention(const at::Tensor& q, const KvCache& cache, int64_t layer,
                            const AttentionBatch& batch, AttentionImpl impl) {
  if (resolve_impl(q, cache, layer, batch, impl) == AttentionImpl::kCpuKernel) {
    return attention_cpu_kernel(q, cache, layer, batch);
  }
  return attention_torch_ops(q, cache, layer, batch);
}

at::Tensor write_and_attend(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                            KvCache& cache, int64_t layer, const AttentionBatch& batch,
                            AttentionImpl impl) {
  impl = resolve_impl(q, cache, layer, batch, impl);
  const bool items_write =
      impl == AttentionImpl::kCpuKernel && batch.tiles().size() == batch.segments().size() &&
      k.scalar_type() == at::kFloat && v.scalar_type() == at::kFloat && k.is_cpu() && v.is_cpu() &&
      k.sizes() == v.sizes() && k.dim() == 3 && k.size(0) == batch.num_tokens() &&
      k.size(1) == cache.shape().num_kv_heads && k.size(2) == cache.shape().head_dim;
  if (!items_write) {
    cache.write(layer, k, v, batch.slots(), batch.slots_tensor());
    return impl == AttentionImpl::kCpuKernel ? attention_cpu_kernel(q, cache, layer, batch)
                                             : attention_torch_ops(q, cache, layer, batch);
  }
  return attention_cpu_kernel(q, cache, layer, batch, k.contiguous(), v.contiguous());
}

}  // namespace ajet::infer
