#include "batching/block_allocator.h"

#include <string>

#include "common/error.h"
#include "common/mix.h"

namespace ajet::batching {

uint64_t chain_block_key(uint64_t previous, const int32_t* tokens, int64_t count) {
  uint64_t h = splitmix64_finalize(previous ^ static_cast<uint64_t>(count));
  for (int64_t i = 0; i < count; ++i)
    h = splitmix64_finalize(h + static_cast<uint32_t>(tokens[i]) + kGoldenGamma);
  return h;
}

BlockAllocator::BlockAllocator(int64_t num_blocks) {
  if (num_blocks < 1)
    invalid_argument("kv cache: need at least one block, got " + std::to_string(num_blocks));
  ref_counts_.assign(static_cast<size_t>(num_blocks), 0);
  key_of_.assign(static_cast<size_t>(num_blocks), std::nullopt);
  idle_pos_.assign(static_cast<size_t>(num_blocks), idle_cached_.end());
  free_.reserve(static_cast<size_t>(num_blocks));
  // Low indices on top of the stack, so a fresh cache hands out 0, 1, 2, ...
  for (int64_t b = num_blocks - 1; b >= 0; --b) free_.push_back(static_cast<int32_t>(b));
}

std::optional<int32_t> BlockAllocator::allocate() {
  int32_t block = 0;
  if (!free_.empty()) {
    block = free_.back();
    free_.pop_back();
  } else if (!idle_cached_.empty()) {
    block = idle_cached_.front();  // released longest ago
    idle_cached_.pop_front();
    by_key_.erase(*key_of_[block]);
    key_of_[block].reset();
  } else {
    return std::nullopt;
  }
  ref_counts_[block] = 1;
  return block;
}

void BlockAllocator::add_ref(int32_t block) {
  check(block);
  ++ref_counts_[block];
}

void BlockAllocator::release(int32_t block) {
  check(block);
  if (--ref_counts_[block] > 0) return;
  if (key_of_[block]) {
    idle_pos_[block] = idle_cached_.insert(idle_cached_.end(), block);
  } else {
    free_.push_back(block);
  }
}

int32_t BlockAllocator::ref_count(int32_t block) const {
  if (block < 0 || block >= num_blocks()) {
    fail(ErrorCode::kInternal, "kv cache: block " + std::to_string(block) + " out of range");
  }
  return ref_counts_[block];
}

std::optional<int32_t> BlockAllocator::find(uint64_t key) const {
  auto it = by_key_.find(key);
  if (it == by_key_.end()) return std::nullopt;
  return it->second;
}

void BlockAllocator::acquire(int32_t block) {
  if (ref_count(block) == 0) {
    if (!key_of_[block])
      fail(ErrorCode::kInternal, "kv cache: acquiring free block " + std::to_string(block));
    idle_cached_.erase(idle_pos_[block]);
    idle_pos_[block] = idle_cached_.end();
  }
  ++ref_counts_[block];
}

void BlockAllocator::set_key(int32_t block, uint64_t key) {
  check(block);
  if (key_of_[block] || by_key_.count(key)) return;
  key_of_[block] = key;
  by_key_.emplace(key, block);
}

void BlockAllocator::forget_keys() {
  for (int32_t block : idle_cached_) free_.push_back(block);
  idle_cached_.clear();
  by_key_.clear();
  for (auto& key : key_of_) key.reset();
}

void BlockAllocator::check(int32_t block) const {
  if (ref_count(block) <= 0) {
    fail(ErrorCode::kInternal, "kv cache: block " + std::to_string(block) + " is not allocated");
  }
}

}  // namespace ajet::batching
