// Full-sequence forward throughput of the presets (the prefill / training-forward path, no KV
// cache) at 1 and 2 threads, with achieved FLOP/s against a float32 GEMM peak measured in the same
// run. Prints a table and appends it to docs/benchmarks.md (pass --no-append to skip, --smoke for a
// seconds-long run that checks the program works).
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <sstream>
#include <string>

#include "bench_cli.h"
#include "gemm_peak.h"
#include "model/blas_kernel.h"
#include "model/compute.h"
#include "model/presets.h"
#include "model/qwen2.h"

namespace {

using ajet::model::Qwen2Model;
using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// FLOPs of one forward over T tokens: 2 per weight per token (embedding lookup excluded, lm_head
// included), plus QK^T and PV over the full T x T score matrix the masked attention computes.
double forward_flops(const ajet::hf::ModelConfig& c, int64_t t) {
  const double weights =
      static_cast<double>(ajet::model::count_parameters(c) - c.vocab_size * c.hidden_size) +
      static_cast<double>(c.vocab_size * c.hidden_size);  // lm_head (tied or not)
  const double attention =
      4.0 * c.num_hidden_layers * static_cast<double>(t) * t * c.num_attention_heads * c.head_dim;
  return 2.0 * weights * t + attention;
}

struct Row {
  std::string preset;
  int threads;
  int64_t t;
  double tokens_per_s, gflops, peak;
};

Row measure(const std::string& preset, int threads, int64_t t, int reps) {
  ajet::model::configure_threads(threads);
  auto config = ajet::model::preset_config(preset, 1024);
  Qwen2Model model(config);
  ajet::model::init_weights(model, 0);
  torch::NoGradGuard no_grad;
  auto ids = torch::randint(config.vocab_size, {1, t}, torch::kLong);
  auto pos = torch::arange(t, torch::kLong).unsqueeze(0);
  model->forward_logits(ids, pos);  // warm-up: rotary tables, allocator
  double best = 1e30;
  for (int r = 0; r < reps; ++r) {
    auto t0 = Clock::now();
    model->forward_logits(ids, pos);
    best = std::min(best, seconds_since(t0));
  }
  const double peak = ajet::bench::measure_gemm_peak({.threads = threads, .reps = reps}).gflops;
  return {preset, threads, t, t / best, forward_flops(config, t) / best / 1e9, peak};
}

}  // namespace

int main(int argc, char** argv) {
  ajet::model::pick_blas_kernel(argc, argv);  // first: it may re-execute the process
  ajet::bench::BenchCli cli(
      "model_forward_bench",
      "One sequence through the model's full forward (no KV cache) on the tiny and small "
      "presets, 1 and 2 threads, against a GEMM peak measured in the same run");
  if (auto code = cli.parse(argc, argv)) return *code;
  const bool smoke = cli.smoke();
  const int64_t t = smoke ? 64 : 512;
  const int reps = smoke ? 1 : 5;
  ajet::model::configure_threads(2);
  std::printf("compute: %s\n", ajet::model::describe_compute_backend().c_str());

  std::vector<Row> rows;
  for (const char* preset : {"tiny", "small"}) {
    for (int threads : {1, 2}) rows.push_back(measure(preset, threads, t, reps));
  }
  std::ostringstream table;
  table << "| preset | threads | T | tokens/s | GFLOP/s | GEMM peak GFLOP/s | % of peak | speedup "
           "vs 1 thread |\n"
        << "|---|---|---|---|---|---|---|---|\n";
  for (const auto& r : rows) {
    const Row& one = *std::find_if(rows.begin(), rows.end(), [&](const Row& x) {
      return x.preset == r.preset && x.threads == 1;
    });
    char line[256];
    std::snprintf(line, sizeof(line), "| %s | %d | %lld | %.0f | %.1f | %.1f | %.0f %% | %.2fx |\n",
                  r.preset.c_str(), r.threads, static_cast<long long>(r.t), r.tokens_per_s,
                  r.gflops, r.peak, 100 * r.gflops / r.peak, r.tokens_per_s / one.tokens_per_s);
    table << line;
  }
  std::printf("%s", table.str().c_str());
  if (cli.append()) {
    std::ostringstream body;
    body << "One sequence of T tokens through `Qwen2ModelImpl::forward_logits` (no KV cache: the "
            "prefill and\n"
         << "training-forward path), vocab 1024, float32, best of " << reps
         << ". GFLOP/s counts 2 per weight per\n"
         << "token plus the full T x T attention products; the peak is the best float32 square "
            "matmul\n"
         << "(1024..2048) at the same thread count, measured in the same run "
            "(bench/common/gemm_peak).\n\n"
         << table.str();
    ajet::bench::append_to_benchmarks("Model forward, full sequence (bench/model/forward_bench)",
                                      body.str());
  }
  return 0;
}
