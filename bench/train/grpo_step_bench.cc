// Training throughput of one GRPO step on the `small` preset: our Trainer (plain and tree packing)
// against the same model, batch and loss written in Python with Debian's python3-torch
// (bench/train/grpo_step_ref.py, run as a subprocess with the same thread count), in one run. A
// step is: recompute old logprobs (no gradient), forward + backward of the PPO-clip token-mean
// loss, AdamW. The FLOP/s and "% of GEMM peak" columns count, per row, the FLOPs that
// implementation actually runs: 2 per decoder weight per token it puts through the model (forward;
// 4 more for the backward), the lm_head on the rows whose logits it forms, and 4*H*D per attention
// score entry it computes per layer (x3 with the backward). Python runs the padded batch (B x Lmax
// tokens, full Lmax^2 scores, logits on every row) twice (old logprobs without gradient, then the
// update); ours runs the packed tokens once (the update's forward gives the old logprobs), the
// score blocks its attention plan computes, and logits only on trained rows; tree packing runs a
// shared prompt once. The peak is the best float32 square matmul (bench/common/gemm_peak) at the
// same thread count, same run. Prints a table and appends it to docs/benchmarks.md (--no-append to
// skip; --smoke for a seconds-long check;
// --threads N, --reps N, --group N, --prompt N, --completion N, --vocab N to change the shape).
#include <torch/csrc/autograd/profiler_legacy.h>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <span>
#include <sstream>
#include <string>
#include <unistd.h>

#include "bench_cli.h"
#include "common/json.h"
#include "gemm_peak.h"
#include "model/blas_kernel.h"
#include "model/compute.h"
#include "model/model_dir.h"
#include "model/presets.h"
#include "tracking/packing.h"
#include "train/packed_forward.h"
#include "train/trainer.h"

