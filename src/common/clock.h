// Elapsed time on the monotonic clock, for step times, timeouts and progress lines.
#pragma once

#include <chrono>

namespace ajet {

// Seconds from `start` to now (steady_clock).
inline double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace ajet
