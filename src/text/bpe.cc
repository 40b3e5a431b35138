#include "text/bpe.h"

#include <algorithm>
#include <cstring>
#include <functional>
#include <limits>
#include <mutex>
#include <queue>

namespace ajet::text {

namespace {

constexpr uint32_t kNoRank = std::numeric_limits<uint32_t>::max();
// Words up to this many bytes use the quadratic scan; longer ones the heap (HF-identical order).
constexpr size_t kScanLimit = 128;
// Longer words are not cached: they rarely repeat (HF and the JS port use a similar limit).
constexpr size_t kMaxCachedWord = 256;

uint64_t pair_key(BpeId a, BpeId b) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
}

uint64_t mix(uint64_t k) {
  k ^= k >> 33;
  k *= 0xff51afd7ed558ccdULL;
  k ^= k >> 33;
  k *= 0xc4ceb9fe1a85ec53ULL;
  k ^= k >> 33;
  return k;
}

}  // namespace

// (left id, right id) -> (rank, merged id), open addressing with linear probing.
class BpeModel::MergeTable {
 public:
  struct Slot {
    uint64_t key = kEmpty;
    uint32_t rank = kNoRank;
    BpeId merged = -1;
  };
  static constexpr uint64_t kEmpty = std::numeric_limits<uint64_t>::max();

  explicit MergeTable(size_t count) {
    size_t cap = 16;
    while (cap < count * 2) cap <<= 1;
    slots_.resize(cap);
    mask_ = cap - 1;
  }

  void insert_or_assign(BpeId a, BpeId b, uint32_t rank, BpeId merged) {
    uint64_t key = pair_key(a, b);
    for (size_t i = mix(key) & mask_;; i = (i + 1) & mask_) {
      Slot& s = slots_[i];
      if (s.key == kEmpty || s.key == key) {
        s = {key, rank, merged};
        return;
      }
    }
  }

  const Slot* find(BpeId a, BpeId b) const {
    uint64_t key = pair_key(a, b);
    for (size_t i = mix(key) & mask_;; i = (i + 1) & mask_) {
      const Slot& s = slots_[i];
      if (s.key == key) return &s;
      if (s.key == kEmpty) return nullptr;
    }
  }

 private:
  std::vector<Slot> slots_;
  size_t mask_ = 0;
};

// Word bytes -> ids, sharded so concurrent encode() calls rarely wait on one lock. Each shard is a
// flat open-addressing table over two arenas (key bytes, ids): one probe touches one cache line
// instead of chasing list nodes. A full shard is simply cleared: the cache only saves time, never
// changes results.
class BpeModel::WordCache {
 public:
  WordCache() : shards_(std::make_unique<Shard[]>(kShards)) {}

  void lookup_or_fill(std::string_view word, std::vector<BpeId>& out,
                      const std::function<void(std::vector<BpeId>&)>& compute) {
    uint64_t h = hash(word);
    Shard& shard = shards_[h >> (64 - kShardBits)];
    {
      std::lock_guard<std::mutex> lock(shard.mu);
      if (const Entry* e = shard.find(h, word)) {
        out.insert(out.end(), shard.ids.begin() + e->ids_off,
                   shard.ids.begin() + e->ids_off + e->n_ids);
        return;
      }
    }
    size_t start = out.size();
    compute(out);
    std::lock_guard<std::mutex> lock(shard.mu);
    if (shard.find(h, word) == nullptr)
      shard.insert(h, word, out.data() + start, out.size() - start);
  }

 private:
  static constexpr int kShardBits = 5;  // 32 shards
  static constexpr size_t kShards = size_t{1} << kShardBits;
  static constexpr size_t kSlots = 8192;  // per shard; at most half are used
  struct Entry {
    uint64_t hash = 0;  // 0: empty slot
    uint32_t key_off = 0;
    uint32_t ids_off = 0;
    uint16_t key_len = 0;
    uint16_t n_ids = 0;
  };
  struct alignas(64) Shard {
    std::mutex mu;
    std::vector<Entry> table = std::vector<Entry>(kSlots);
    std::string keys;
    std::vector<BpeId> ids;
    size_t count = 0;

