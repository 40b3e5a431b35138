// Training throughput of one GRPO step on the `small` preset: our Trainer (plain and tree packing)
// against the same model, batch and loss written in Python with Debian's python3-torch
// (bench/train/grpo_step_ref.py, run as a subprocess with the same thread count), in one run. A step
// is: recompute old logprobs (no gradient), forward + backward of the PPO-clip token-mean loss, AdamW.
// MFU counts model FLOPs: 6 per weight per token (forward 2, backward 4; lm_head included, embedding
// lookup not) plus 3x the forward attention products over each sample's L x L scores, against a
// float32 1024^3 matmul measured in the same run. Prints a table and appends it to
// docs/benchmarks.md (--no-append to skip; --smoke for a seconds-long check; --threads N, --reps N,
// --group N, --prompt N, --completion N, --vocab N to change the shape).
#include <torch/csrc/autograd/profiler_legacy.h>
#include <torch/torch.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <unistd.h>

#include "common/json.h"
#include "model/compute.h"
#include "model/model_dir.h"
#include "model/presets.h"
#include "train/trainer.h"

namespace {

using Clock = std::chrono::steady_clock;
namespace fs = std::filesystem;
using namespace ajet;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

double gemm_peak_gflops(int64_t n, int reps) {
  auto a = torch::randn({n, n}), b = torch::randn({n, n});
  auto c = torch::matmul(a, b);
  double best = 0;
  for (int r = 0; r < reps; ++r) {
    auto t0 = Clock::now();
    c = torch::matmul(a, b);
    best = std::max(best, 2.0 * n * n * n / seconds_since(t0) / 1e9);
  }
  return best;
}

std::string run_capture(const std::string& command) {
  std::string out;
  FILE* p = popen(command.c_str(), "r");
  if (!p) return out;
  std::array<char, 4096> buf{};
  size_t n = 0;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) out.append(buf.data(), n);
  pclose(p);
  return out;
}

struct Args {
  int threads = 2, reps = 3, group = 8, prompt = 256, completion = 256;
  int64_t vocab = 4096;
  bool smoke = false, append = true;
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

struct Result {
  std::string name;
  double seconds = 0;  // fastest step: the least disturbed by other load on the machine
  double median = 0;
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

double fastest(const std::vector<double>& v) { return *std::min_element(v.begin(), v.end()); }

}  // namespace

int main(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    auto next = [&] { return i + 1 < argc ? std::atoi(argv[++i]) : 0; };
    if (!std::strcmp(argv[i], "--smoke")) a.smoke = true;
    else if (!std::strcmp(argv[i], "--no-append")) a.append = false;
    else if (!std::strcmp(argv[i], "--threads")) a.threads = next();
    else if (!std::strcmp(argv[i], "--reps")) a.reps = next();
    else if (!std::strcmp(argv[i], "--group")) a.group = next();
    else if (!std::strcmp(argv[i], "--prompt")) a.prompt = next();
    else if (!std::strcmp(argv[i], "--completion")) a.completion = next();
    else if (!std::strcmp(argv[i], "--vocab")) a.vocab = next();
    else if (!std::strcmp(argv[i], "--profile") && i + 1 < argc) a.profile = argv[++i];
  }
  if (a.smoke) {
    a.reps = 1;
    a.group = 2;
    a.prompt = 16;
    a.completion = 16;
    a.vocab = 256;
  }
  model::configure_threads(a.threads);
  std::printf("compute: %s\n", model::describe_compute_backend().c_str());
  const std::string preset = a.smoke ? "tiny" : "small";
  auto config = model::preset_config(preset, a.vocab);
  model::Qwen2Model base(config);
  model::init_weights(base, 0);

