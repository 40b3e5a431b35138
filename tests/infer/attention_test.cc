// Cached attention against an independent reference: for each sequence, its keys and values as one
// contiguous (L, Hkv, D) tensor and plain masked softmax(q k^T / sqrt(D)) v. The batch mixes decode
// tokens and prefill chunks, block tables are scattered, and head sizes exercise GQA and odd D.
#include "infer/attention.h"

#include "common/error.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>
#include <string>

namespace ajet::infer {
namespace {

struct Case {
  int64_t heads, kv_heads, head_dim, block_size;
};

// Sequence s has `total` tokens cached, of which the last `chunk` are the step's new tokens.
struct SeqSpec {
  int64_t total;
  int64_t chunk;
};

at::Tensor reference(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, int64_t start) {
  // q (T, H, D) at positions start.., k/v (L, Hkv, D): returns (T, H * D) in float64.
  const int64_t t = q.size(0), h = q.size(1), d = q.size(2), hkv = k.size(1);
  at::Tensor out = at::zeros({t, h, d}, at::kDouble);
  for (int64_t head = 0; head < h; ++head) {
    const int64_t kvh = head / (h / hkv);
    at::Tensor qh = q.select(1, head).to(at::kDouble);  // (T, D)
    at::Tensor kh = k.select(1, kvh).to(at::kDouble);   // (L, D)
    at::Tensor vh = v.select(1, kvh).to(at::kDouble);
    at::Tensor scores = qh.matmul(kh.t()) / std::sqrt(double(d));  // (T, L)
    for (int64_t i = 0; i < t; ++i) {
      at::Tensor row = scores[i].narrow(0, 0, start + i + 1);
      at::Tensor w = at::softmax(row, 0);
      out[i][head].copy_(w.matmul(vh.narrow(0, 0, start + i + 1)));
    }
  }
  return out.view({t, h * d});
}

// A batch over a scattered cache: each sequence's keys, values and queries (random), its segment,
// and its earlier positions already in the cache of `layer`, written as a previous step would have
// (one batch holding every cached token). The step's new keys and values are not written.
struct Scenario {
  KvCache cache;
  std::vector<AttentionSegment> segments;
  std::vector<int32_t> tables;
  std::vector<at::Tensor> ks, vs,
      qs;  // per sequence: (total, Hkv, D), (total, Hkv, D), (chunk, H, D)
  int64_t layer = 1;

  // The step's new keys and values, (N, Hkv, D) in batch order.
  at::Tensor new_keys(const std::vector<SeqSpec>& seqs, bool values = false) const {
    std::vector<at::Tensor> rows;
    for (size_t i = 0; i < seqs.size(); ++i) {
      rows.push_back((values ? vs : ks)[i].narrow(0, seqs[i].total - seqs[i].chunk, seqs[i].chunk));
    }
    return at::cat(rows);
  }
};

Scenario make_scenario(const Case& c, const std::vector<SeqSpec>& seqs,
                       at::ScalarType cache_dtype) {
  at::manual_seed(11);
  std::mt19937 gen(5);
  KvCacheShape shape{/*num_layers=*/2, c.kv_heads, c.head_dim, c.block_size};
  int64_t blocks_needed = 0;
  for (const SeqSpec& s : seqs) blocks_needed += (s.total + c.block_size - 1) / c.block_size;
  const int64_t num_blocks = blocks_needed + 7;
  Scenario sc{
      KvCache(shape, num_blocks, at::TensorOptions().dtype(cache_dtype)), {}, {}, {}, {}, {}};
  // Scattered block tables: a shuffled permutation of the blocks, handed out in turn.
  std::vector<int32_t> perm(static_cast<size_t>(num_blocks));
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), gen);
  size_t next_block = 0;
  int64_t row = 0;
  for (const SeqSpec& s : seqs) {
    AttentionSegment seg;
    seg.token_begin = row;
    seg.num_tokens = s.chunk;
    seg.start_pos = s.total - s.chunk;
    seg.table_begin = static_cast<int64_t>(sc.tables.size());
    seg.table_size = (s.total + c.block_size - 1) / c.block_size;
    for (int64_t b = 0; b < seg.table_size; ++b) sc.tables.push_back(perm[next_block++]);
    sc.segments.push_back(seg);
    sc.ks.push_back(at::randn({s.total, c.kv_heads, c.head_dim}));
    sc.vs.push_back(at::randn({s.total, c.kv_heads, c.head_dim}));
    sc.qs.push_back(at::randn({s.chunk, c.heads, c.head_dim}));
    row += s.chunk;
  }
  std::vector<AttentionSegment> history;
  int64_t hist_row = 0;
  std::vector<at::Tensor> hk, hv;
  for (size_t i = 0; i < seqs.size(); ++i) {
    AttentionSegment h = sc.segments[i];
    h.token_begin = hist_row;
    h.start_pos = 0;
    h.num_tokens = seqs[i].total - seqs[i].chunk;
    if (h.num_tokens == 0) continue;
    history.push_back(h);
    hk.push_back(sc.ks[i].narrow(0, 0, h.num_tokens));
    hv.push_back(sc.vs[i].narrow(0, 0, h.num_tokens));
    hist_row += h.num_tokens;
  }
  if (!history.empty()) {
    AttentionBatch past(history, sc.tables, c.block_size, at::kCPU);
    sc.cache.write(sc.layer, at::cat(hk), at::cat(hv), past.slots(), past.slots_tensor());
  }
  return sc;
}

