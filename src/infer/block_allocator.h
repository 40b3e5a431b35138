// Fixed-size KV-cache blocks handed out by index, with reference counts so samples of one request can
// share the blocks of their common prompt. Pure bookkeeping: never touches tensor memory.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

namespace ajet::infer {

class BlockAllocator {
 public:
  explicit BlockAllocator(int64_t num_blocks);

  int64_t num_blocks() const { return static_cast<int64_t>(ref_counts_.size()); }
  int64_t num_free() const { return static_cast<int64_t>(free_.size()); }

  // A free block with reference count 1, or nothing when all blocks are in use.
  std::optional<int32_t> allocate();
  void add_ref(int32_t block);
  // Drops one reference; the block is free again when none are left.
  void release(int32_t block);
  int32_t ref_count(int32_t block) const;

 private:
  void check(int32_t block) const;

  std::vector<int32_t> ref_counts_;  // (num_blocks)
  std::vector<int32_t> free_;        // stack of free block indices
};

}  // namespace ajet::infer