namespace {

using Clock = std::chrono::steady_clock;
namespace fs = std::filesystem;
using namespace ajet;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

struct Args {
  int threads = 2, reps = 3, group = 8, prompt = 256, completion = 256;
  int64_t vocab = 4096;
  bool smoke = false;
  std::string profile;  // write a chrome trace of one step of ours (plain packing) here
};

model::Qwen2Model clone(model::Qwen2Model& m) {
  model::Qwen2Model c(m->config());
  torch::NoGradGuard no_grad;
  auto src = m->hf_named_parameters();
  auto dst = c->hf_named_parameters();
  for (size_t i = 0; i < src.size(); ++i) dst[i].second.copy_(src[i].second);
  return c;
}

// The work one implementation runs in a step, in model terms.
struct Work {
  double tokens = 0;       // token positions put through the decoder layers
  double logit_rows = 0;   // rows whose lm_head logits are formed
  double score_pairs = 0;  // attention score entries (query, key) computed per head per layer
  double passes = 3;       // forward = 1, backward = 2 more; Python adds 1 for its no-grad forward
  double attention_passes = 3;
};

// FLOPs of `w` on `c`: 2 per decoder weight per token and per pass, 2*C*V per logit row per pass,
// 4*H*D per score entry per layer per pass (QK^T and PV). Norms, rotary, softmax and AdamW not
// counted.
double flops(const hf::ModelConfig& c, const Work& w) {
  const double h = c.hidden_size, q = c.num_attention_heads * c.head_dim,
               kv = c.num_key_value_heads * c.head_dim;
  const double layer_weights = h * q + 2 * h * kv + q * h + 3 * h * c.intermediate_size;
  return w.passes * (2 * layer_weights * c.num_hidden_layers * w.tokens +
                     2 * h * c.vocab_size * w.logit_rows) +
         w.attention_passes * 4 * q * c.num_hidden_layers * w.score_pairs;
}

// What our Trainer runs on `batch` in one micro-batch: the packed tokens, the distinct trained rows
// (a token trained in several samples is predicted once), and the score blocks of the attention
// plan.
Work our_work(const train_data::Batch& batch, train_data::Packing packing,
              const train_data::TrainerOptions& o) {
  std::vector<std::span<const int32_t>> views;
  for (const auto& s : batch.samples) views.emplace_back(s.token_ids);
  const std::span<const std::span<const int32_t>> all(views);
  auto seqs = packing == train_data::Packing::kTree
                  ? tracking::pack_tree(all, static_cast<size_t>(o.micro_batch_tokens))
                  : tracking::pack_plain(all, static_cast<size_t>(o.micro_batch_tokens));
  Work w;
  for (const auto& seq : seqs) {
    w.tokens += static_cast<double>(seq.size());
    for (size_t i = 0; i < seq.size(); ++i) {
      auto ks = seq.occurrence_samples(i);
      auto ps = seq.occurrence_positions(i);
      bool trained = false;
      for (size_t k = 0; k < ks.size() && !trained; ++k) {
        const auto& s = batch.samples[static_cast<size_t>(seq.samples[static_cast<size_t>(ks[k])])];
        trained = s.loss_mask[static_cast<size_t>(ps[k])] != 0;
      }
      w.logit_rows += trained ? 1 : 0;
    }
    w.score_pairs += static_cast<double>(
        train::plan_attention(seq.subtree_end, o.attention_block).computed_pairs());
  }
  return w;
}

// What grpo_step_ref.py runs: the batch padded to (B, Lmax), logits on every row, the full Lmax x
// Lmax scores, once without gradient (old logprobs) and once with.
Work python_work(const train_data::Batch& batch) {
  size_t longest = 0;
  for (const auto& s : batch.samples) longest = std::max(longest, s.size());
  const double b = static_cast<double>(batch.samples.size()), l = static_cast<double>(longest);
  return Work{b * l, b * l, b * l * l, 4, 4};
}

struct Result {
  std::string name;
  double seconds = 0;  // fastest step: the least disturbed by other load on the machine
  double median = 0;
  double flops = 0;   // FLOPs this implementation runs per step
  double tokens = 0;  // token positions it puts through the model per step
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

double fastest(const std::vector<double>& v) { return *std::min_element(v.begin(), v.end()); }

}  // namespace

int main(int argc, char** argv) {
  ajet::model::pick_blas_kernel(argc, argv);  // first: it may re-execute the process
  Args a;
  bench::BenchCli cli("train_grpo_step_bench",
                      "One GRPO step on the small preset, ours against the same step in Python");
  CLI::App& app = cli.app();
  app.add_option("--threads", a.threads, "Intra-op threads (default 2)")->check(CLI::Range(1, 256));
  app.add_option("--reps", a.reps, "Timed steps each (default 3)")->check(CLI::Range(1, 1000));
  app.add_option("--group", a.group, "Samples in the GRPO group (default 8)")
      ->check(CLI::Range(1, 1024));
  app.add_option("--prompt", a.prompt, "Prompt tokens (default 256)")->check(CLI::Range(1, 65536));
  app.add_option("--completion", a.completion, "Completion tokens at most (default 256)")
      ->check(CLI::Range(4, 65536));
  app.add_option("--vocab", a.vocab, "Vocabulary size (default 4096)")
      ->check(CLI::Range(int64_t{16}, int64_t{1} << 20));
  app.add_option("--profile", a.profile, "Write a chrome trace of one step of ours here");
  if (auto code = cli.parse(argc, argv)) return *code;
  a.smoke = cli.smoke();
  if (a.smoke) {
    a.reps = 1;
    a.group = 2;
    a.prompt = 16;
    a.completion = 16;
    a.vocab = 256;
  }
  model::configure_threads(a.threads);
  std::printf("compute: %s\n", model::describe_compute_backend().c_str());
  bench::GemmPeakOptions peak_options{.threads = a.threads};
  if (a.smoke)
    peak_options = {.threads = a.threads, .sizes = {256}, .reps = 1, .min_seconds = 0.01};
  const bench::GemmPeak peak_before = bench::measure_gemm_peak(peak_options);
  std::printf("GEMM peak before the steps: %s\n", peak_before.describe().c_str());
  const std::string preset = a.smoke ? "tiny" : "small";
  auto config = model::preset_config(preset, a.vocab);
  model::Qwen2Model base(config);
  model::init_weights(base, 0);

  const fs::path dir =
      fs::temp_directory_path() / ("ajet_grpo_bench_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  model::save_model_dir(base, dir / "model");

  // One GRPO group: a shared prompt, completions of prompt..completion tokens, rewards 0 / 1.
  std::mt19937_64 rng(1);
  auto token = [&] { return static_cast<int32_t>(rng() % static_cast<uint64_t>(a.vocab)); };
  std::vector<int32_t> prompt(static_cast<size_t>(a.prompt));
  for (auto& t : prompt) t = token();
  train_data::Batch batch;
  std::vector<double> rewards;
  std::vector<std::string> groups;
  for (int e = 0; e < a.group; ++e) {
    train_data::TrainSample s;
    s.episode_uuid = "e" + std::to_string(e);
    s.task_id = "task";
    s.reward = e % 2;
    s.token_ids = prompt;
    s.loss_mask.assign(prompt.size(), 0);
    const int len =
        a.completion - (e * a.completion) / (4 * a.group);  // 75..100 % of the completion budget
    for (int k = 0; k < len; ++k) {
      s.token_ids.push_back(token());
      s.loss_mask.push_back(1);
    }
    s.logprobs.assign(s.token_ids.size(), -1.0f);
    rewards.push_back(s.reward);
    groups.push_back(s.task_id);
    batch.samples.push_back(std::move(s));
  }
  auto adv = train_data::compute_advantages(rewards, groups, {}).advantages;

  train_data::TrainerOptions o;
  o.optim.lr = 1e-6;
  o.optim.grad_clip = 1.0;
  o.loss.use_kl = false;
  o.episode_weighting = false;
  o.micro_batch_tokens = 1 << 20;  // one micro-batch, as the Python side
  o.shuffle = false;

  Json spec = {{"model_dir", (dir / "model").string()},
               {"threads", a.threads},
               {"lr", o.optim.lr},
               {"weight_decay", o.optim.weight_decay},
               {"grad_clip", o.optim.grad_clip},
               {"clip_low", o.loss.clip_low},
               {"clip_high", o.loss.clip_high},
               {"clip_c", o.loss.clip_c},
               {"warmup", 1},
               {"reps", a.reps},
               {"samples", Json::array()}};
  for (size_t i = 0; i < batch.samples.size(); ++i) {
    const auto& s = batch.samples[i];
    spec["samples"].push_back(
        {{"token_ids", s.token_ids}, {"loss_mask", s.loss_mask}, {"advantage", adv[i]}});
  }
  { std::ofstream(dir / "spec.json") << spec.dump(); }

  // Ours.
  std::vector<Result> results;
  double ours_old_mean = 0;
  for (auto packing : {train_data::Packing::kPlain, train_data::Packing::kTree}) {
    o.packing = packing;
    train::Trainer trainer(clone(base), o);
    if (packing == train_data::Packing::kPlain) {
      auto lp = trainer.compute_logprobs(batch);
      double sum = 0, n = 0;
      for (size_t i = 0; i < lp.size(); ++i) {
        for (size_t p = 0; p < lp[i].size(); ++p) {
          if (batch.samples[i].loss_mask[p]) {
            sum += lp[i][p];
            n += 1;
          }
        }
      }
      ours_old_mean = sum / n;
    }
    trainer.train_step(batch);  // warm-up: allocator, rotary tables
    if (!a.profile.empty() && packing == train_data::Packing::kPlain) {
      torch::autograd::profiler::RecordProfile guard(a.profile);
      trainer.train_step(batch);
    }
    std::vector<double> times;
    for (int r = 0; r < a.reps; ++r) {
      auto t0 = Clock::now();
      trainer.train_step(batch);
      times.push_back(seconds_since(t0));
    }
    const Work w = our_work(batch, packing, o);
    results.push_back({"ours (C++), " + std::string(train_data::packing_name(packing)) + " packing",
                       fastest(times), median(times), flops(config, w), w.tokens});
  }

  // Python, same threads, same batch.
  const std::string out = ajet::bench::run_command("/usr/bin/python3 " AJET_SOURCE_DIR
                                                   "/bench/train/grpo_step_ref.py " +
                                                   (dir / "spec.json").string() + " 2>&1")
                              .text;
  double py_seconds = 0, py_median = 0, py_old_mean = 0;
  try {
    Json r = parse_json(out.substr(out.rfind("{\"step_seconds\"")), "python output");
    py_seconds = fastest(r.at("step_seconds").get<std::vector<double>>());
    py_median = median(r.at("step_seconds").get<std::vector<double>>());
    py_old_mean = r.at("first_old_logprob_mean").get<double>();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "python reference failed: %s\n%s\n", e.what(), out.c_str());
    fs::remove_all(dir);
    return 1;
  }
  const Work py_work = python_work(batch);
  results.insert(results.begin(), {"Python (python3-torch 1.13), padded batch", py_seconds,
                                   py_median, flops(config, py_work), py_work.tokens});
  fs::remove_all(dir);

  // The peak at the thread count the steps ran with, measured before and after them (the better
  // one: the least disturbed by other load on the machine).
  const bench::GemmPeak peak_after = bench::measure_gemm_peak(peak_options);
  const bench::GemmPeak& peak = peak_before.gflops >= peak_after.gflops ? peak_before : peak_after;
  int64_t tokens = 0;
  for (const auto& s : batch.samples) tokens += static_cast<int64_t>(s.size());
  // The useful work of the step, the same for every row: 6 per decoder weight per sample token, the
  // lm_head on each trained token, each sample's causal L x L scores (x3 with the backward).
  Work model_work;
  for (const auto& s : batch.samples) {
    model_work.tokens += static_cast<double>(s.size());
    model_work.score_pairs += static_cast<double>(s.size()) * static_cast<double>(s.size() + 1) / 2;
  }
  model_work.logit_rows = static_cast<double>(batch.trained_tokens());
  const double model_flops = flops(config, model_work);

  std::ostringstream table;
  char line[1024];
  std::snprintf(line, sizeof(line),
                "`%s` preset (%lld parameters, vocab %lld), %d threads; one GRPO group of %d "
                "samples: prompt %d + "
                "completion %d..%d tokens (%lld tokens, %lld trained); fastest of %d steps (median "
                "in brackets).\n\n",
                preset.c_str(), static_cast<long long>(model::count_parameters(config)),
                static_cast<long long>(a.vocab), a.threads, a.group, a.prompt,
                a.completion - a.completion / 4, a.completion, static_cast<long long>(tokens),
                static_cast<long long>(batch.trained_tokens()), a.reps);
  table << line;
  table << "| implementation | step s | sample tokens/s | tokens run | GFLOP run | GFLOP/s | MFU "
           "(run / GEMM peak) | "
           "speed vs Python |\n|---|---|---|---|---|---|---|---|\n";
  for (const auto& r : results) {
    std::snprintf(line, sizeof(line),
                  "| %s | %.3f (%.3f) | %.0f | %.0f | %.1f | %.1f | %.0f %% | %.2fx |\n",
                  r.name.c_str(), r.seconds, r.median, static_cast<double>(tokens) / r.seconds,
                  r.tokens, r.flops / 1e9, r.flops / r.seconds / 1e9,
                  100 * r.flops / r.seconds / 1e9 / peak.gflops, py_seconds / r.seconds);
    table << line;
  }
  std::snprintf(line, sizeof(line),
                "\nGEMM peak (same run, before / after the steps): %.1f / %.1f GFLOP/s; used: %s. "
                "\"GFLOP run\" is "
                "what each row computes per step (padding, a second forward, packing and score "
                "blocks as each "
                "runs them); the step's minimal model FLOPs (each sample token once, causal "
                "scores, lm_head on "
                "trained tokens, forward + backward) are %.1f G. Old-logprob mean over trained "
                "tokens: ours %.6f, "
                "Python %.6f (same model, same tokens).\n",
                peak_before.gflops, peak_after.gflops, peak.describe().c_str(), model_flops / 1e9,
                ours_old_mean, py_old_mean);
  table << line;
  std::printf("%s", table.str().c_str());
  if (std::abs(ours_old_mean - py_old_mean) > 1e-3) {
    std::fprintf(stderr, "the two implementations disagree on the old logprobs\n");
    return 1;
  }
  if (cli.append())
    bench::append_to_benchmarks(
        "Trainer: one GRPO step, ours vs Python (bench/train/grpo_step_bench)", table.str());
  return 0;
}
