// The inference engine on the tiny and small presets: (a) aggregate decode throughput at 1, 8, 32
// and 64 concurrent sequences (the median and range of 5 runs) and its ratio to concurrency 1; (b)
// model FLOP utilisation of chunked prefill and of batched decode against a float32 GEMM peak
// measured in the same run at the same thread count. Prints a table and appends it to
// docs/benchmarks.md
// (--no-append skips that, --smoke runs for seconds to check the program works, --threads N
// overrides the default 2; --only PRESET[:C] measures one preset's decode at concurrency C (all of
// them when C is left out) and its prefill, for profiling with perf, and prints no table;
// --bf16-cache runs the decode table with the KV cache in bfloat16). A further table compares the
// bfloat16 and float32 caches at 1 and 64 sequences.
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <deque>
#include <sstream>
#include <string>
#include <vector>

#include "bench_cli.h"
#include "common/log.h"
#include "infer/engine.h"
#include "model/blas_kernel.h"
#include "model/compute.h"
#include "model/presets.h"
#include "model/qwen2.h"
#include "model/row_kernels.h"

namespace {

using ajet::batching::GenerateRequest;
using ajet::infer::InferenceEngine;
using ajet::infer::InferenceEngineOptions;
using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

double process_cpu_seconds() {
  timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + ts.tv_nsec * 1e-9;
}

// Wall time, and CPU time per thread: on a machine shared with other work the second is what the
// run would have taken with its cores to itself (exact for one thread; spin-waits count for two).
struct Span {
  double wall = 0;
  double cpu = 0;
};
struct Stopwatch {
  int threads;
  Clock::time_point wall0 = Clock::now();
  double cpu0 = process_cpu_seconds();
  Span elapsed() const { return {seconds_since(wall0), (process_cpu_seconds() - cpu0) / threads}; }
};
int g_threads = 2;

// Best-of-reps GFLOP/s of float32 matmuls: the ceiling the model's GEMMs can reach. Square 1024 and
// the small preset's MLP shape (512 tokens x 512 -> 1536), whichever is faster.
Span gemm_peak_gflops(int reps) {
  Span best;
  for (auto [m, k, n] : {std::array<int64_t, 3>{1024, 1024, 1024}, {512, 512, 1536}}) {
    auto a = torch::randn({m, k}), b = torch::randn({k, n});
    auto c = torch::matmul(a, b);
    for (int r = 0; r < reps; ++r) {
      Stopwatch sw{g_threads};
      for (int i = 0; i < 4; ++i) c = torch::matmul(a, b);
      const Span t = sw.elapsed();
      best.wall = std::max(best.wall, 4 * 2.0 * m * k * n / t.wall / 1e9);
      best.cpu = std::max(best.cpu, 4 * 2.0 * m * k * n / t.cpu / 1e9);
    }
  }
  return best;
}

// FLOPs per token at context length ctx (the token attends to ctx positions): 2 per weight of the
// decoder layers, QK^T and PV over ctx keys, and the lm_head when the token's logits are computed.
double layer_flops(const ajet::hf::ModelConfig& c, double ctx) {
  const double h = c.hidden_size, q = c.num_attention_heads * c.head_dim,
               kv = c.num_key_value_heads * c.head_dim;
  const double weights = h * q + 2 * h * kv + q * h + 3 * h * c.intermediate_size;
  return c.num_hidden_layers * (2 * weights + 4 * q * ctx);
}
double lm_head_flops(const ajet::hf::ModelConfig& c) { return 2.0 * c.hidden_size * c.vocab_size; }

// GB/s at which one token's matrix-vector products stream the model's weights (every decoder matrix
// and the lm_head, M = 1, best of reps): what a single decoding sequence can at best reach.
// Every matrix a decode step multiplies by: the decoder layers' and the (tied) lm_head.
std::vector<torch::Tensor> decode_matrices(ajet::model::Qwen2Model& model) {
  std::vector<torch::Tensor> weights;
  for (const auto& [name, t] : model->hf_named_parameters()) {
    if (t.dim() == 2 && name.find("embed_tokens") == std::string::npos) weights.push_back(t);
  }
  weights.push_back(model->hf_named_parameters().front().second);  // embeddings: the (tied) lm_head
  return weights;
}

double weight_stream_gbps(ajet::model::Qwen2Model& model, int reps) {
  torch::NoGradGuard no_grad;
  const std::vector<torch::Tensor> weights = decode_matrices(model);
  double bytes = 0;
  for (const auto& w : weights) bytes += static_cast<double>(w.numel()) * w.element_size();
  double best = 1e30;
  for (int r = 0; r <= reps; ++r) {
    auto t0 = Clock::now();
    for (const auto& w : weights) torch::nn::functional::linear(torch::ones({1, w.size(1)}), w);
    if (r > 0) best = std::min(best, seconds_since(t0));
  }
  return bytes / best / 1e9;
}

InferenceEngineOptions engine_config(
    int threads, int64_t max_running,
    ajet::infer::AttentionImpl attention = ajet::infer::AttentionImpl::kAuto,
    at::ScalarType cache_dtype = at::ScalarType::Undefined) {
  InferenceEngineOptions e;
  e.attention = attention;
  e.cache_dtype = cache_dtype;
  e.start_thread =
      false;  // the benchmark steps the engine itself: no thread hand-off in the timing
  e.threads = threads;
  e.cache_bytes = 512LL << 20;
  e.block_size = 16;
  e.max_batch_tokens = 512;
  e.max_running = std::max<int64_t>(max_running, 1);
  return e;
}

GenerateRequest make_request(int64_t i, int64_t prompt_len, int64_t max_tokens, int64_t vocab) {
  GenerateRequest r;
  r.id = "bench-" + std::to_string(i);
  for (int64_t t = 0; t < prompt_len; ++t)
    r.prompt.push_back(static_cast<int32_t>((t * 131 + i * 977 + 7) % vocab));
  r.max_tokens = max_tokens;
  r.temperature = 1.0;
  r.seed = static_cast<uint64_t>(i);
  return r;
}

// Roofline bound on the decode ratio x64 / x1: a lone sequence waits for the weights to stream in
// (bytes / bandwidth per token), a full batch for the FLOPs (flops / GEMM peak per token).
double ratio_bound(const ajet::hf::ModelConfig& c, double gbps, double peak_gflops) {
  const double bytes = 4.0 * (ajet::model::count_parameters(c) -
                              (c.tie_word_embeddings ? 0 : c.vocab_size * c.hidden_size));
  const double flops = layer_flops(c, 0) + lm_head_flops(c);
  return (bytes / (gbps * 1e9)) / (flops / (peak_gflops * 1e9));
}

// The decode step's linears alone: every projection shape of a preset at `rows` rows, through the
// packed kernel (weights packed once, as the model keeps them), the small-row kernel (up to 48
// rows, split over the threads) and torch's linear (OpenBLAS), best of reps. Says how much of the
// GEMM peak the step's main cost can reach at that batch.
struct LinearRow {
  std::string preset;
  int64_t rows;
  Span packed;  // GFLOP/s
  Span kernel;  // zero above 48 rows, where the model never runs it
  Span blas;
};
LinearRow measure_linears(const std::string& preset, ajet::model::Qwen2Model& model, int64_t rows,
                          int reps) {
  torch::NoGradGuard no_grad;
  const std::vector<torch::Tensor> weights = decode_matrices(model);
  std::vector<torch::Tensor> inputs;
  std::deque<ajet::model::PackedWeight> packed(weights.size());
  double flops = 0;
  for (size_t i = 0; i < weights.size(); ++i) {
    inputs.push_back(torch::randn({rows, weights[i].size(1)}));
    flops += 2.0 * rows * weights[i].size(0) * weights[i].size(1);
    packed[i].of(weights[i]);
  }
  auto best_of = [&](auto&& fn) {
    Span best;
    for (int r = 0; r <= reps; ++r) {  // r = 0 warms up
      Stopwatch sw{g_threads};
      for (size_t i = 0; i < weights.size(); ++i) fn(i);
      const Span t = sw.elapsed();
      if (r > 0)
        best = {std::max(best.wall, flops / t.wall / 1e9), std::max(best.cpu, flops / t.cpu / 1e9)};
    }
    return best;
  };
  const Span with_packing = best_of([&](size_t i) {
    return ajet::model::linear_forward(inputs[i], weights[i], torch::Tensor(), &packed[i]);
  });
  const Span kernel = rows <= 48 ? best_of([&](size_t i) {
    return ajet::model::linear_forward(inputs[i], weights[i], torch::Tensor());
  })
                                 : Span{};
  const Span blas =
      best_of([&](size_t i) { return torch::nn::functional::linear(inputs[i], weights[i]); });
  return {preset, rows, with_packing, kernel, blas};
}

// One workload with an optimisation (the row kernels: RMSNorm and rotary in one pass per row; the
// fused projections) on and off.
struct RowKernelRow {
  std::string preset, workload;
  Span on, off;  // tokens/s
};

struct DecodeRow {
  std::string preset;
  int64_t concurrency;
  Span tokens_per_s;
  Span gflops;
  // Over the runs of the decode table (wall clock): the row is the median run, these its range.
  double tokens_lo = 0, tokens_hi = 0, gflops_lo = 0, gflops_hi = 0;
};

// The median of an odd number of runs (by wall-clock tokens/s), with the runs' range.
DecodeRow median_run(std::vector<DecodeRow> runs) {
  std::sort(runs.begin(), runs.end(), [](const DecodeRow& a, const DecodeRow& b) {
    return a.tokens_per_s.wall < b.tokens_per_s.wall;
  });
  DecodeRow r = runs[runs.size() / 2];
  r.tokens_lo = runs.front().tokens_per_s.wall;
  r.tokens_hi = runs.back().tokens_per_s.wall;
  r.gflops_lo = runs.front().gflops.wall;
  r.gflops_hi = runs.back().gflops.wall;
  return r;
}

// Decode at one concurrency with the KV cache in float32 (the model's dtype) and in bfloat16, back
// to back.
struct CacheDtypeRow {
  DecodeRow f32, bf16;
};

// Steady-state decode: the clock runs only while every sequence decodes. With a 512-token step
// budget the prompts take several steps to prefill and the first ones start decoding meanwhile, so
// the window opens at the step after the last prompt has sampled its first token (before
// 2026-12-05's second entry it opened after the first `concurrency` tokens, with the last prompts
// still prefilling inside it) and closes with the step in which the first sequence finishes (the
// later ones' last steps run with fewer sequences). Every step in the window decodes one token of
// each sequence.
DecodeRow measure_decode(const std::string& preset, ajet::model::Qwen2Model& model, int threads,
                         int64_t concurrency, int64_t prompt_len, int64_t max_tokens,
                         at::ScalarType cache_dtype = at::ScalarType::Undefined) {
  const auto& c = model->config();
  InferenceEngine engine(
      model, engine_config(threads, concurrency, ajet::infer::AttentionImpl::kAuto, cache_dtype));
  // Tokens each sequence has so far, and whether one has finished; the callbacks run inside step()
  // on this thread (the engine has no thread of its own here).
  std::vector<int64_t> generated(static_cast<size_t>(concurrency), 0);
  int64_t started = 0, finished = 0;
  std::string error;
  for (int64_t i = 0; i < concurrency; ++i) {
    engine.submit(make_request(i, prompt_len, max_tokens, c.vocab_size),
                  [&, i](const ajet::batching::GenerateEvent& e) {
                    if (e.error) error = e.error->what();
                    int64_t& n = generated[static_cast<size_t>(i)];
                    if (n == 0 && !e.tokens.empty()) ++started;
                    n += static_cast<int64_t>(e.tokens.size());
                    if (e.finish) ++finished;
                  });
  }
  while (started < concurrency && error.empty() && engine.step()) {
  }
  const std::vector<int64_t> at_start = generated;
  int64_t steps = 0;
  Stopwatch sw{g_threads};
  while (finished == 0 && error.empty() && engine.step()) ++steps;
  const Span t = sw.elapsed();
  while (engine.step()) {  // let the rest finish, untimed
  }
  if (!error.empty() || steps == 0) {
    std::fprintf(stderr, "engine_bench: decode %s x%lld measured nothing%s%s\n", preset.c_str(),
                 static_cast<long long>(concurrency), error.empty() ? "" : ": ", error.c_str());
    std::exit(1);
  }
  // Token j of a sequence (counting from 1) attends to prompt_len + j - 1 positions; the window's
  // tokens of sequence i are at_start[i] + 1 .. at_end[i], and all steps in it decode every
  // sequence.
  double tokens = 0, flops = 0;
  for (size_t i = 0; i < generated.size(); ++i) {
    for (int64_t j = at_start[i] + 1; j <= generated[i]; ++j) {
      tokens += 1;
      flops += layer_flops(c, static_cast<double>(prompt_len + j - 1)) + lm_head_flops(c);
    }
  }
  return {preset,
          concurrency,
          {tokens / t.wall, tokens / t.cpu},
          {flops / t.wall / 1e9, flops / t.cpu / 1e9}};
}

struct PrefillRow {
  std::string preset;
  int64_t prompt_len;
  Span tokens_per_s;
  Span gflops;
  Span gemm_attention_tokens_per_s;  // the same with attention as GEMMs per segment
                                     // (AttentionImpl::kTorchOps)
};

// Prompts of prompt_len tokens, one request at a time, chunked by the 512-token step budget; one
// generated token each (its lm_head row is counted).
PrefillRow measure_prefill(
    const std::string& preset, ajet::model::Qwen2Model& model, int threads, int64_t prompt_len,
    int reps, ajet::infer::AttentionImpl attention = ajet::infer::AttentionImpl::kAuto) {
  const auto& c = model->config();
  InferenceEngine engine(model, engine_config(threads, 4, attention));
  Span best{1e30, 1e30};
  for (int r = 0; r <= reps; ++r) {  // r = 0 warms up
    auto f = engine.generate(make_request(r, prompt_len, 1, c.vocab_size));
    Stopwatch sw{g_threads};
    while (engine.step()) {
    }
    const Span t = sw.elapsed();
    f.get();
    if (r > 0) best = {std::min(best.wall, t.wall), std::min(best.cpu, t.cpu)};
  }
  double flops = lm_head_flops(c);
  for (int64_t t = 0; t < prompt_len; ++t) flops += layer_flops(c, static_cast<double>(t + 1));
  return {preset,
          prompt_len,
          {prompt_len / best.wall, prompt_len / best.cpu},
          {flops / best.wall / 1e9, flops / best.cpu / 1e9},
          {}};
}

}  // namespace

