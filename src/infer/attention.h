// Causal attention of one engine step's new tokens over the paged KV cache. The step's tokens are
// one flat batch of segments (a decode token, or a prefill chunk, of some sequence); each token
// attends to every cached position of its own sequence up to its own. Never decides which tokens
// run (the scheduler does) and never owns cache memory (KvCache does).
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <mutex>
#include <vector>

#include "infer/attention_kernel.h"
#include "infer/kv_cache.h"

namespace ajet::infer {

// Everything attention needs to know about a step's batch, prepared once and used by every layer.
class AttentionBatch {
 public:
  AttentionBatch(std::vector<AttentionSegment> segments, std::vector<int32_t> block_tables,
                 int64_t block_size, at::Device device);

  int64_t num_tokens() const { return static_cast<int64_t>(token_segment_.size()); }
  int64_t block_size() const { return block_size_; }
  const std::vector<AttentionSegment>& segments() const { return segments_; }
  const std::vector<int32_t>& block_tables() const { return block_tables_; }
  const std::vector<int32_t>& token_segment() const {
    return token_segment_;
  }                                                                   // (N) segment of each token
  const std::vector<AttentionTile>& tiles() const { return tiles_; }  // CPU kernel work units
  const std::vector<int64_t>& slots() const { return slots_; }  // (N) block * block_size + offset
  const at::Tensor& slots_tensor() const { return slots_tensor_; }  // (N) int64, on device
  const at::Tensor& positions() const { return positions_; }        // (N) int64, on device
  const at::Tensor& tables_tensor() const {
    return tables_tensor_;
  }  // block_tables, int64, on device

  // The torch-ops path's one-token segments (decode rows), attended in one batch: made on first use
  // (the CPU kernel never needs them), then shared by every layer of the step.
  struct DecodeGather {
    std::vector<int32_t> segments;  // which segments: the batch's rows, in order
    int64_t max_len = 0;            // the longest visible length among them (Lmax)
    at::Tensor rows;                // (B) int64: each one's row in the flat batch
    at::Tensor
        cache_rows;  // (B * Hkv * Lmax) int64: row of the flat (blocks * Hkv * block_size, D) cache
    at::Tensor padding;  // (B, 1, 1, Lmax) bool: true past a row's length
  };
  const DecodeGather& decode_gather(int64_t kv_heads) const;

 private:
  std::vector<AttentionSegment> segments_;
  std::vector<int32_t> block_tables_;
  int64_t block_size_;
  std::vector<int32_t> token_segment_;
  std::vector<AttentionTile> tiles_;
  std::vector<int64_t> slots_;
  at::Tensor slots_tensor_;
  at::Tensor positions_;
  at::Tensor tables_tensor_;
  at::Device device_;
  mutable std::once_flag decode_once_;
  mutable DecodeGather decode_;
};

enum class AttentionImpl {
  kAuto,       // the hand kernel for float32 on CPU, torch ops otherwise
  kCpuKernel,  // hand-written float32 CPU kernel (parallel over (token, kv head))
  kTorchOps,   // per-segment gather + matmul + softmax: any device and dtype; the test reference
};

// `values` as an int64 tensor on `device` (the batch's slots, positions and token ids).
at::Tensor int64_tensor(const std::vector<int64_t>& values, at::Device device);

// q: (N, H, D) for the batch's tokens, whose keys and values are already in the cache.
// Returns (N, H * D): heads concatenated, in q's dtype. Query head h reads kv head h / (H / Hkv).
at::Tensor cached_attention(const at::Tensor& q, const KvCache& cache, int64_t layer,
                            const AttentionBatch& batch, AttentionImpl impl = AttentionImpl::kAuto);

// Writes the batch tokens' keys and values k, v (N, Hkv, D) into the cache, then attends as
// cached_attention. With the CPU kernel, float32 k and v, and every segment one tile (decode steps,
// chunks of up to kTileTokens), each (tile, kv head) item writes its own rows just before it reads
// them, inside the kernel's parallel region; otherwise KvCache::write runs first. Same cache, same
// result either way.
at::Tensor write_and_attend(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                            KvCache& cache, int64_t layer, const AttentionBatch& batch,
                            AttentionImpl impl = AttentionImpl::kAuto);

}  // namespace ajet::infer
