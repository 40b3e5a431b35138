// 64-bit integer mixing shared by seeds, sampling streams and hash keys: splitmix64's finaliser, a
// bijection in which every input bit affects every output bit. Not cryptographic.
#pragma once

#include <cstdint>

namespace ajet {

inline constexpr uint64_t kGoldenGamma = 0x9e3779b97f4a7c15ULL;  // splitmix64's increment

inline uint64_t splitmix64_finalize(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

}  // namespace ajet
