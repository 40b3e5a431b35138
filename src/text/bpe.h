// The BPE model on bytes: a word (the bytes of one pre-token) starts as one symbol per byte and
// the lowest-ranked adjacent pair is merged until no merge applies, exactly as HF's
// `Word::merge_all` (ties go to the leftmost pair). Results are cached per word; all methods are
// safe to call from many threads at once.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace ajet::text {

using BpeId = int32_t;

class BpeModel {
 public:
  struct Merge {
    BpeId left;
    BpeId right;
    BpeId merged;
  };

  BpeModel();
  // `byte_ids[b]` is the id of the symbol for byte b (-1: not in the vocab, the byte is dropped as
  // HF does without an unk token). `merges` in rank order; a repeated pair takes its last rank.
  // `whole_words` (only for ignore_merges): word bytes -> id, looked up before merging.
  BpeModel(const std::array<BpeId, 256>& byte_ids, const std::vector<Merge>& merges,
           bool ignore_merges, std::unordered_map<std::string, BpeId> whole_words);
  BpeModel(BpeModel&&) noexcept;
  BpeModel& operator=(BpeModel&&) noexcept;
  ~BpeModel();

  // Appends the ids of one word (non-empty bytes) to `out`, through the cache.
  void encode_word(std::string_view word, std::vector<BpeId>& out) const;

  // Uncached merging with a chosen algorithm (the quadratic scan for short words, the heap for
  // long ones); both must agree. For tests.
  std::vector<BpeId> merge_word(std::string_view word, bool use_heap) const;

 private:
  class MergeTable;
  class WordCache;
  void merge_scan(std::string_view word, std::vector<BpeId>& out) const;
  void merge_heap(std::string_view word, std::vector<BpeId>& out) const;

  std::array<BpeId, 256> byte_ids_{};
  std::unique_ptr<MergeTable> merges_;
  std::unique_ptr<WordCache> cache_;
  bool ignore_merges_ = false;
  std::unordered_map<std::string, BpeId> whole_words_;
};

}  // namespace ajet::text
