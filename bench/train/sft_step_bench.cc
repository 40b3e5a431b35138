// Wall time of one `ajet sft` step (forward + backward of one packed batch,
// train::sft_step_gradients) on the same model and batch, two ways in one run, interleaved: A the
// step as laid out before 2026-12-03 (SftOptions::demo_blocks = false: 128-row attention blocks
// over the packed sequence, every row through the last layer) and B the current one (blocks that
// follow the demos, the last layer's MLP on the target rows only). Also checks that both give the
// same loss and gradients (float rounding). With --model DIR --demos FILE it packs the first demos
// of FILE (calc demos from `ajet tasks demos`, as scripts/run.sh) with the model's tokenizer;
// without, a tiny-preset model (vocab 1024, run.sh's calc init) and synthetic calc-shaped demos (a
// 148-token shared prefix, 45-85 own tokens, the last half trained). Options: --tokens (4096),
// --rounds (8), --threads 1,2, --keep-memory (train::keep_freed_memory() first, as `ajet sft` does:
// run once with and once without), --only A|B (that one alone, for `perf record`). Appends the
// table with the date to docs/benchmarks.md unless
// --no-append; --smoke runs a 512-token batch once on one thread and appends nothing.
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "bench_cli.h"
#include "model/blas_kernel.h"
#include "model/compute.h"
#include "model/model_dir.h"
#include "model/presets.h"
#include "text/tokenizer.h"
#include "tracking/chat_format.h"
#include "train/sft.h"

namespace {

using namespace ajet;
using Clock = std::chrono::steady_clock;

std::vector<train::SftExample> synthetic_demos(int n) {
  std::mt19937_64 rng(7);
  std::vector<int32_t> prefix(148);
  for (auto& t : prefix) t = static_cast<int32_t>(rng() % 1024);
  std::vector<train::SftExample> out;
  for (int d = 0; d < n; ++d) {
    train::SftExample ex;
    ex.token_ids = prefix;
    const int own = 45 + static_cast<int>(rng() % 41);
    for (int i = 0; i < own; ++i) ex.token_ids.push_back(static_cast<int32_t>(rng() % 1024));
    ex.loss_mask.assign(ex.token_ids.size(), 0);
    for (size_t i = ex.token_ids.size() - static_cast<size_t>(own / 2); i < ex.token_ids.size();
         ++i)
      ex.loss_mask[i] = 1;
    ex.source = "synthetic:" + std::to_string(d);
    out.push_back(std::move(ex));
  }
  return out;
}

// Consecutive demos while the packed size (their common prefix once) stays within `budget`.
std::vector<const train::SftExample*> take(const std::vector<train::SftExample>& all,
                                           int64_t budget) {
  std::vector<const train::SftExample*> batch;
  int64_t total = 0;
  size_t prefix = all.at(0).token_ids.size();
  for (const auto& ex : all) {
    size_t p = std::min(prefix, ex.token_ids.size() - 1);
    size_t k = 0;
    while (k < p && all[0].token_ids[k] == ex.token_ids[k] && !ex.loss_mask[k]) ++k;
    const int64_t n = static_cast<int64_t>(ex.token_ids.size());
    const int64_t packed = total + n - static_cast<int64_t>(batch.size()) * static_cast<int64_t>(k);
    if (!batch.empty() && packed > budget) break;
    batch.push_back(&ex);
    total += n;
    prefix = k;
  }
  return batch;
}

// CPU time of the process, all threads, user and system (page faults included): steadier than wall
// time when other jobs share the cores.
double cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
}

std::vector<torch::Tensor> grads_of(model::Qwen2Model& m) {
  std::vector<torch::Tensor> g;
  for (const auto& p : m->parameters())
    g.push_back(p.grad().defined() ? p.grad().clone() : torch::zeros_like(p));
  return g;
}

void zero_grads(model::Qwen2Model& m) {
  for (auto& p : m->parameters()) {
    if (p.grad().defined()) p.mutable_grad() = torch::Tensor();
  }
}

}  // namespace

