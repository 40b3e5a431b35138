#include "infer/block_allocator.h"

#include <string>

#include "common/error.h"

namespace ajet::infer {

BlockAllocator::BlockAllocator(int64_t num_blocks) {
  if (num_blocks < 1) invalid_argument("kv cache: need at least one block, got " + std::to_string(num_blocks));
  ref_counts_.assign(static_cast<size_t>(num_blocks), 0);
  free_.reserve(static_cast<size_t>(num_blocks));
  // Low indices on top of the stack, so a fresh cache hands out 0, 1, 2, ...
  for (int64_t b = num_blocks - 1; b >= 0; --b) free_.push_back(static_cast<int32_t>(b));
}

std::optional<int32_t> BlockAllocator::allocate() {
  if (free_.empty()) return std::nullopt;
  int32_t block = free_.back();
  free_.pop_back();
  ref_counts_[block] = 1;
  return block;
}

void BlockAllocator::add_ref(int32_t block) {
  check(block);
  ++ref_counts_[block];
}

void BlockAllocator::release(int32_t block) {
  check(block);
  if (--ref_counts_[block] == 0) free_.push_back(block);
}

int32_t BlockAllocator::ref_count(int32_t block) const {
  if (block < 0 || block >= num_blocks()) {
    fail(ErrorCode::kInternal, "kv cache: block " + std::to_string(block) + " out of range");
  }
  return ref_counts_[block];
}

void BlockAllocator::check(int32_t block) const {
  if (ref_count(block) <= 0) {
    fail(ErrorCode::kInternal, "kv cache: block " + std::to_string(block) + " is not allocated");
  }
}

}  // namespace ajet::infer
