#include "infer/kv_cache.h"

#include <cstring>
#include <string>

#include "common/error.h"

namespace ajet::infer {

int64_t KvCache::blocks_for_bytes(const KvCacheShape& shape, int64_t bytes, int64_t element_size) {
  const int64_t per_block = 2 * shape.num_layers * shape.block_size * shape.num_kv_heads * shape.head_dim * element_size;
  if (per_block <= 0) invalid_argument("kv cache: empty cache shape");
  return bytes / per_block;
}

KvCache::KvCache(const KvCacheShape& shape, int64_t num_blocks, at::TensorOptions options)
    : shape_(shape), num_blocks_(num_blocks) {
  if (num_blocks < 1) {
    invalid_argument("kv cache: the memory bound leaves no block of " + std::to_string(shape.block_size) + " tokens");
  }
  storage_ = at::zeros({shape.num_layers, 2, num_blocks, shape.block_size, shape.num_kv_heads, shape.head_dim}, options);
  data_.resize(static_cast<size_t>(shape.num_layers));
  for (int64_t l = 0; l < shape.num_layers; ++l) data_[l] = {storage_[l][0], storage_[l][1]};
}

void KvCache::write(int64_t layer, const at::Tensor& k, const at::Tensor& v, const std::vector<int64_t>& slots,
                    const at::Tensor& slots_tensor) {
  const int64_t row = shape_.num_kv_heads * shape_.head_dim;
  at::Tensor keys = data_[layer][0];
  at::Tensor values = data_[layer][1];
  if (keys.is_cpu() && keys.scalar_type() == at::kFloat && k.scalar_type() == at::kFloat &&
      v.scalar_type() == at::kFloat) {
    // A row copy per token beats two index_copy_ dispatches for the few tokens of a decode step.
    at::Tensor kc = k.contiguous();
    at::Tensor vc = v.contiguous();
    const float* ks = kc.data_ptr<float>();
    const float* vs = vc.data_ptr<float>();
    float* kd = keys.data_ptr<float>();
    float* vd = values.data_ptr<float>();
    for (size_t t = 0; t < slots.size(); ++t) {
      std::memcpy(kd + slots[t] * row, ks + t * row, sizeof(float) * row);
      std::memcpy(vd + slots[t] * row, vs + t * row, sizeof(float) * row);
    }
    return;
  }
  at::Tensor flat_k = keys.view({-1, shape_.num_kv_heads, shape_.head_dim});  // (num_blocks * block_size, Hkv, D)
  at::Tensor flat_v = values.view({-1, shape_.num_kv_heads, shape_.head_dim});
  flat_k.index_copy_(0, slots_tensor, k.to(keys.scalar_type()));
  flat_v.index_copy_(0, slots_tensor, v.to(values.scalar_type()));
}

void KvCache::copy_block(int32_t src, int32_t dst) {
  // (L, 2, block_size, Hkv, D) in one copy.
  storage_.select(2, dst).copy_(storage_.select(2, src));
}

}  // namespace ajet::infer
