// at::parallel_for for this project's own kernels. It is a header template: under libtorch's OpenMP
// backend a translation unit compiled without -fopenmp gets a serial loop, whatever the thread
// count (the engine's kernels once ran on one thread of two that way). Include this instead of
// <ATen/Parallel.h> where at::parallel_for is called, and link the module with ajet_link_openmp
// (cmake/AjetTorch.cmake); compute.h's own_parallel_for_threads() checks the result at run time.
#pragma once

#include <ATen/Parallel.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <limits>

#if AT_PARALLEL_OPENMP && !defined(INTRA_OP_PARALLEL)
#error "compile with OpenMP (ajet_link_openmp): at::parallel_for would run on one thread"
#endif

namespace ajet::model {

// [0, n) over the intra-op threads as at::parallel_for(0, n, grain, ...) splits it, and with two
// threads the one that finishes its half first takes `chunk` indices at a time from the back of the
// other's. Each thread still computes its own half front to back (what its caches hold from the
// last region is what it reads again); only the tail moves. Static halves left one thread waiting
// 16-53 µs a region on `small` x64 decode (the residual adds, the SiLU projections, q/k/v,
// attention), whichever core was slower that time; handing out every chunk on demand instead cost
// more than that. Each index runs exactly once, whole, on one thread: results do not depend on the
// split.
//
// fn(begin, end, then): computes [begin, end); `then` is the index the thread computes next when it
// knows it (its own half's next chunk), else -1: for a kernel to prefetch. One thread, or more than
// two: at::parallel_for's split with then = -1.
template <typename F>
void parallel_for_stealing(int64_t n, int64_t grain, int64_t chunk, const F& fn) {
  if (n <= 0) return;
  const int64_t threads =
      std::min<int64_t>(at::get_num_threads(), (n + grain - 1) / std::max<int64_t>(1, grain));
  if (threads != 2 || n > std::numeric_limits<int32_t>::max() || chunk < 1) {
    at::parallel_for(0, n, grain, [&](int64_t begin, int64_t end) { fn(begin, end, int64_t{-1}); });
    return;
  }
  // Each half's unclaimed [front, back) in one word: front in the low 32 bits, back in the high.
  struct alignas(64) Half {
    std::atomic<uint64_t> range;
  };
  auto pack = [](int64_t front, int64_t back) {
    return static_cast<uint64_t>(front) | static_cast<uint64_t>(back) << 32;
  };
  const int64_t middle = (n + 1) / 2;  // at::parallel_for's split
  Half halves[2];
  halves[0].range.store(pack(0, middle), std::memory_order_relaxed);
  halves[1].range.store(pack(middle, n), std::memory_order_relaxed);
  // Claims `chunk` indices of half h, from the front (its owner) or the back; false when none is
  // left.
  auto claim = [&](int h, bool from_front, int64_t& begin, int64_t& end, int64_t& then) {
    uint64_t r = halves[h].range.load(std::memory_order_relaxed);
    for (;;) {
      const int64_t front = static_cast<int64_t>(r & 0xffffffffu),
                    back = static_cast<int64_t>(r >> 32);
      if (front >= back) return false;
      const int64_t take = std::min(chunk, back - front);
      const uint64_t next = from_front ? pack(front + take, back) : pack(front, back - take);
      if (halves[h].range.compare_exchange_weak(r, next, std::memory_order_relaxed)) {
        begin = from_front ? front : back - take;
        end = begin + take;
        then = from_front && end < back ? end : -1;
        return true;
      }
    }
  };
  // One index per thread; a single thread (nested, or OpenMP gave one) gets [0, 2) and does both
  // halves.
  at::parallel_for(0, 2, 1, [&](int64_t first, int64_t last) {
    int64_t begin = 0, end = 0, then = -1;
    for (int64_t h = first; h < last; ++h) {
      while (claim(static_cast<int>(h), true, begin, end, then)) fn(begin, end, then);
    }
    if (last - first == 1) {
      const int other = static_cast<int>(1 - first);
      while (claim(other, false, begin, end, then)) fn(begin, end, then);
    }
  });
}

}  // namespace ajet::model
