// Fixed-size KV-cache blocks handed out by index, with reference counts so samples of one request
// can share the blocks of their common prompt, and content keys for prefix caching: a full block
// computed once is found again by its key (a hash of its tokens and of every token before them) and
// shared by later requests with the same prefix, and it stays reusable after its last reference is
// dropped until a fresh block is needed. Pure bookkeeping: never touches tensor memory.
#pragma once

#include <cstdint>
#include <list>
#include <optional>
#include <unordered_map>
#include <vector>

namespace ajet::batching {

class BlockAllocator {
 public:
  explicit BlockAllocator(int64_t num_blocks);

  int64_t num_blocks() const { return static_cast<int64_t>(ref_counts_.size()); }
  // Blocks allocate() can hand out: free ones and cached ones nobody references.
  int64_t num_free() const { return static_cast<int64_t>(free_.size() + idle_cached_.size()); }
  // Blocks that hold a key (referenced or not).
  int64_t num_cached() const { return static_cast<int64_t>(by_key_.size()); }

  // A block with reference count 1: a free one, else the cached one released longest ago (its key
  // is forgotten); nothing when every block is referenced.
  std::optional<int32_t> allocate();
  void add_ref(int32_t block);
  // Drops one reference; with none left the block is free again, or idle-but-cached if it has a
  // key.
  void release(int32_t block);
  int32_t ref_count(int32_t block) const;

  // Prefix caching. find: the block holding `key`, if any (no reference taken). acquire: one more
  // reference to a block, which may be idle-but-cached. set_key: `block` (referenced, full,
  // computed) holds the contents `key` names, unless another block already does.
  std::optional<int32_t> find(uint64_t key) const;
  void acquire(int32_t block);
  void set_key(int32_t block, uint64_t key);
  // Every key is dropped (the weights changed, so cached keys/values are stale); idle blocks become
  // free.
  void forget_keys();

 private:
  void check(int32_t block) const;

  std::vector<int32_t> ref_counts_;              // (num_blocks)
  std::vector<int32_t> free_;                    // stack of free block indices
  std::vector<std::optional<uint64_t>> key_of_;  // (num_blocks)
  std::unordered_map<uint64_t, int32_t> by_key_;
  std::list<int32_t> idle_cached_;                      // unreferenced keyed blocks, oldest first
  std::vector<std::list<int32_t>::iterator> idle_pos_;  // (num_blocks) valid while idle and keyed
};

// The key of a full block: mixes the previous block's key (kFirstBlockKey for the first block) with
// the block's token ids. 64-bit: a collision would make two different prefixes share keys/values.
inline constexpr uint64_t kFirstBlockKey = 0x9e3779b97f4a7c15ULL;
uint64_t chain_block_key(uint64_t previous, const int32_t* tokens, int64_t count);

}  // namespace ajet::batching