// cache_dtype bfloat16: the cache rounds keys and values to bfloat16 when they are written; the
// reference gets the same rounded values, so both implementations must still match it to 1e-5.
void check_case(const Case& c, const std::vector<SeqSpec>& seqs,
                at::ScalarType cache_dtype = at::kFloat) {
  Scenario sc = make_scenario(c, seqs, cache_dtype);
  KvCache& cache = sc.cache;
  const std::vector<AttentionSegment>& segments = sc.segments;
  const int64_t layer = sc.layer;
  AttentionBatch batch(segments, sc.tables, c.block_size, at::kCPU);
  // float64 input takes the generic index_copy_ path (the float32 row copy wrote the history).
  cache.write(layer, sc.new_keys(seqs).to(at::kDouble), sc.new_keys(seqs, true).to(at::kDouble),
              batch.slots(), batch.slots_tensor());

  at::Tensor q = at::cat(sc.qs);  // (N, H, D)
  at::Tensor kernel = cached_attention(q, cache, layer, batch, AttentionImpl::kCpuKernel);
  at::Tensor ops = cached_attention(q, cache, layer, batch, AttentionImpl::kTorchOps);
  ASSERT_EQ(kernel.sizes(), (std::vector<int64_t>{q.size(0), c.heads * c.head_dim}));
  for (size_t i = 0; i < seqs.size(); ++i) {
    const at::Tensor k = sc.ks[i].to(cache_dtype).to(at::kFloat),
                     v = sc.vs[i].to(cache_dtype).to(at::kFloat);
    at::Tensor want = reference(sc.qs[i], k, v, seqs[i].total - seqs[i].chunk);
    const AttentionSegment& seg = segments[i];
    const double kernel_err =
        (kernel.narrow(0, seg.token_begin, seg.num_tokens).to(at::kDouble) - want)
            .abs()
            .max()
            .item<double>();
    const double ops_err = (ops.narrow(0, seg.token_begin, seg.num_tokens).to(at::kDouble) - want)
                               .abs()
                               .max()
                               .item<double>();
    EXPECT_LT(kernel_err, 1e-5) << "sequence " << i << " (kernel)";
    EXPECT_LT(ops_err, 1e-5) << "sequence " << i << " (torch ops)";
  }
}

const std::vector<SeqSpec> kMixed = {{1, 1}, {17, 1}, {40, 40}, {33, 9}, {5, 1}, {64, 16}};

TEST(CachedAttention, MatchesReferenceMultiQueryHeads) { check_case({4, 2, 16, 4}, kMixed); }
TEST(CachedAttention, MatchesReferenceOneKvHeadPerQueryHead) { check_case({3, 3, 8, 16}, kMixed); }
TEST(CachedAttention, MatchesReferenceOddHeadDim) { check_case({6, 2, 12, 5}, kMixed); }
TEST(CachedAttention, MatchesReferenceSingleDecodeToken) { check_case({8, 1, 64, 16}, {{300, 1}}); }
// Qwen2.5-0.5B's heads (14 over 2 kv heads, D 64): an odd group, so the kernel's row pairs end
// mid-token in prefill tiles; and D 32 (tiny) and 128.
TEST(CachedAttention, MatchesReferenceOddGroupsAndOtherHeadSizes) {
  check_case({14, 2, 64, 16}, kMixed);
  check_case({6, 2, 32, 16}, kMixed);
  check_case({4, 2, 128, 8}, kMixed);
  check_case({14, 2, 64, 16}, kMixed, at::kBFloat16);
}