int main(int argc, char** argv) {
  model::pick_blas_kernel(argc, argv);
  std::string model_dir, demos_path;
  std::vector<int> threads_list = {1, 2};
  int64_t tokens = 4096;
  int rounds = 8;
  int run_steps = 0;         // --run-sft N: N whole run_sft steps each way instead
  bool keep_memory = false;  // train::keep_freed_memory() first, as `ajet sft` does
  std::string only;          // "A" or "B": run that one only, `rounds` times (for perf record)
  bench::BenchCli cli("train_sft_step_bench",
                      "Wall time of one `ajet sft` step, the block layout before 2026-12-03 (A) "
                      "against the current "
                      "one (B), interleaved in one run");
  CLI::App& app = cli.app();
  app.add_option("--model", model_dir, "Model directory (with --demos)");
  app.add_option("--demos", demos_path, "Demos JSONL from `ajet tasks demos` (with --model)");
  app.add_option("--tokens", tokens, "Tokens packed into the batch (default 4096)")
      ->check(CLI::Range(int64_t{64}, int64_t{1} << 20));
  app.add_option("--rounds", rounds, "Interleaved timed runs each way (default 8)")
      ->check(CLI::Range(1, 1000));
  app.add_option("--threads", threads_list, "Comma-separated thread counts (default 1,2)")
      ->delimiter(',')
      ->check(CLI::Range(1, 256));
  app.add_flag("--keep-memory", keep_memory,
               "Call train::keep_freed_memory() first, as `ajet sft` does");
  app.add_option("--only", only, "Run A or B alone, --rounds times (for perf record)")
      ->check(CLI::IsMember({"A", "B"}));
  app.add_option("--run-sft", run_steps, "Time N whole run_sft steps each way instead")
      ->check(CLI::Range(0, 100000));
  if (auto code = cli.parse(argc, argv)) return *code;
  if (cli.smoke()) {
    tokens = 512;
    rounds = 1;
    threads_list = {1};
  }
  if (model_dir.empty() != demos_path.empty()) {
    std::fprintf(stderr, "--model and --demos go together\n");
    return 2;
  }
  if (keep_memory) train::keep_freed_memory();
  model::Qwen2Model model{nullptr};
  std::vector<train::SftExample> demos;
  std::string source;
  if (!model_dir.empty()) {
    const text::Tokenizer tokenizer = text::Tokenizer::load(model_dir);
    const tracking::ChatFormat format = tracking::ChatFormat::from_tokenizer(tokenizer);
    model = model::load_model_dir(model_dir);
    // The first 400 lines are plenty for one step.
    std::ifstream in(demos_path);
    std::string line, head;
    for (int n = 0; n < 400 && std::getline(in, line); ++n) head += line + "\n";
    const std::string tmp = "/tmp/sft_step_bench_demos.jsonl";
    std::ofstream(tmp) << head;
    demos = train::read_demos_jsonl(tmp, format).examples;
    std::remove(tmp.c_str());
    source = "calc demos of " + demos_path.substr(demos_path.find_last_of('/') + 1);
  } else {
    model = model::Qwen2Model(model::preset_config("tiny", 1024));
    model::init_weights(model, 1, 0.05, 1.0 / std::sqrt(8.0), 0.3);
    demos = synthetic_demos(400);
    source = "synthetic calc-shaped demos";
  }
  model->train();
  const std::vector<const train::SftExample*> batch = take(demos, tokens);
  int64_t packed = 0, trained = 0;
  for (const auto* ex : batch) {
    packed += static_cast<int64_t>(ex->token_ids.size());
    trained += ex->trained_tokens();
  }

  train::SftOptions a, b;
  a.demo_blocks = false;
  b.demo_blocks = true;
  if (run_steps >
      0) {  // whole run_sft steps (optimizer, packing, a fresh batch each) for comparison
    torch::set_num_threads(1);
    for (const bool blocks : {false, true}) {
      train::SftOptions o;
      o.steps = run_steps;
      o.lr = 2e-3;
      o.demo_blocks = blocks;
      double total = 0, cpu = 0;
      const double c0 = cpu_seconds();
      std::vector<double> each;
      for (const auto& st : train::run_sft(model, demos, o)) {
        total += st.seconds;
        each.push_back(st.seconds);
      }
      cpu = cpu_seconds() - c0;
      std::printf("run_sft %s: %.3f s per step (cpu %.3f), median %.3f, first %.3f\n",
                  blocks ? "B" : "A", total / run_steps, cpu / run_steps, median(each),
                  each.front());
    }
    return 0;
  }
  if (!only.empty()) {
    torch::set_num_threads(1);
    for (int r = 0; r < rounds; ++r) {
      train::sft_step_gradients(model, batch, only == "A" ? a : b);
      zero_grads(model);
    }
    return 0;
  }
  // Same loss and gradients.
  torch::set_num_threads(1);
  const double loss_a = train::sft_step_gradients(model, batch, a);
  const auto ga = grads_of(model);
  zero_grads(model);
  const double loss_b = train::sft_step_gradients(model, batch, b);
  const auto gb = grads_of(model);
  zero_grads(model);
  double worst = 0;
  for (size_t i = 0; i < ga.size(); ++i) {
    const double scale = ga[i].abs().max().item<double>();
    if (scale > 0) worst = std::max(worst, (ga[i] - gb[i]).abs().max().item<double>() / scale);
  }
  std::printf(
      "batch: %zu demos, %lld tokens unpacked, %lld trained; loss A %.9g B %.9g (rel %.2g); "
      "max gradient difference %.2g of the tensor's largest entry\n",
      batch.size(), static_cast<long long>(packed), static_cast<long long>(trained), loss_a, loss_b,
      std::abs(loss_a - loss_b) / std::abs(loss_a), worst);

  std::ostringstream table;
  table << "| threads | freed memory | A: 128-row blocks, full last layer: wall (CPU) s | B: "
           "per-demo blocks, last layer on target rows: wall (CPU) s | A / B: wall (CPU) |\n"
        << "|---|---|---|---|---|\n";
  for (const int t : threads_list) {
    torch::set_num_threads(t);
    std::vector<double> ta, tb, ca, cb;  // wall and CPU seconds
    auto time_one = [&](const train::SftOptions& o) {
      const double c0 = cpu_seconds();
      const auto t0 = Clock::now();
      train::sft_step_gradients(model, batch, o);
      const double s = std::chrono::duration<double>(Clock::now() - t0).count();
      (&o == &a ? ca : cb).push_back(cpu_seconds() - c0);
      zero_grads(model);
      return s;
    };
    time_one(a);  // warm-up
    time_one(b);
    ca.clear();
    cb.clear();
    for (int r = 0; r < rounds; ++r) {  // interleaved, alternating which goes first
      if (r % 2 == 0) {
        ta.push_back(time_one(a));
        tb.push_back(time_one(b));
      } else {
        tb.push_back(time_one(b));
        ta.push_back(time_one(a));
      }
    }
    const double ma = median(ta), mb = median(tb), pa = median(ca), pb = median(cb);
    char row[256];
    std::snprintf(row, sizeof row, "| %d | %s | %.3f (%.3f) | %.3f (%.3f) | **%.2fx** (%.2fx) |\n",
                  t, keep_memory ? "kept" : "glibc default", ma, pa, mb, pb, ma / mb, pa / pb);
    table << row;
    std::printf(
        "threads %d: A %.3f s (cpu %.3f), B %.3f s (cpu %.3f) (medians of %d, interleaved): %.2fx "
        "(cpu %.2fx)\n",
        t, ma, pa, mb, pb, rounds, ma / mb, pa / pb);
  }
  std::printf("\n%s", table.str().c_str());
  if (cli.append()) {
    std::ostringstream body;
    body << "One `ajet sft` step's forward + backward (`train::sft_step_gradients`) on " << source
         << ": " << batch.size() << " demos packed into ~" << tokens
         << " tokens (shared prefix once), " << trained << " trained; "
         << model::describe_compute_backend() << ". Medians of " << rounds
         << " interleaved runs; A and B agree to " << std::abs(loss_a - loss_b) / std::abs(loss_a)
         << " (loss, relative) and " << worst
         << " (gradients, relative to each tensor's largest entry).\n\n"
         << table.str();
    bench::append_to_benchmarks(
        "SFT step, per-demo attention blocks (bench/train/sft_step_bench.cc)", body.str());
  }
  return 0;
}
