// Cached attention against an independent reference: for each sequence, its keys and values as one
// contiguous (L, Hkv, D) tensor and plain masked softmax(q k^T / sqrt(D)) v. The batch mixes decode
// tokens and prefill chunks, block tables are scattered, and head sizes exercise GQA and odd D.
#include "infer/attention.h"

#include "common/error.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

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
    at::Tensor qh = q.select(1, head).to(at::kDouble);              // (T, D)
    at::Tensor kh = k.select(1, kvh).to(at::kDouble);               // (L, D)
    at::Tensor vh = v.select(1, kvh).to(at::kDouble);
    at::Tensor scores = qh.matmul(kh.t()) / std::sqrt(double(d));   // (T, L)
    for (int64_t i = 0; i < t; ++i) {
      at::Tensor row = scores[i].narrow(0, 0, start + i + 1);
      at::Tensor w = at::softmax(row, 0);
      out[i][head].copy_(w.matmul(vh.narrow(0, 0, start + i + 1)));
    }
  }
  return out.view({t, h * d});
}

void check_case(const Case& c, const std::vector<SeqSpec>& seqs) {
  at::manual_seed(11);
  std::mt19937 gen(5);
  KvCacheShape shape{/*num_layers=*/2, c.kv_heads, c.head_dim, c.block_size};
  int64_t blocks_needed = 0;
  for (const SeqSpec& s : seqs) blocks_needed += (s.total + c.block_size - 1) / c.block_size;
  const int64_t num_blocks = blocks_needed + 7;
  KvCache cache(shape, num_blocks, at::TensorOptions().dtype(at::kFloat));
  // Scattered block tables: a shuffled permutation of the blocks, handed out in turn.
  std::vector<int32_t> perm(static_cast<size_t>(num_blocks));
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), gen);
  const int64_t layer = 1;

  std::vector<AttentionSegment> segments;
  std::vector<int32_t> tables;
  std::vector<at::Tensor> ks, vs, qs;
  size_t next_block = 0;
  int64_t row = 0;
  for (const SeqSpec& s : seqs) {
    AttentionSegment seg;
    seg.token_begin = row;
    seg.num_tokens = s.chunk;
    seg.start_pos = s.total - s.chunk;
    seg.table_begin = static_cast<int64_t>(tables.size());
    seg.table_size = (s.total + c.block_size - 1) / c.block_size;
    for (int64_t b = 0; b < seg.table_size; ++b) tables.push_back(perm[next_block++]);
    segments.push_back(seg);
    ks.push_back(at::randn({s.total, c.kv_heads, c.head_dim}));
    vs.push_back(at::randn({s.total, c.kv_heads, c.head_dim}));
    qs.push_back(at::randn({s.chunk, c.heads, c.head_dim}));
    row += s.chunk;
  }
  // Earlier positions are written as a previous step would have: one batch holding every cached token.
  std::vector<AttentionSegment> history;
  int64_t hist_row = 0;
  std::vector<at::Tensor> hk, hv;
  for (size_t i = 0; i < seqs.size(); ++i) {
    AttentionSegment h = segments[i];
    h.token_begin = hist_row;
    h.start_pos = 0;
    h.num_tokens = seqs[i].total - seqs[i].chunk;
    if (h.num_tokens == 0) continue;
    history.push_back(h);
    hk.push_back(ks[i].narrow(0, 0, h.num_tokens));
    hv.push_back(vs[i].narrow(0, 0, h.num_tokens));
    hist_row += h.num_tokens;
  }
  if (!history.empty()) {
    AttentionBatch past(history, tables, c.block_size, at::kCPU);
    cache.write(layer, at::cat(hk), at::cat(hv), past.slots(), past.slots_tensor());
  }
  AttentionBatch batch(segments, tables, c.block_size, at::kCPU);
  std::vector<at::Tensor> new_k, new_v;
  for (size_t i = 0; i < seqs.size(); ++i) {
    new_k.push_back(ks[i].narrow(0, seqs[i].total - seqs[i].chunk, seqs[i].chunk));
    new_v.push_back(vs[i].narrow(0, seqs[i].total - seqs[i].chunk, seqs[i].chunk));
  }
  // float64 input takes the generic index_copy_ path (the float32 row copy wrote the history).
  cache.write(layer, at::cat(new_k).to(at::kDouble), at::cat(new_v).to(at::kDouble), batch.slots(), batch.slots_tensor());

  at::Tensor q = at::cat(qs);  // (N, H, D)
  at::Tensor kernel = cached_attention(q, cache, layer, batch, AttentionImpl::kCpuKernel);
  at::Tensor ops = cached_attention(q, cache, layer, batch, AttentionImpl::kTorchOps);
  ASSERT_EQ(kernel.sizes(), (std::vector<int64_t>{q.size(0), c.heads * c.head_dim}));
  for (size_t i = 0; i < seqs.size(); ++i) {
    at::Tensor want = reference(qs[i], ks[i], vs[i], seqs[i].total - seqs[i].chunk);
    const AttentionSegment& seg = segments[i];
    const double kernel_err = (kernel.narrow(0, seg.token_begin, seg.num_tokens).to(at::kDouble) - want).abs().max().item<double>();
    const double ops_err = (ops.narrow(0, seg.token_begin, seg.num_tokens).to(at::kDouble) - want).abs().max().item<double>();
    EXPECT_LT(kernel_err, 1e-5) << "sequence " << i << " (kernel)";
    EXPECT_LT(ops_err, 1e-5) << "sequence " << i << " (torch ops)";
  }
}

const std::vector<SeqSpec> kMixed = {{1, 1}, {17, 1}, {40, 40}, {33, 9}, {5, 1}, {64, 16}};

TEST(CachedAttention, MatchesReferenceMultiQueryHeads) { check_case({4, 2, 16, 4}, kMixed); }
TEST(CachedAttention, MatchesReferenceOneKvHeadPerQueryHead) { check_case({3, 3, 8, 16}, kMixed); }
TEST(CachedAttention, MatchesReferenceOddHeadDim) { check_case({6, 2, 12, 5}, kMixed); }
TEST(CachedAttention, MatchesReferenceSingleDecodeToken) { check_case({8, 1, 64, 16}, {{300, 1}}); }

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
