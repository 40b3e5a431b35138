// Decode-shaped forwards (R sequences x 1 token, no KV cache: the projections and lm_head that a
// decode step runs) on one base model with LoRA adapters attached through train::MultiLoraAdapter,
// three ways interleaved in one run: the base alone (no adapter), every row on one adapter, and the
// rows spread evenly over N adapters (issue 43's mixed batch; target: >= 0.8x the one-adapter
// tokens/s). Attention over a cache is left out, so the adapters' share here is larger than in a
// real decode step: a conservative ratio. Options: --preset (small), --rows (64), --adapters (8),
// --rank (8), --rounds (9), --threads 1,2. Appends the table with the date to docs/benchmarks.md
// unless --no-append; --smoke runs the tiny preset once and appends nothing.
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <sstream>
#include <string>
#include <vector>

#include "bench_cli.h"
#include "model/blas_kernel.h"
#include "model/compute.h"
#include "model/presets.h"
#include "train/multi_lora.h"

namespace {

using namespace ajet;
using Clock = std::chrono::steady_clock;

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
}

}  // namespace

int main(int argc, char** argv) {
  model::pick_blas_kernel(argc, argv);
  std::string preset = "small";
  int64_t rows = 64;
  int adapters = 8, rank = 8, rounds = 9;
  std::vector<int> threads_list = {1, 2};
  bench::BenchCli cli("train_multi_lora_bench",
                      "Decode-shaped forwards on one base: no adapter vs one adapter vs rows mixed "
                      "over N adapters, interleaved in one run");
  CLI::App& app = cli.app();
  app.add_option("--preset", preset, "Model preset (default small)")
      ->check(CLI::IsMember({"micro", "tiny", "small", "qwen2.5-0.5b"}));
  app.add_option("--rows", rows, "Sequences decoding at once (default 64)")
      ->check(CLI::Range(int64_t{1}, int64_t{4096}));
  app.add_option("--adapters", adapters, "Adapters the rows are spread over (default 8)")
      ->check(CLI::Range(1, 256));
  app.add_option("--rank", rank, "LoRA rank of every adapter (default 8)")
      ->check(CLI::Range(1, 256));
  app.add_option("--rounds", rounds, "Interleaved timed runs each way (default 9)")
      ->check(CLI::Range(1, 1000));
  app.add_option("--threads", threads_list, "Comma-separated thread counts (default 1,2)")
      ->delimiter(',')
      ->check(CLI::Range(1, 256));
  if (auto code = cli.parse(argc, argv)) return *code;
  if (cli.smoke()) {
    preset = "tiny";
    rounds = 1;
    threads_list = {1};
  }
  torch::NoGradGuard no_grad;
  torch::manual_seed(1);
  model::Qwen2Model m(model::preset_config(preset, 32000));
  std::shared_ptr<train::LoraRouting> routing = train::attach_multi_lora(m, {"all-linear"});
  train_data::LoraOptions o;
  o.rank = rank;
  o.alpha = 2 * rank;
  for (int k = 0; k < adapters; ++k) train::add_random_adapter(m, o, 100 + uint64_t(k));
  const torch::Tensor ids = torch::randint(0, 32000, {rows, 1}, torch::kInt64);
  const torch::Tensor positions = torch::full({rows, 1}, 37, torch::kInt64);
  std::vector<int32_t> mixed(static_cast<size_t>(rows));
  for (int64_t i = 0; i < rows; ++i) mixed[size_t(i)] = int32_t(i % adapters);

  std::ostringstream table;
  table << "| threads | no adapter, tokens/s | one adapter | " << adapters
        << " adapters mixed | mixed / one |\n|---|---|---|---|---|\n";
  for (int t : threads_list) {
    model::configure_threads(t);
    std::vector<double> times[3];
    auto run = [&](int way) {
      if (way == 0) routing->set_all(-1);
      if (way == 1) routing->set_all(0);
      if (way == 2) routing->set(mixed);
      const auto start = Clock::now();
      m->forward_logits(ids, positions);
      return std::chrono::duration<double>(Clock::now() - start).count();
    };
    for (int way = 0; way < 3; ++way) run(way);  // warm-up
    for (int r = 0; r < rounds; ++r) {
      for (int way = 0; way < 3; ++way) times[way].push_back(run(way));
    }
    const double base = double(rows) / median(times[0]), one = double(rows) / median(times[1]),
                 mix = double(rows) / median(times[2]);
    char row[256];
    std::snprintf(row, sizeof row, "| %d | %.0f | %.0f | %.0f | **%.2fx** |\n", t, base, one, mix,
                  mix / one);
    table << row;
    std::printf("threads %d: base %.0f tok/s, one adapter %.0f, %d mixed %.0f (%.2fx of one)\n", t,
                base, one, adapters, mix, mix / one);
  }
  std::printf("\n%s", table.str().c_str());
  if (cli.append()) {
    std::ostringstream body;
    body << "`train_multi_lora_bench`: the `" << preset << "` preset (vocab 32000), " << rows
         << " sequences x 1 token through `forward_logits` (the projections and lm_head of a "
            "decode step; no KV cache, so the adapters' share is larger than in a real step), "
            "LoRA rank "
         << rank << " on every linear layer of every adapter; " << model::describe_compute_backend()
         << "; load average " << bench::load_average_text() << ". Medians of " << rounds
         << " interleaved runs. \"Mixed\": row i on adapter i mod " << adapters
         << " (each adapter's rows gathered, its update added back); \"one\": every row on adapter "
            "0 (no gather).\n\n"
         << table.str();
    bench::append_to_benchmarks(
        "Many LoRA adapters in one decode batch (bench/train/multi_lora_bench.cc)", body.str());
  }
  return 0;
}
