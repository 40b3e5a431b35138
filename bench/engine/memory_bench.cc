// What this machine's memory gives a decode step: read bandwidth of one and two threads against the
// working set's size (where it falls from the last-level cache to DRAM), and of two threads reading
// scattered chunks of 4 and 16 KiB (a paged KV cache's blocks of one kv head) against a streaming
// read. The attention of a float32 decode step reads its whole cache from memory once per layer, so
// these bounds say what it can cost (docs/engine.md, "What is left"). Prints two tables and appends
// them to docs/benchmarks.md (--no-append skips that, --smoke runs a second to check the program
// works).
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <numeric>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "bench_cli.h"

namespace {

using Clock = std::chrono::steady_clock;
typedef float v4f __attribute__((vector_size(16)));

// Sum of `bytes` (a multiple of 64) at p, four 16-byte loads per line: the loads, not the adds,
// bound it.
float sum_bytes(const char* p, size_t bytes) {
  v4f a = {}, b = {}, c = {}, d = {};
  for (size_t i = 0; i < bytes; i += 64) {
    v4f x, y, z, w;
    std::memcpy(&x, p + i, 16);
    std::memcpy(&y, p + i + 16, 16);
    std::memcpy(&z, p + i + 32, 16);
    std::memcpy(&w, p + i + 48, 16);
    a += x;
    b += y;
    c += z;
    d += w;
  }
  const v4f s = a + b + c + d;
  return s[0] + s[1] + s[2] + s[3];
}

// GB/s of `threads` threads each reading its own list of (offset, bytes) pieces of `data`, `passes`
// times; the clock runs from a common start to the last thread's end.
double read_gbps(const char* data,
                 const std::vector<std::vector<std::pair<size_t, size_t>>>& pieces, int passes) {
  std::atomic<bool> go{false};
  std::atomic<float> sink{0};
  std::vector<double> seconds(pieces.size());
  std::vector<std::thread> workers;
  double bytes = 0;
  for (const auto& list : pieces) {
    for (const auto& piece : list) bytes += static_cast<double>(piece.second) * passes;
  }
  for (size_t t = 0; t < pieces.size(); ++t) {
    workers.emplace_back([&, t] {
      while (!go.load(std::memory_order_acquire)) {
      }
      const auto t0 = Clock::now();
      float s = 0;
      for (int pass = 0; pass < passes; ++pass) {
        for (const auto& [offset, size] : pieces[t]) s += sum_bytes(data + offset, size);
      }
      seconds[t] = std::chrono::duration<double>(Clock::now() - t0).count();
      sink.store(s, std::memory_order_relaxed);
    });
  }
  go.store(true, std::memory_order_release);
  for (auto& w : workers) w.join();
  return bytes / *std::max_element(seconds.begin(), seconds.end()) / 1e9;
}

// Best of `reps` (after a warm-up read) of read_gbps.
double best_gbps(const char* data,
                 const std::vector<std::vector<std::pair<size_t, size_t>>>& pieces, int passes,
                 int reps) {
  read_gbps(data, pieces, 1);
  double best = 0;
  for (int r = 0; r < reps; ++r) best = std::max(best, read_gbps(data, pieces, passes));
  return best;
}

// [0, bytes) split into `threads` contiguous shares.
std::vector<std::vector<std::pair<size_t, size_t>>> streaming(size_t bytes, int threads) {
  std::vector<std::vector<std::pair<size_t, size_t>>> pieces(static_cast<size_t>(threads));
  const size_t share = bytes / threads / 64 * 64;
  for (int t = 0; t < threads; ++t) pieces[static_cast<size_t>(t)].push_back({share * t, share});
  return pieces;
}

// Every `chunk`-byte piece of [0, bytes) once, in a shuffled order, dealt out to `threads` in turn.
std::vector<std::vector<std::pair<size_t, size_t>>> scattered(size_t bytes, size_t chunk,
                                                              int threads) {
  std::vector<size_t> order(bytes / chunk);
  std::iota(order.begin(), order.end(), size_t{0});
  std::shuffle(order.begin(), order.end(), std::mt19937(7));
  std::vector<std::vector<std::pair<size_t, size_t>>> pieces(static_cast<size_t>(threads));
  for (size_t i = 0; i < order.size(); ++i)
    pieces[i % threads].push_back({order[i] * chunk, chunk});
  return pieces;
}

}  // namespace

int main(int argc, char** argv) {
  ajet::bench::BenchCli cli(
      "memory_bench",
      "Read bandwidth against working-set size and of scattered chunks; appends its tables to "
      "docs/benchmarks.md unless --no-append or --smoke");
  if (auto code = cli.parse(argc, argv)) return *code;
  const bool smoke = cli.smoke();
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  const size_t largest = smoke ? size_t{16} << 20 : size_t{512} << 20;
  std::vector<char> buffer(largest, 1);  // written once: every page is mapped before the clock runs
  const char* data = buffer.data();
  const int reps = smoke ? 1 : 5;

  std::ostringstream table;
  char line[256];
  table << "Read bandwidth against the working set (each thread reads its contiguous share, again "
           "and again:\n"
        << "at least 256 MiB a measurement; best of " << reps
        << "). Where it falls is where the last-level cache ends.\n\n"
        << "| working set | 1 thread GB/s | 2 threads GB/s |\n|---|---|---|\n";
  for (size_t mib : {4, 8, 16, 32, 64, 128, 256, 512}) {
    const size_t bytes = mib << 20;
    if (bytes > largest) break;
    const int passes = static_cast<int>(std::max<size_t>(1, (size_t{256} << 20) / bytes));
    const double one = best_gbps(data, streaming(bytes, 1), smoke ? 1 : passes, reps);
    const double two = best_gbps(data, streaming(bytes, 2), smoke ? 1 : passes, reps);
    std::snprintf(line, sizeof(line), "| %zu MiB | %.1f | %.1f |\n", mib, one, two);
    std::printf("%s", line);
    table << line;
  }
  const double stream2 = best_gbps(data, streaming(largest, 2), 1, reps);
  table << "\nTwo threads over " << (largest >> 20)
        << " MiB (from DRAM): a streaming read against the same bytes "
        << "read as chunks in a shuffled order.\n\n"
        << "| read | GB/s | vs streaming |\n|---|---|---|\n";
  std::snprintf(line, sizeof(line), "| streaming | %.1f | 1.00x |\n", stream2);
  table << line;
  for (size_t kib : {4, 16, 64}) {
    const double g = best_gbps(data, scattered(largest, kib << 10, 2), 1, reps);
    std::snprintf(line, sizeof(line), "| %zu KiB chunks | %.1f | %.2fx |\n", kib, g, g / stream2);
    std::printf("%s", line);
    table << line;
  }
  std::printf("\n%s", table.str().c_str());
  if (cli.append()) {
    ajet::bench::append_to_benchmarks(
        "Memory read bandwidth: working-set size and scattered chunks (bench/engine/memory_bench)",
        table.str());
  }
  return 0;
}