  const fs::path dir = fs::temp_directory_path() / ("ajet_grpo_bench_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  model::save_model_dir(base, dir / "model");

  // One GRPO group: a shared prompt, completions of prompt..completion tokens, rewards 0 / 1.
  std::mt19937_64 rng(1);
  auto token = [&] { return static_cast<int32_t>(rng() % static_cast<uint64_t>(a.vocab)); };
  std::vector<int32_t> prompt(static_cast<size_t>(a.prompt));
  for (auto& t : prompt) t = token();
  train::Batch batch;
  std::vector<double> rewards;
  std::vector<std::string> groups;
  for (int e = 0; e < a.group; ++e) {
    train::TrainSample s;
    s.episode_uuid = "e" + std::to_string(e);
    s.task_id = "task";
    s.reward = e % 2;
    s.token_ids = prompt;
    s.loss_mask.assign(prompt.size(), 0);
    const int len = a.completion - (e * a.completion) / (4 * a.group);  // 75..100 % of the completion budget
    for (int k = 0; k < len; ++k) {
      s.token_ids.push_back(token());
      s.loss_mask.push_back(1);
    }
    s.logprobs.assign(s.token_ids.size(), -1.0f);
    rewards.push_back(s.reward);
    groups.push_back(s.task_id);
    batch.samples.push_back(std::move(s));
  }
  auto adv = train::compute_advantages(rewards, groups, {}).advantages;

  train::TrainerOptions o;
  o.optim.lr = 1e-6;
  o.optim.grad_clip = 1.0;
  o.loss.use_kl = false;
  o.episode_weighting = false;
  o.micro_batch_tokens = 1 << 20;  // one micro-batch, as the Python side
  o.shuffle = false;

  Json spec = {{"model_dir", (dir / "model").string()}, {"threads", a.threads}, {"lr", o.optim.lr},
               {"weight_decay", o.optim.weight_decay}, {"grad_clip", o.optim.grad_clip},
               {"clip_low", o.loss.clip_low}, {"clip_high", o.loss.clip_high}, {"clip_c", o.loss.clip_c},
               {"warmup", 1}, {"reps", a.reps}, {"samples", Json::array()}};
  for (size_t i = 0; i < batch.samples.size(); ++i) {
    const auto& s = batch.samples[i];
    spec["samples"].push_back({{"token_ids", s.token_ids}, {"loss_mask", s.loss_mask}, {"advantage", adv[i]}});
  }
  {
    std::ofstream(dir / "spec.json") << spec.dump();
  }

  // Ours.
  std::vector<Result> results;
  double ours_old_mean = 0;
  for (auto packing : {train::Packing::kPlain, train::Packing::kTree}) {
    o.packing = packing;
    train::Trainer trainer(clone(base), o);
    if (packing == train::Packing::kPlain) {
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
    if (!a.profile.empty() && packing == train::Packing::kPlain) {
      torch::autograd::profiler::RecordProfile guard(a.profile);
      trainer.train_step(batch);
    }
    std::vector<double> times;
    for (int r = 0; r < a.reps; ++r) {
      auto t0 = Clock::now();
      trainer.train_step(batch);
      times.push_back(seconds_since(t0));
    }
    results.push_back({"ours (C++), " + std::string(train::packing_name(packing)) + " packing", fastest(times), median(times)});
  }

  // Python, same threads, same batch.
  const std::string out = run_capture("/usr/bin/python3 " AJET_SOURCE_DIR "/bench/train/grpo_step_ref.py " +
                                      (dir / "spec.json").string() + " 2>&1");
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
  results.insert(results.begin(), {"Python (python3-torch 1.13), padded batch", py_seconds, py_median});
  fs::remove_all(dir);

  const double peak = gemm_peak_gflops(1024, 5);
  int64_t tokens = 0;
  double attention = 0;
  for (const auto& s : batch.samples) {
    tokens += static_cast<int64_t>(s.size());
    attention += 4.0 * config.num_hidden_layers * static_cast<double>(s.size()) * static_cast<double>(s.size()) *
                 config.num_attention_heads * config.head_dim;
  }
  // Model FLOPs of the update (forward + backward): 6 per weight per token + 3x the forward attention.
  // The reference's extra old-logprob forward is work it does, not work the step needs.
  const double flops = 6.0 * static_cast<double>(model::count_parameters(config)) * static_cast<double>(tokens) + 3.0 * attention;

  std::ostringstream table;
  char line[512];
  std::snprintf(line, sizeof(line),
                "`%s` preset (%lld parameters, vocab %lld), %d threads; one GRPO group of %d samples: prompt %d + "
                "completion %d..%d tokens (%lld tokens, %lld trained); fastest of %d steps (median in brackets).\n\n",
                preset.c_str(), static_cast<long long>(model::count_parameters(config)), static_cast<long long>(a.vocab),
                a.threads, a.group, a.prompt, a.completion - a.completion / 4, a.completion, static_cast<long long>(tokens),
                static_cast<long long>(batch.trained_tokens()), a.reps);
  table << line;
  table << "| implementation | step s | tokens/s | GFLOP/s | MFU | speed vs Python |\n|---|---|---|---|---|---|\n";
  for (const auto& r : results) {
    std::snprintf(line, sizeof(line), "| %s | %.3f (%.3f) | %.0f | %.1f | %.0f %% | %.2fx |\n", r.name.c_str(), r.seconds, r.median,
                  static_cast<double>(tokens) / r.seconds, flops / r.seconds / 1e9, 100 * flops / r.seconds / 1e9 / peak,
                  py_seconds / r.seconds);
    table << line;
  }
  std::snprintf(line, sizeof(line),
                "\nGEMM peak (1024^3 float32 matmul, same run): %.1f GFLOP/s. FLOPs per step: %.1f G. Old-logprob mean "
                "over trained tokens: ours %.6f, Python %.6f (same model, same tokens).\n",
                peak, flops / 1e9, ours_old_mean, py_old_mean);
  table << line;
  std::printf("%s", table.str().c_str());
  if (std::abs(ours_old_mean - py_old_mean) > 1e-3) {
    std::fprintf(stderr, "the two implementations disagree on the old logprobs\n");
    return 1;
  }
  if (a.append && !a.smoke) {
    std::string date = run_capture("date -I");
    date = date.substr(0, date.find('\n'));
    std::ofstream md(AJET_SOURCE_DIR "/docs/benchmarks.md", std::ios::app);
    md << "\n## Trainer: one GRPO step, ours vs Python (bench/train/grpo_step_bench), " << date << "\n\n" << table.str();
    std::printf("appended to docs/benchmarks.md\n");
  }
  return 0;
}