    const Entry* find(uint64_t h, std::string_view word) const {
      for (size_t i = h & (kSlots - 1);; i = (i + 1) & (kSlots - 1)) {
        const Entry& e = table[i];
        if (e.hash == 0) return nullptr;
        if (e.hash == h && e.key_len == word.size() &&
            std::memcmp(keys.data() + e.key_off, word.data(), word.size()) == 0) {
          return &e;
        }
      }
    }
    void insert(uint64_t h, std::string_view word, const BpeId* first, size_t n) {
      if (count >= kSlots / 2) {
        std::fill(table.begin(), table.end(), Entry{});
        keys.clear();
        ids.clear();
        count = 0;
      }
      size_t i = h & (kSlots - 1);
      while (table[i].hash != 0) i = (i + 1) & (kSlots - 1);
      table[i] = Entry{h, static_cast<uint32_t>(keys.size()), static_cast<uint32_t>(ids.size()),
                       static_cast<uint16_t>(word.size()), static_cast<uint16_t>(n)};
      keys.append(word);
      ids.insert(ids.end(), first, first + n);
      ++count;
    }
  };

  // A fast hash for short keys (8 bytes per multiply); never 0, which marks an empty slot.
  static uint64_t hash(std::string_view s) {
    uint64_t h = 0x9E3779B97F4A7C15ull ^ (s.size() * 0xff51afd7ed558ccdULL);
    size_t i = 0;
    for (; i + 8 <= s.size(); i += 8) {
      uint64_t w;
      std::memcpy(&w, s.data() + i, 8);
      h = mix(h ^ w);
    }
    uint64_t w = 0;
    std::memcpy(&w, s.data() + i, s.size() - i);
    h = mix(h ^ w ^ 0x5bd1e995u);
    return h == 0 ? 1 : h;
  }

  std::unique_ptr<Shard[]> shards_;
};

BpeModel::BpeModel()
    : merges_(std::make_unique<MergeTable>(0)), cache_(std::make_unique<WordCache>()) {
  byte_ids_.fill(-1);
}

BpeModel::BpeModel(const std::array<BpeId, 256>& byte_ids, const std::vector<Merge>& merges,
                   bool ignore_merges, std::unordered_map<std::string, BpeId> whole_words)
    : byte_ids_(byte_ids),
      merges_(std::make_unique<MergeTable>(merges.size())),
      cache_(std::make_unique<WordCache>()),
      ignore_merges_(ignore_merges),
      whole_words_(std::move(whole_words)) {
  for (size_t r = 0; r < merges.size(); ++r) {
    merges_->insert_or_assign(merges[r].left, merges[r].right, static_cast<uint32_t>(r),
                              merges[r].merged);
  }
}

BpeModel::BpeModel(BpeModel&&) noexcept = default;
BpeModel& BpeModel::operator=(BpeModel&&) noexcept = default;
BpeModel::~BpeModel() = default;

void BpeModel::encode_word(std::string_view word, std::vector<BpeId>& out) const {
  if (word.size() == 1) {
    BpeId id = byte_ids_[static_cast<uint8_t>(word[0])];
    if (id >= 0) out.push_back(id);
    return;
  }
  if (ignore_merges_) {
    auto it = whole_words_.find(std::string(word));
    if (it != whole_words_.end()) {
      out.push_back(it->second);
      return;
    }
  }
  if (word.size() > kMaxCachedWord) {
    merge_heap(word, out);
    return;
  }
  cache_->lookup_or_fill(word, out, [&](std::vector<BpeId>& o) {
    if (word.size() <= kScanLimit) {
      merge_scan(word, o);
    } else {
      merge_heap(word, o);
    }
  });
}