TEST(CachedAttention, BFloat16CacheMatchesReferenceOnRoundedValues) {
  check_case({4, 2, 16, 4}, kMixed, at::kBFloat16);
  check_case({6, 2, 12, 5}, kMixed, at::kBFloat16);  // D % 8 != 0: the scalar loops
  check_case({8, 1, 64, 16}, {{300, 1}}, at::kBFloat16);
}

// The kernel widens bfloat16 exactly: over a bfloat16 cache it computes bit for bit what it
// computes over a float32 cache holding the same (rounded) values.
TEST(CachedAttention, BFloat16CacheEqualsFloat32CacheOfTheSameValues) {
  at::manual_seed(3);
  KvCacheShape shape{1, 2, 32, 16};
  KvCache wide(shape, 8, at::TensorOptions().dtype(at::kFloat));
  KvCache narrow(shape, 8, at::TensorOptions().dtype(at::kBFloat16));
  const std::vector<int32_t> tables = {5, 2, 7, 0, 3, 1};
  const std::vector<AttentionSegment> segs = {{0, 40, 0, 0, 3}, {40, 1, 44, 3, 3}};
  const std::vector<AttentionSegment> past = {{0, 44, 0, 3, 3}};
  const at::Tensor k0 = at::randn({44, 2, 32}).to(at::kBFloat16).to(at::kFloat);
  const at::Tensor v0 = at::randn({44, 2, 32}).to(at::kBFloat16).to(at::kFloat);
  AttentionBatch history(past, tables, 16, at::kCPU);
  AttentionBatch batch(segs, tables, 16, at::kCPU);
  const at::Tensor k = at::randn({41, 2, 32}), v = at::randn({41, 2, 32});
  for (KvCache* cache : {&wide, &narrow}) {
    cache->write(0, k0, v0, history.slots(), history.slots_tensor());
    cache->write(0, k.to(at::kBFloat16).to(at::kFloat), v.to(at::kBFloat16).to(at::kFloat),
                 batch.slots(), batch.slots_tensor());
  }
  const at::Tensor q = at::randn({41, 4, 32});
  EXPECT_TRUE(cached_attention(q, narrow, 0, batch, AttentionImpl::kCpuKernel)
                  .equal(cached_attention(q, wide, 0, batch, AttentionImpl::kCpuKernel)));
}

// write_and_attend leaves the cache and returns the output that KvCache::write followed by
// cached_attention gives, bit for bit: with every segment one tile the kernel's items write their
// own rows (float32 copied, bfloat16 rounded as c10::BFloat16 does); with a longer chunk the write
// runs first. Both cache dtypes, the kernel's compile-time and run-time head sizes, and the torch
// ops.
TEST(CachedAttention, WriteAndAttendEqualsWriteThenAttend) {
  const std::vector<SeqSpec> one_tile_each = {{1, 1}, {17, 1}, {33, 5}, {5, 1}, {300, 8}, {16, 2}};
  for (const Case& c :
       {Case{4, 2, 16, 4}, Case{14, 2, 64, 16}, Case{6, 2, 24, 5}, Case{6, 2, 12, 5}}) {
    for (const auto& seqs : {one_tile_each, kMixed}) {
      for (at::ScalarType dtype : {at::kFloat, at::kBFloat16}) {
        for (AttentionImpl impl : {AttentionImpl::kCpuKernel, AttentionImpl::kTorchOps}) {
          Scenario fused = make_scenario(c, seqs, dtype), apart = make_scenario(c, seqs, dtype);
          AttentionBatch batch(fused.segments, fused.tables, c.block_size, at::kCPU);
          const at::Tensor k = fused.new_keys(seqs), v = fused.new_keys(seqs, true);
          // A NaN in a key becomes bfloat16 0x7fc0 on both paths.
          k[0][0][1] = std::numeric_limits<float>::quiet_NaN();
          const at::Tensor q = at::cat(fused.qs);
          const at::Tensor got = write_and_attend(q, k, v, fused.cache, fused.layer, batch, impl);
          apart.cache.write(apart.layer, k, v, batch.slots(), batch.slots_tensor());
          const at::Tensor want = cached_attention(q, apart.cache, apart.layer, batch, impl);
          const std::string what = "H " + std::to_string(c.heads) + " D " +
                                   std::to_string(c.head_dim) + ", " + std::to_string(seqs.size()) +
                                   " sequences, " + c10::toString(dtype) +
                                   (impl == AttentionImpl::kCpuKernel ? ", kernel" : ", torch ops");
          // The NaN key makes its sequence's outputs NaN on both paths: compare bits, not values.
          EXPECT_TRUE(got.view(at::kInt).equal(want.view(at::kInt))) << what;
          for (int kv = 0; kv < 2; ++kv) {
            const at::Tensor a =
                kv == 0 ? fused.cache.keys(fused.layer) : fused.cache.values(fused.layer);
            const at::Tensor b =
                kv == 0 ? apart.cache.keys(apart.layer) : apart.cache.values(apart.layer);
            EXPECT_TRUE(a.view(dtype == at::kFloat ? at::kInt : at::kShort)
                            .equal(b.view(dtype == at::kFloat ? at::kInt : at::kShort)))
                << what << (kv == 0 ? ": keys" : ": values");
          }
        }
      }
    }
  }
}

