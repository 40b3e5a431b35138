// Deterministic randomness for task generation, demos and environments: the same seed gives the
// same tasks on every platform and compiler. std::uniform_int_distribution & co. are
// implementation-defined, so they must never be used here; everything draws from SplitMix64 with
// our own range reduction.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <utility>
#include <vector>

namespace ajet::tasks {

// FNV-1a over the bytes, then a SplitMix64 finaliser (so nearby strings land far apart).
uint64_t stable_hash(std::string_view text);
// Mixes several values into one seed (order matters).
uint64_t mix_seed(uint64_t a, uint64_t b);

class Rng {
 public:
  explicit Rng(uint64_t seed) : state_(seed) {}

  uint64_t next_u64();
  // Uniform in [lo, hi] (inclusive); lo <= hi. Rejection sampling, no modulo bias.
  int64_t uniform_int(int64_t lo, int64_t hi);
  // Uniform in [0, 1) with 53 random bits.
  double uniform01();
  bool bernoulli(double p) { return uniform01() < p; }
  // Index drawn with probability weights[i] / sum; weights >= 0 with a positive sum.
  size_t weighted_index(const std::vector<double>& weights);

  template <class T>
  void shuffle(std::vector<T>& items) {  // Fisher-Yates
    for (size_t i = items.size(); i > 1; --i) {
      size_t j = static_cast<size_t>(uniform_int(0, static_cast<int64_t>(i) - 1));
      std::swap(items[i - 1], items[j]);
    }
  }
  template <class T>
  const T& pick(const std::vector<T>& items) {
    return items[static_cast<size_t>(uniform_int(0, static_cast<int64_t>(items.size()) - 1))];
  }

 private:
  uint64_t state_;
};

}  // namespace ajet::tasks
