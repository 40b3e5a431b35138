#include "tasks/rng.h"

#include "common/error.h"
#include "common/mix.h"

namespace ajet::tasks {

uint64_t stable_hash(std::string_view text) { return splitmix64_finalize(fnv1a64(text)); }

uint64_t mix_seed(uint64_t a, uint64_t b) {
  return splitmix64_finalize(a * 0x9e3779b97f4a7c15ULL + splitmix64_finalize(b));
}

uint64_t Rng::next_u64() {
  state_ += 0x9e3779b97f4a7c15ULL;
  return splitmix64_finalize(state_);
}

int64_t Rng::uniform_int(int64_t lo, int64_t hi) {
  if (lo > hi)
    invalid_argument("Rng::uniform_int: empty range [" + std::to_string(lo) + ", " +
                     std::to_string(hi) + "]");
  const uint64_t span = static_cast<uint64_t>(hi) - static_cast<uint64_t>(lo);
  if (span == UINT64_MAX) return static_cast<int64_t>(next_u64());
  const uint64_t n = span + 1;
  // Largest multiple of n that fits: values at or above it would bias the low residues.
  const uint64_t limit = UINT64_MAX - (UINT64_MAX % n);
  uint64_t x = next_u64();
  while (x >= limit) x = next_u64();
  return static_cast<int64_t>(static_cast<uint64_t>(lo) + x % n);
}

double Rng::uniform01() { return static_cast<double>(next_u64() >> 11) * 0x1.0p-53; }

size_t Rng::weighted_index(const std::vector<double>& weights) {
  double total = 0;
  for (double w : weights) {
    if (!(w >= 0)) invalid_argument("Rng::weighted_index: weights must be >= 0");
    total += w;
  }
  if (!(total > 0)) invalid_argument("Rng::weighted_index: weights must have a positive sum");
  double x = uniform01() * total;
  for (size_t i = 0; i < weights.size(); ++i) {
    if (x < weights[i]) return i;
    x -= weights[i];
  }
  // Rounding left x just past the end: the last positive weight.
  for (size_t i = weights.size(); i > 0; --i) {
    if (weights[i - 1] > 0) return i - 1;
  }
  return 0;
}

}  // namespace ajet::tasks