// The row-by-row write into a bfloat16 cache rounds as Tensor::to does (to nearest, ties to even),
// including ties, overflow to infinity and denormals; a NaN stays a NaN (its bits may differ:
// torch's vectorised conversion writes 0xffff, c10::BFloat16 0x7fc0).
TEST(KvCache, BFloat16WriteRoundsAsTensorTo) {
  KvCacheShape shape{1, 1, 16, 4};
  KvCache fast(shape, 2, at::TensorOptions().dtype(at::kBFloat16));
  KvCache generic(shape, 2, at::TensorOptions().dtype(at::kBFloat16));
  std::vector<uint32_t> bits = {0x3f808000u, 0x3f818000u, 0x3f807fffu, 0x3f808001u,
                                0xbf818000u, 0x7f7fffffu, 0x7f800000u, 0xff800000u,
                                0x7fc00001u, 0x00000001u, 0x80008000u, 0x00018000u,
                                0x3f800000u, 0x40490fdbu, 0xc2f6e979u, 0x358637bdu};
  std::vector<float> values(bits.size());
  std::memcpy(values.data(), bits.data(), bits.size() * sizeof(float));
  const at::Tensor k = at::tensor(values).view({1, 1, 16});
  const at::Tensor v = -k;
  const std::vector<int64_t> slots = {5};
  const at::Tensor slots_tensor = at::tensor(std::vector<int64_t>{5});
  fast.write(0, k, v, slots, slots_tensor);  // float32 rows: converted here
  generic.write(0, k.to(at::kDouble), v.to(at::kDouble), slots,
                slots_tensor);  // index_put_ of Tensor::to
  const int64_t nan_at = 8;
  ASSERT_TRUE(std::isnan(values[nan_at]));
  for (KvCache* cache : {&fast, &generic}) {
    EXPECT_TRUE(std::isnan(cache->keys(0)[1][0][1][nan_at].item<float>()));
    EXPECT_TRUE(std::isnan(cache->values(0)[1][0][1][nan_at].item<float>()));
    cache->keys(0)[1][0][1][nan_at] = 0;
    cache->values(0)[1][0][1][nan_at] = 0;
  }
  const at::Tensor a = fast.keys(0).view(at::kShort), b = generic.keys(0).view(at::kShort);
  EXPECT_TRUE(a.equal(b)) << a[1][0][1] << " vs " << b[1][0][1];
  EXPECT_TRUE(fast.values(0).view(at::kShort).equal(generic.values(0).view(at::kShort)));
}

TEST(KvCache, CopyBlockCopiesEveryLayer) {
  KvCacheShape shape{3, 2, 4, 8};
  KvCache cache(shape, 4, at::TensorOptions().dtype(at::kFloat));
  for (int64_t l = 0; l < 3; ++l) {
    cache.keys(l)[1].copy_(at::randn({2, 8, 4}));  // (Hkv, block_size, D)
    cache.values(l)[1].copy_(at::randn({2, 8, 4}));
  }
  cache.copy_block(1, 3);
  for (int64_t l = 0; l < 3; ++l) {
    EXPECT_TRUE(cache.keys(l)[3].equal(cache.keys(l)[1]));
    EXPECT_TRUE(cache.values(l)[3].equal(cache.values(l)[1]));
    EXPECT_EQ(cache.keys(l)[0].abs().sum().item<float>(), 0.0f);
  }
}

TEST(KvCache, BlocksForBytes) {
  KvCacheShape shape{8, 4, 64, 16};
  // 2 (k, v) * 8 layers * 16 tokens * 4 heads * 64 dims * 4 bytes = 262144 bytes per block.
  EXPECT_EQ(KvCache::blocks_for_bytes(shape, 256 << 20, 4), 1024);
  EXPECT_EQ(KvCache::blocks_for_bytes(shape, 262143, 4), 0);
  EXPECT_THROW(KvCache(shape, 0, at::TensorOptions()), Error);
}

}  // namespace
}  // namespace ajet::infer
