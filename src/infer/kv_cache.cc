#include "infer/kv_cache.h"

#include <sys/mman.h>

#include <cstdint>
#include <cstring>
#include <string>

#include "common/error.h"

namespace ajet::infer {

namespace {

// A step reads one block of 2 KiB..16 KiB per (sequence, layer, kv head) from all over the cache:
// on 4 KiB pages nearly every block is a TLB miss. Transparent huge pages (2 MiB) for the cache's
// whole-page interior, where the kernel offers them (`madvise` mode, Debian's default); a no-op
// elsewhere.
void advise_huge_pages(void* data, size_t bytes) {
#ifdef MADV_HUGEPAGE
  constexpr uintptr_t kHuge = uintptr_t{2} << 20;
  const uintptr_t begin = (reinterpret_cast<uintptr_t>(data) + kHuge - 1) & ~(kHuge - 1);
  const uintptr_t end = (reinterpret_cast<uintptr_t>(data) + bytes) & ~(kHuge - 1);
  if (end > begin) madvise(reinterpret_cast<void*>(begin), end - begin, MADV_HUGEPAGE);
#else
  (void)data;
  (void)bytes;
#endif
}

}  // namespace

int64_t KvCache::blocks_for_bytes(const KvCacheShape& shape, int64_t bytes, int64_t element_size) {
  const int64_t per_block =
      2 * shape.num_layers * shape.block_size * shape.num_kv_heads * shape.head_dim * element_size;
  if (per_block <= 0) invalid_argument("kv cache: empty cache shape");
  return bytes / per_block;
}

KvCache::KvCache(const KvCacheShape& shape, int64_t num_blocks, at::TensorOptions options)
    : shape_(shape), num_blocks_(num_blocks) {
  if (num_blocks < 1) {
    invalid_argument("kv cache: the memory bound leaves no block of " +
                     std::to_string(shape.block_size) + " tokens");
  }
  storage_ = at::empty(
      {shape.num_layers, 2, num_blocks, shape.num_kv_heads, shape.block_size, shape.head_dim},
      options);
  if (storage_.is_cpu()) advise_huge_pages(storage_.data_ptr(), storage_.nbytes());
  storage_.zero_();  // after the advice: the first touch maps the pages
  data_.resize(static_cast<size_t>(shape.num_layers));
  for (int64_t l = 0; l < shape.num_layers; ++l) data_[l] = {storage_[l][0], storage_[l][1]};
}

void KvCache::write(int64_t layer, const at::Tensor& k, const at::Tensor& v,
                    const std::vector<int64_t>& slots, const at::Tensor& slots_tensor) {
  const int64_t heads = shape_.num_kv_heads, d = shape_.head_dim, bs = shape_.block_size;
  at::Tensor keys = data_[layer][0];
  at::Tensor values = data_[layer][1];
  const at::ScalarType stored = keys.scalar_type();
  if (keys.is_cpu() && (stored == at::kFloat || stored == at::kBFloat16) &&
      k.scalar_type() == at::kFloat && v.scalar_type() == at::kFloat) {
    // Row copies (or conversions) beat indexing dispatches for the few tokens of a decode step.
    at::Tensor kc = k.contiguous();
    at::Tensor vc = v.contiguous();
    const float* ks = kc.data_ptr<float>();
    const float* vs = vc.data_ptr<float>();
    auto rows = [&](auto* kd, auto* vd, auto&& copy_row) {
      for (size_t t = 0; t < slots.size(); ++t) {
        const int64_t block = slots[t] / bs, offset = slots[t] % bs;
        for (int64_t g = 0; g < heads; ++g) {
          const int64_t dst = ((block * heads + g) * bs + offset) * d;
          const int64_t src = (static_cast<int64_t>(t) * heads + g) * d;
          copy_row(kd + dst, ks + src);
          copy_row(vd + dst, vs + src);
        }
      }
    };
    if (stored == at::kFloat) {
      rows(keys.data_ptr<float>(), values.data_ptr<float>(),
           [d](float* dst, const float* src) { std::memcpy(dst, src, sizeof(float) * d); });
    } else {
      // c10::BFloat16's float constructor rounds to nearest even, as Tensor::to does.
      rows(keys.data_ptr<at::BFloat16>(), values.data_ptr<at::BFloat16>(),
           [d](at::BFloat16* dst, const float* src) {
             for (int64_t i = 0; i < d; ++i) dst[i] = at::BFloat16(src[i]);
           });
    }
    return;
  }
  // keys[block, :, offset] is (N, Hkv, D) for index tensors block, offset (N).
  const at::Tensor block = slots_tensor.div(bs, "floor");
  const at::Tensor offset = slots_tensor.remainder(bs);
  const c10::List<c10::optional<at::Tensor>> index{block, c10::nullopt, offset};
  keys.index_put_(index, k.to(keys.scalar_type()));
  values.index_put_(index, v.to(values.scalar_type()));
}

void KvCache::copy_block(int32_t src, int32_t dst) {
  // (L, 2, Hkv, block_size, D) in one copy.
  storage_.select(2, dst).copy_(storage_.select(2, src));
}

}  // namespace ajet::infer
