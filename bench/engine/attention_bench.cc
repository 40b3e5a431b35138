// The decode step's attention alone, over the paged cache: 64 sequences of 128 cached tokens (one
// new token each) at the tiny and small presets' head shapes, every layer of a step, the cache's
// blocks scattered as a long-running engine leaves them. Compares a float32 cache with a bfloat16
// one (ajet.engine.kv_cache_dtype), each with the step reading every layer's cache (from memory:
// the caches of all layers exceed the CPU caches on `small`) and reading one layer's cache again
// and again (in cache). Says how much of attention is waiting on memory. Prints a table and appends
// it to docs/benchmarks.md (--no-append skips that, --smoke runs a second to check the program
// works).
#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <numeric>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "bench_cli.h"
#include "infer/attention.h"
#include "infer/kv_cache.h"
#include "model/compute.h"

namespace {

using namespace ajet::infer;

struct Shape {
  const char* preset;
  int64_t layers, heads, kv_heads, head_dim;
};

struct Row {
  std::string preset;
  double ms[2][2];  // [float32, bfloat16][from memory, in cache]: best step time
  double bytes[2];  // keys and values read per step
};

// Best time of one step's attention (every layer) over `reps` steps.
double step_ms(const Shape& s, at::ScalarType dtype, bool in_cache, int64_t seqs, int64_t len,
               int reps) {
  const int64_t block = 16, per_seq = (len + block - 1) / block;
  KvCache cache({s.layers, s.kv_heads, s.head_dim, block}, seqs * per_seq,
                at::TensorOptions().dtype(dtype));
  for (int64_t l = 0; l < s.layers; ++l) {
    cache.keys(l).copy_(at::randn(cache.keys(l).sizes()));
    cache.values(l).copy_(at::randn(cache.values(l).sizes()));
  }
  std::vector<int32_t> blocks(static_cast<size_t>(seqs * per_seq));
  std::iota(blocks.begin(), blocks.end(), 0);
  std::shuffle(blocks.begin(), blocks.end(), std::mt19937(1));
  std::vector<AttentionSegment> segments;
  for (int64_t i = 0; i < seqs; ++i) segments.push_back({i, 1, len - 1, i * per_seq, per_seq});
  AttentionBatch batch(segments, blocks, block, at::kCPU);
  const at::Tensor q = at::randn({seqs, s.heads, s.head_dim});
  double best = 1e30;
  for (int r = 0; r <= reps; ++r) {  // r = 0 warms up
    const auto t0 = std::chrono::steady_clock::now();
    for (int64_t l = 0; l < s.layers; ++l)
      cached_attention(q, cache, in_cache ? 0 : l, batch, AttentionImpl::kCpuKernel);
    const double ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    if (r > 0) best = std::min(best, ms);
  }
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  ajet::bench::BenchCli cli(
      "attention_bench",
      "One decode step's attention over a float32 and a bfloat16 paged KV cache, from memory "
      "and in cache");
  if (auto code = cli.parse(argc, argv)) return *code;
  const bool smoke = cli.smoke();
  ajet::model::configure_threads(2);
  const int64_t seqs = smoke ? 4 : 64, len = smoke ? 32 : 128;
  const int reps = smoke ? 1 : 20;
  const std::vector<Shape> shapes = {{"tiny", 4, 4, 2, 32}, {"small", 8, 8, 4, 64}};
  std::vector<Row> rows;
  for (const Shape& s : shapes) {
    Row row{s.preset, {}, {}};
    for (int dt = 0; dt < 2; ++dt) {
      const at::ScalarType dtype = dt == 0 ? at::kFloat : at::kBFloat16;
      row.bytes[dt] = 2.0 * s.layers * seqs * len * s.kv_heads * s.head_dim * (dt == 0 ? 4 : 2);
      for (int c = 0; c < 2; ++c) row.ms[dt][c] = step_ms(s, dtype, c == 1, seqs, len, reps);
      std::printf("%s %s: %.3f ms from memory, %.3f ms in cache\n", s.preset,
                  dt == 0 ? "float32" : "bfloat16", row.ms[dt][0], row.ms[dt][1]);
    }
    rows.push_back(row);
  }
  std::ostringstream table;
  table << "One decode step's attention (every layer; " << seqs << " sequences of " << len
        << " cached tokens, blocks of 16 scattered, 2 threads, best of " << reps
        << " steps). From memory: each layer reads its own cache; in cache: every layer reads "
           "layer 0's.\n\n"
        << "| preset | float32 cache ms (GB/s) | bfloat16 cache ms (GB/s) | bfloat16 vs float32 | "
           "float32 in cache ms | "
           "bfloat16 in cache ms |\n|---|---|---|---|---|---|\n";
  for (const Row& r : rows) {
    char line[256];
    std::snprintf(line, sizeof(line), "| %s | %.2f (%.1f) | %.2f (%.1f) | %.2fx | %.2f | %.2f |\n",
                  r.preset.c_str(), r.ms[0][0], r.bytes[0] / r.ms[0][0] / 1e6, r.ms[1][0],
                  r.bytes[1] / r.ms[1][0] / 1e6, r.ms[0][0] / r.ms[1][0], r.ms[0][1], r.ms[1][1]);
    table << line;
  }
  std::printf("\n%s", table.str().c_str());
  if (cli.append()) {
    ajet::bench::append_to_benchmarks(
        "Decode attention over the paged cache, float32 vs bfloat16 (bench/engine/attention_bench)",
        table.str());
  }
  return 0;
}