int main(int argc, char** argv) {
  ajet::model::pick_blas_kernel(argc, argv);  // first: it may re-execute the process
  int threads = 2;
  std::string only;
  bool bf16_cache = false;
  ajet::bench::BenchCli cli(
      "engine_bench",
      "Decode and prefill throughput of InferenceEngine on the tiny and small presets; appends "
      "its table to docs/benchmarks.md unless --no-append, --smoke or --only");
  cli.app()
      .add_option("--threads", threads, "Intra-op threads (default 2)")
      ->check(CLI::Range(1, 256));
  cli.app()
      .add_option("--only", only,
                  "Decode one preset (tiny or small), at one concurrency with :N; nothing appended")
      ->check([](const std::string& v) -> std::string {
        const auto colon = v.find(':');
        if (colon == std::string::npos) return "";
        const std::string n = v.substr(colon + 1);
        if (n.empty() || n.find_first_not_of("0123456789") != std::string::npos ||
            std::stoll(n.substr(0, 9)) < 1) {
          return "the concurrency after ':' must be a positive integer, got '" + n + "'";
        }
        return "";
      });
  cli.app().add_flag("--bf16-cache", bf16_cache, "--only's decode with the KV cache in bfloat16");
  if (auto code = cli.parse(argc, argv)) return *code;
  const bool smoke = cli.smoke();
  std::string only_preset = only;
  int64_t only_concurrency = 0;
  if (const auto colon = only.find(':'); colon != std::string::npos) {
    only_concurrency = std::stoll(only.substr(colon + 1, 9));
    only_preset.resize(colon);
  }
  const at::ScalarType only_cache_dtype = bf16_cache ? at::kBFloat16 : at::ScalarType::Undefined;
  g_threads = threads;
  std::setvbuf(stdout, nullptr, _IOLBF, 0);  // progress lines show up even when piped
  ajet::set_log_level("warn");
  ajet::model::configure_threads(threads);
  std::printf("compute: %s\n", ajet::model::describe_compute_backend().c_str());
  const std::string load_before = ajet::bench::load_average_text();
  const int64_t prompt_len = smoke ? 8 : 64;
  const int64_t max_tokens = smoke ? 4 : 128;
  const int64_t prefill_len = smoke ? 32 : 1024;
  const int reps = smoke ? 1 : 3;
  // The decode table's runs per cell (this machine moves by a few per cent from run to run): the
  // median and the range. One for --smoke and --only (profiling).
  const int decode_runs = smoke || !only_preset.empty() ? 1 : 5;
  std::vector<int64_t> concurrencies =
      smoke ? std::vector<int64_t>{1, 8} : std::vector<int64_t>{1, 8, 32, 64};
  if (only_concurrency > 0) concurrencies = {only_concurrency};

  std::vector<DecodeRow> decode;
  std::vector<PrefillRow> prefill;
  std::vector<LinearRow> linears;
  std::vector<RowKernelRow> row_kernels, fused;
  std::vector<CacheDtypeRow> cache_dtypes;
  Span peak;
  std::vector<std::pair<std::string, double>> stream;  // preset, weight streaming GB/s
  std::vector<ajet::hf::ModelConfig> configs;
  std::vector<std::pair<std::string, int64_t>> presets = {{"tiny", 1024}, {"small", 4096}};
  if (!only_preset.empty()) {
    std::erase_if(presets, [&](const auto& p) { return p.first != only_preset; });
    if (presets.empty()) {
      std::fprintf(stderr, "engine_bench: --only names preset '%s'; known: tiny, small\n",
                   only_preset.c_str());
      return 2;
    }
  }
  for (const auto& [preset, vocab] : presets) {
    ajet::model::Qwen2Model model(ajet::model::preset_config(preset, vocab));
    ajet::model::init_weights(model, 0);
    for (int64_t c : concurrencies) {
      std::vector<DecodeRow> runs;
      for (int run = 0; run < decode_runs; ++run) {
        runs.push_back(
            measure_decode(preset, model, threads, c, prompt_len, max_tokens, only_cache_dtype));
        std::printf("decode %s x%lld: %.0f tokens/s (%.0f by CPU time)\n", preset.c_str(),
                    static_cast<long long>(c), runs.back().tokens_per_s.wall,
                    runs.back().tokens_per_s.cpu);
      }
      decode.push_back(median_run(std::move(runs)));
    }
    if (only_concurrency > 0) continue;
    prefill.push_back(measure_prefill(preset, model, threads, prefill_len, reps));
    prefill.back().gemm_attention_tokens_per_s =
        measure_prefill(preset, model, threads, prefill_len, reps,
                        ajet::infer::AttentionImpl::kTorchOps)
            .tokens_per_s;
    std::printf("prefill %s: %.0f tokens/s (%.0f by CPU time)\n", preset.c_str(),
                prefill.back().tokens_per_s.wall, prefill.back().tokens_per_s.cpu);
    // The row kernels (model/row_kernels.h), then the fused projections (model/qwen2.h), on and
    // off, back to back: one sequence (the row kernels only: a single row never takes the packed
    // kernel), 64, and prefill.
    auto on_and_off = [&](std::vector<RowKernelRow>& rows, void (*set)(bool), std::string workload,
                          auto&& tokens_per_s) {
      RowKernelRow r{preset, std::move(workload), tokens_per_s(), {}};
      set(false);
      r.off = tokens_per_s();
      set(true);
      rows.push_back(r);
    };
    struct Toggle {
      std::vector<RowKernelRow>* rows;
      void (*set)(bool);
      std::vector<int64_t> concurrencies;
    };
    const std::vector<Toggle> toggles = {
        {&row_kernels, &ajet::model::set_row_kernels_enabled,
         smoke ? std::vector<int64_t>{1} : std::vector<int64_t>{1, 64}},
        {&fused, &ajet::model::set_fused_projections_enabled, {smoke ? 8 : 64}}};
    for (const auto& [rows, set, concurrencies] : toggles) {
      for (int64_t c : concurrencies) {
        on_and_off(*rows, set, std::to_string(c) + " sequence" + (c == 1 ? "" : "s"), [&] {
          return measure_decode(preset, model, threads, c, prompt_len, max_tokens).tokens_per_s;
        });
      }
      on_and_off(*rows, set, "prefill " + std::to_string(prefill_len), [&] {
        return measure_prefill(preset, model, threads, prefill_len, reps).tokens_per_s;
      });
    }
    for (int64_t c : smoke ? std::vector<int64_t>{1} : std::vector<int64_t>{1, 64}) {
      CacheDtypeRow r;
      r.f32 = measure_decode(preset, model, threads, c, prompt_len, max_tokens);
      r.bf16 = measure_decode(preset, model, threads, c, prompt_len, max_tokens, at::kBFloat16);
      cache_dtypes.push_back(r);
    }
    for (int64_t rows :
         smoke ? std::vector<int64_t>{8} : std::vector<int64_t>{8, 16, 32, 64, 512}) {
      linears.push_back(measure_linears(preset, model, rows, smoke ? 1 : 20));
    }
    const Span p = gemm_peak_gflops(smoke ? 1 : 5);
    peak = {std::max(peak.wall, p.wall), std::max(peak.cpu, p.cpu)};
    stream.emplace_back(preset, weight_stream_gbps(model, smoke ? 1 : 5));
    configs.push_back(model->config());
  }

  if (!only_preset.empty()) return 0;
  std::ostringstream table;
  char line[320];
  std::snprintf(line, sizeof(line), "GEMM peak %.1f GFLOP/s (%.1f by CPU time). ", peak.wall,
                peak.cpu);
  table << "Decode (prompt " << prompt_len << ", " << max_tokens
        << " generated tokens per sequence, temperature 1, " << threads << " threads). " << line
        << "Each cell: the median of " << decode_runs
        << " runs (the range in brackets), wall clock / by CPU time per thread.\n\n"
        << "| preset | concurrent | tokens/s | vs concurrency 1 | GFLOP/s | % of GEMM peak |\n"
        << "|---|---|---|---|---|---|\n";
  for (const DecodeRow& r : decode) {
    const DecodeRow& one = *std::find_if(decode.begin(), decode.end(), [&](const DecodeRow& x) {
      return x.preset == r.preset && x.concurrency == 1;
    });
    std::snprintf(line, sizeof(line),
                  "| %s | %lld | %.0f (%.0f-%.0f) / %.0f | %.1fx / %.1fx | %.1f / %.1f | %.0f %% "
                  "(%.0f-%.0f) / %.0f %% |\n",
                  r.preset.c_str(), static_cast<long long>(r.concurrency), r.tokens_per_s.wall,
                  r.tokens_lo, r.tokens_hi, r.tokens_per_s.cpu,
                  r.tokens_per_s.wall / one.tokens_per_s.wall,
                  r.tokens_per_s.cpu / one.tokens_per_s.cpu, r.gflops.wall, r.gflops.cpu,
                  100 * r.gflops.wall / peak.wall, 100 * r.gflops_lo / peak.wall,
                  100 * r.gflops_hi / peak.wall, 100 * r.gflops.cpu / peak.cpu);
    table << line;
  }
  table << "\nRoofline bound on the x64 / x1 ratio (weight bytes per token / streaming bandwidth, "
           "over FLOPs per\n"
        << "token / GEMM peak, wall clock):";
  for (size_t i = 0; i < stream.size(); ++i) {
    std::snprintf(line, sizeof(line), " %s %.1fx (weights stream at %.1f GB/s);",
                  stream[i].first.c_str(), ratio_bound(configs[i], stream[i].second, peak.wall),
                  stream[i].second);
    table << line;
  }
  table << "\n\nPrefill (one " << prefill_len << "-token prompt in 512-token chunks, best of "
        << reps << "):\n\n"
        << "| preset | prompt | tokens/s | GFLOP/s | % of GEMM peak | attention as GEMMs: tokens/s "
           "| kernel vs GEMMs |\n"
        << "|---|---|---|---|---|---|---|\n";
  for (const PrefillRow& r : prefill) {
    std::snprintf(line, sizeof(line),
                  "| %s | %lld | %.0f / %.0f | %.1f / %.1f | %.0f %% / %.0f %% | %.0f | %.2fx |\n",
                  r.preset.c_str(), static_cast<long long>(r.prompt_len), r.tokens_per_s.wall,
                  r.tokens_per_s.cpu, r.gflops.wall, r.gflops.cpu, 100 * r.gflops.wall / peak.wall,
                  100 * r.gflops.cpu / peak.cpu, r.gemm_attention_tokens_per_s.wall,
                  r.tokens_per_s.wall / r.gemm_attention_tokens_per_s.wall);
    table << line;
  }
  table
      << "\nThe decode step's linears alone (every projection of the preset at R rows, one pass, "
         "best of\n"
      << (smoke ? 1 : 20)
      << "): the packed kernel (weights packed once per weight version, as the model keeps them), "
      << "the small-row kernel (up to 48 rows) and torch's linear (BLAS).\n\n"
      << "| preset | rows | packed GFLOP/s | % of GEMM peak | small-row kernel GFLOP/s | BLAS "
         "GFLOP/s | packed vs the "
         "better other |\n|---|---|---|---|---|---|---|\n";
  for (const LinearRow& r : linears) {
    char kernel[32] = "-";
    if (r.kernel.wall > 0) std::snprintf(kernel, sizeof(kernel), "%.1f", r.kernel.wall);
    std::snprintf(line, sizeof(line), "| %s | %lld | %.1f | %.0f %% | %s | %.1f | %.2fx |\n",
                  r.preset.c_str(), static_cast<long long>(r.rows), r.packed.wall,
                  100 * r.packed.wall / peak.wall, kernel, r.blas.wall,
                  r.packed.wall / std::max(r.kernel.wall, r.blas.wall));
    table << line;
  }
  auto on_off_table = [&](const char* intro, const char* header,
                          const std::vector<RowKernelRow>& rows) {
    table << intro << header << "\n|---|---|---|---|---|\n";
    for (const RowKernelRow& r : rows) {
      std::snprintf(line, sizeof(line), "| %s | %s | %.0f | %.0f | %.2fx |\n", r.preset.c_str(),
                    r.workload.c_str(), r.on.wall, r.off.wall, r.on.wall / r.off.wall);
      table << line;
    }
  };
  on_off_table(
      "\nRMSNorm and rotary embeddings in one pass per row (model/row_kernels.h) against the torch "
      "ops they "
      "replace (6 and ~9 ops), measured back to back in this run:\n\n",
      "| preset | workload | tokens/s with | tokens/s without | with vs without |", row_kernels);
  on_off_table(
      "\nThe projections that read one input in one parallel region (q, k and v; gate and up with "
      "the SiLU\n"
      "product; o and down with the residual add) against one region and op each, back to back in "
      "this "
      "run:\n\n",
      "| preset | workload | tokens/s fused | tokens/s one by one | fused vs one by one |", fused);
  table << "\nThe KV cache in bfloat16 (`ajet.engine.kv_cache_dtype: bfloat16`) against float32 "
           "(the model's dtype,\n"
        << "the default), decode measured back to back in this run; attention reads half the "
           "bytes:\n\n"
        << "| preset | concurrent | float32 cache tokens/s | bfloat16 cache tokens/s | bfloat16 vs "
           "float32 | "
           "% of GEMM peak: float32 / bfloat16 | vs concurrency 1: float32 / bfloat16 "
           "|\n|---|---|---|---|---|---|---|\n";
  for (const CacheDtypeRow& r : cache_dtypes) {
    const CacheDtypeRow& one =
        *std::find_if(cache_dtypes.begin(), cache_dtypes.end(), [&](const CacheDtypeRow& x) {
          return x.f32.preset == r.f32.preset && x.f32.concurrency == 1;
        });
    std::snprintf(line, sizeof(line),
                  "| %s | %lld | %.0f | %.0f | %.2fx | %.0f %% / %.0f %% | %.1fx / %.1fx |\n",
                  r.f32.preset.c_str(), static_cast<long long>(r.f32.concurrency),
                  r.f32.tokens_per_s.wall, r.bf16.tokens_per_s.wall,
                  r.bf16.tokens_per_s.wall / r.f32.tokens_per_s.wall,
                  100 * r.f32.gflops.wall / peak.wall, 100 * r.bf16.gflops.wall / peak.wall,
                  r.f32.tokens_per_s.wall / one.f32.tokens_per_s.wall,
                  r.bf16.tokens_per_s.wall / one.bf16.tokens_per_s.wall);
    table << line;
  }
  std::printf("\n%s", table.str().c_str());
  if (cli.append()) {
    std::ostringstream body;
    body << "`InferenceEngine` stepped directly (paged KV cache, blocks of 16, 512-token step "
            "budget), presets with\n"
         << "vocab 1024 (tiny) and 4096 (small), float32, random weights. FLOPs: 2 per decoder "
            "weight per token,\n"
         << "4·H·D per (token, visible key) per layer for attention, 2·C·V for each lm_head row. "
            "The GEMM peak is\n"
         << "the best float32 matmul (1024³ or 512x512x1536) at the same thread count in the same "
            "run.\n"
         << "Compute: " << ajet::model::describe_compute_backend() << ". Load average (1/5/15 min) "
         << load_before << " at the start, " << ajet::bench::load_average_text()
         << " at the end (other processes share the cores).\n\n"
         << table.str();
    ajet::bench::append_to_benchmarks(
        "Inference engine: decode throughput and MFU (bench/engine/engine_bench)", body.str());
  }
  return 0;
}