std::vector<BpeId> BpeModel::merge_word(std::string_view word, bool use_heap) const {
  std::vector<BpeId> out;
  if (use_heap) {
    merge_heap(word, out);
  } else {
    merge_scan(word, out);
  }
  return out;
}

// O(n^2) in the worst case but with tiny constants: `rank[i]` caches the merge of (ids[i],
// ids[i+1]) so each step is one min-scan plus two table lookups.
void BpeModel::merge_scan(std::string_view word, std::vector<BpeId>& out) const {
  if (word.size() > kMaxCachedWord) {
    merge_heap(word, out);
    return;
  }
  BpeId ids[kMaxCachedWord];
  uint32_t rank[kMaxCachedWord];
  BpeId merged[kMaxCachedWord];
  size_t n = 0;
  for (char c : word) {
    BpeId id = byte_ids_[static_cast<uint8_t>(c)];
    if (id >= 0) ids[n++] = id;
  }
  auto fill = [&](size_t i) {
    const MergeTable::Slot* s = merges_->find(ids[i], ids[i + 1]);
    rank[i] = s != nullptr ? s->rank : kNoRank;
    merged[i] = s != nullptr ? s->merged : -1;
  };
  for (size_t i = 0; i + 1 < n; ++i) fill(i);
  while (n > 1) {
    size_t best = 0;
    uint32_t best_rank = kNoRank;
    for (size_t i = 0; i + 1 < n; ++i) {
      if (rank[i] < best_rank) {
        best_rank = rank[i];
        best = i;
      }
    }
    if (best_rank == kNoRank) break;
    ids[best] = merged[best];
    // Drop symbol best+1; the pair caches after it shift down with it.
    if (best + 2 < n) {
      std::copy(ids + best + 2, ids + n, ids + best + 1);
      std::copy(rank + best + 2, rank + n - 1, rank + best + 1);
      std::copy(merged + best + 2, merged + n - 1, merged + best + 1);
    }
    --n;
    if (best > 0) fill(best - 1);
    if (best + 1 < n) fill(best);
  }
  out.insert(out.end(), ids, ids + n);
}

// HF's algorithm: a min-heap of (rank, position of the left symbol) over a linked list of symbols;
// stale entries are skipped when popped.
void BpeModel::merge_heap(std::string_view word, std::vector<BpeId>& out) const {
  struct Symbol {
    BpeId id;
    int32_t prev;
    int32_t next;
    bool alive;
  };
  std::vector<Symbol> syms;
  syms.reserve(word.size());
  for (char c : word) {
    BpeId id = byte_ids_[static_cast<uint8_t>(c)];
    if (id < 0) continue;
    auto i = static_cast<int32_t>(syms.size());
    syms.push_back({id, i - 1, i + 1, true});
  }
  if (syms.empty()) return;
  syms.back().next = -1;
  using Entry = std::pair<uint32_t, int32_t>;  // (rank, left position)
  std::priority_queue<Entry, std::vector<Entry>, std::greater<Entry>> heap;
  auto push = [&](int32_t left) {
    if (left < 0 || syms[left].next < 0) return;
    const MergeTable::Slot* s = merges_->find(syms[left].id, syms[syms[left].next].id);
    if (s != nullptr) heap.emplace(s->rank, left);
  };
  for (int32_t i = 0; i + 1 < static_cast<int32_t>(syms.size()); ++i) push(i);
  while (!heap.empty()) {
    auto [rank, left] = heap.top();
    heap.pop();
    Symbol& a = syms[left];
    if (!a.alive || a.next < 0) continue;
    Symbol& b = syms[a.next];
    const MergeTable::Slot* s = merges_->find(a.id, b.id);
    if (s == nullptr || s->rank != rank) continue;  // stale: one side changed since the push
    a.id = s->merged;
    b.alive = false;
    a.next = b.next;
    if (a.next >= 0) syms[a.next].prev = left;
    push(a.prev);
    push(left);
  }
  for (int32_t i = 0; i >= 0; i = syms[i].next) out.push_back(syms[i].id);
}

}  // namespace ajet::text
