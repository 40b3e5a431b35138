// 64-bit integer mixing shared by seeds, sampling streams and hash keys: splitmix64's finaliser, a
// bijection in which every input bit affects every output bit. Not cryptographic.
#pragma once

#include <cstdint>
#include <string_view>

namespace ajet {

inline constexpr uint64_t kGoldenGamma = 0x9e3779b97f4a7c15ULL;  // splitmix64's increment

inline uint64_t splitmix64_finalize(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

// FNV-1a (64-bit) over the bytes: a stable hash of text (the same on every platform and build).
// Nearby strings land near each other; mix it with splitmix64_finalize where that matters.
inline uint64_t fnv1a64(std::string_view text) {
  uint64_t h = 0xcbf29ce484222325ULL;
  for (unsigned char c : text) h = (h ^ c) * 0x100000001b3ULL;
  return h;
}

}  // namespace ajet
