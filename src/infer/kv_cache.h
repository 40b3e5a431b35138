// The paged KV cache: per-layer key and value tensors cut into fixed-size blocks, allocated once
// from a memory bound. Which block holds which token is decided by the scheduler (block tables);
// this class only stores, writes and copies blocks. Never allocates after construction.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <vector>

namespace ajet::infer {

struct KvCacheShape {
  int64_t num_layers = 0;
  int64_t num_kv_heads = 0;
  int64_t head_dim = 0;
  int64_t block_size = 16;  // tokens per block
};

class KvCache {
 public:
  // Blocks that fit in `bytes` (keys and values of every layer) for elements of `element_size`
  // bytes.
  static int64_t blocks_for_bytes(const KvCacheShape& shape, int64_t bytes, int64_t element_size);

  KvCache(const KvCacheShape& shape, int64_t num_blocks, at::TensorOptions options);

  const KvCacheShape& shape() const { return shape_; }
  int64_t num_blocks() const { return num_blocks_; }
  at::ScalarType dtype() const { return storage_.scalar_type(); }
  // Head-major blocks: one kv head's block_size rows are contiguous, so attention streams them.
  at::Tensor keys(int64_t layer) const {
    return data_[layer][0];
  }  // (num_blocks, Hkv, block_size, D)
  at::Tensor values(int64_t layer) const {
    return data_[layer][1];
  }  // (num_blocks, Hkv, block_size, D)

  // Writes the keys and values of N new tokens: k, v (N, Hkv, D) into slots (block * block_size +
  // offset), i.e. keys[block, :, offset]. `slots` is the same list on the host; `slots_tensor` (N)
  // int64 on the cache's device.
  void write(int64_t layer, const at::Tensor& k, const at::Tensor& v,
             const std::vector<int64_t>& slots, const at::Tensor& slots_tensor);

  // Copies block src to dst in every layer (copy-on-write of a shared block).
  void copy_block(int32_t src, int32_t dst);

 private:
  KvCacheShape shape_;
  int64_t num_blocks_ = 0;
  at::Tensor storage_;                         // (L, 2, num_blocks, Hkv, block_size, D)
  std::vector<std::vector<at::Tensor>> data_;  // [layer][k|v] views into storage_
};

}  // namespace ajet::infer
