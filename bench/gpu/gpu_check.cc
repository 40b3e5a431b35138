// The engine's pieces on one device (cpu, cuda, cuda:N), for scripts/gpu-check.sh: each subcommand
// loads a model directory onto the device, does one thing and prints one JSON line per result,
// which the script compares with a Python forward and turns into the table of docs/benchmarks.md.
//
//   gpu_check logits --model DIR --device D --ids 1,2,3 --out FILE
//       the model's logits for the ids, (T, V) little-endian float64 in FILE, from the dense
//       forward (Qwen2Model::forward_logits); also the engine's paged-cache forward (prefill of T-1
//       tokens, then one decode step) against it, which is what serving computes.
//   gpu_check decode --model DIR --device D [--concurrency 1,8,64] [--prompt 64] [--max-tokens 128]
//       steady-state decode tokens/s of the InferenceEngine at each concurrency (sampling at
//       temperature 1).
//   gpu_check grpo --model DIR --device D [--group 8] [--prompt 128] [--completion 128] [--reps 3]
//       one GRPO step of the Trainer (old logprobs from the update's forward, forward + backward,
//       AdamW): the first step's loss and gradient norm (the same on every device, up to float32
//       rounding) and the time of `reps` more.
//
// Common flags: --dtype float32|bfloat16|float16 (default float32), --threads N (intra-op CPU
// threads). Bad flags and devices fail with a message naming them (exit 2).
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "common/error.h"
#include "common/json.h"
#include "common/log.h"
#include "infer/attention.h"
#include "infer/engine.h"
#include "infer/kv_cache.h"
#include "model/compute.h"
#include "model/model_dir.h"
#include "model/qwen2.h"
#include "train/trainer.h"

namespace {

using namespace ajet;
using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// GPU work is asynchronous: a timer may only stop after the device is done.
void sync(torch::Device device) {
  if (device.is_cuda()) torch::cuda::synchronize(device.index());
}

struct Flags {
  std::map<std::string, std::string> values;

  std::string get(const std::string& name, const std::string& fallback = "") const {
    auto it = values.find(name);
    if (it != values.end()) return it->second;
    if (fallback.empty()) invalid_argument("--" + name + " is required");
    return fallback;
  }
  int64_t number(const std::string& name, int64_t fallback) const {
    const std::string text = get(name, std::to_string(fallback));
    char* end = nullptr;
    const long long v = std::strtoll(text.c_str(), &end, 10);
    if (text.empty() || *end != '\0' || v < 0)
      invalid_argument("--" + name + ": not a non-negative integer: '" + text + "'");
    return v;
  }
  std::vector<int64_t> numbers(const std::string& name, const std::string& fallback) const {
    std::vector<int64_t> out;
    const std::string text = get(name, fallback);
    size_t at = 0;
    while (at <= text.size()) {
      const size_t comma = std::min(text.find(',', at), text.size());
      const std::string item = text.substr(at, comma - at);
      char* end = nullptr;
      const long long v = std::strtoll(item.c_str(), &end, 10);
      if (item.empty() || *end != '\0' || v < 0)
        invalid_argument("--" + name + ": '" + text + "' is not a list like 1,8,64");
      out.push_back(v);
      at = comma + 1;
    }
    return out;
  }
};

Flags parse_flags(int argc, char** argv, const std::vector<std::string>& known) {
  Flags f;
  for (int i = 2; i < argc; ++i) {
    const std::string arg = argv[i];
    const std::string name = arg.rfind("--", 0) == 0 ? arg.substr(2) : "";
    if (std::find(known.begin(), known.end(), name) == known.end())
      invalid_argument("unknown flag '" + arg + "'");
    if (i + 1 >= argc) invalid_argument(arg + " needs a value");
    f.values[name] = argv[++i];
  }
  return f;
}

struct Loaded {
  model::Qwen2Model model{nullptr};
  torch::Device device = torch::kCPU;
};

Loaded load(const Flags& f) {
  Loaded l;
  l.device = model::parse_device(f.get("device", "cpu"));
  model::configure_threads(static_cast<int>(f.number("threads", 0)));
  const torch::ScalarType dtype = model::parse_dtype(f.get("dtype", "float32"));
  l.model = model::load_model_dir(f.get("model"), model::LoadOptions{dtype, l.device});
  l.model->eval();
  return l;
}

Json header(const std::string& check, const Loaded& l) {
  return {{"check", check},
          {"device", l.device.str()},
          {"dtype", model::dtype_to_hf_name(l.model->options().dtype().toScalarType())}};
}

int cmd_logits(const Flags& f) {
  Loaded l = load(f);
  const std::vector<int64_t> ids = f.numbers("ids", "");
  const std::string out_path = f.get("out");
  const int64_t t = static_cast<int64_t>(ids.size());
  if (t < 2) invalid_argument("--ids: at least two token ids");
  const int64_t vocab = l.model->config().vocab_size;
  for (int64_t id : ids) {
    if (id >= vocab)
      invalid_argument("--ids: " + std::to_string(id) + " is not below the vocabulary size " +
                       std::to_string(vocab));
  }
  torch::NoGradGuard no_grad;
  const auto long_on_device = torch::TensorOptions().dtype(torch::kLong).device(l.device);
  auto ids_t = torch::tensor(ids, torch::kLong).to(l.device).unsqueeze(0);  // (1, T)
  auto positions = torch::arange(t, long_on_device).unsqueeze(0);           // (1, T)
  auto dense = l.model->forward_logits(ids_t, positions)[0]
                   .to(torch::kCPU, torch::kDouble)
                   .contiguous();  // (T, V)

  // The serving path: the paged KV cache, a prefill of T-1 tokens, then the last token as a decode
  // step.
  const hf::ModelConfig& mc = l.model->config();
  const int64_t block = 16, blocks = (t + block - 1) / block;
  infer::KvCache cache({mc.num_hidden_layers, mc.num_key_value_heads, mc.head_dim, block}, blocks,
                       l.model->options());
  std::vector<int32_t> table(static_cast<size_t>(blocks));
  for (int64_t b = 0; b < blocks; ++b) table[static_cast<size_t>(b)] = static_cast<int32_t>(b);
  std::vector<int64_t> rows(static_cast<size_t>(t - 1));
  for (int64_t i = 0; i < t - 1; ++i) rows[static_cast<size_t>(i)] = i;
  infer::AttentionBatch prefill({{0, t - 1, 0, 0, blocks}}, table, block, l.device);
  auto first = infer::forward_cached(l.model, cache, prefill,
                                     std::vector<int64_t>(ids.begin(), ids.end() - 1), rows);
  infer::AttentionBatch decode({{0, 1, t - 1, 0, blocks}}, table, block, l.device);
  auto last = infer::forward_cached(l.model, cache, decode, {ids.back()}, {0});
  auto paged = torch::cat({first, last}).to(torch::kDouble);  // (T, V)
  const double paged_diff = (paged - dense).abs().max().item<double>();

  std::ofstream out(out_path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(dense.data_ptr<double>()),
            static_cast<std::streamsize>(dense.numel() * 8));
  if (!out) fail(ErrorCode::kInternal, "--out " + out_path + ": cannot write");
  Json j = header("logits", l);
  j["tokens"] = t;
  j["vocab"] = vocab;
  j["max_abs_logit"] = dense.abs().max().item<double>();
  j["paged_vs_dense_max_abs_diff"] = paged_diff;
  std::printf("%s\n", j.dump().c_str());
  return 0;
}

int cmd_decode(const Flags& f) {
  Loaded l = load(f);
  const std::vector<int64_t> concurrencies = f.numbers("concurrency", "1,8,64");
  const int64_t prompt_len = f.number("prompt", 64), max_tokens = f.number("max-tokens", 128);
  if (prompt_len < 1 || max_tokens < 2)
    invalid_argument("--prompt must be >= 1 and --max-tokens >= 2");
  const int64_t vocab = l.model->config().vocab_size;
  for (int64_t c : concurrencies) {
    if (c < 1) invalid_argument("--concurrency: every entry must be >= 1");
    infer::InferenceEngineOptions ec;
    ec.start_thread = false;  // stepped here: no thread hand-off in the timing
    ec.quiet = true;
    ec.cache_bytes = f.number("kv-cache-mb", 1024) << 20;
    ec.max_batch_tokens = 512;
    ec.max_running = c;
    infer::InferenceEngine engine(l.model, ec);
    std::vector<std::future<infer::GenerateResult>> futures;
    for (int64_t i = 0; i < c; ++i) {
      batching::GenerateRequest r;
      r.id = "gpu-check-" + std::to_string(i);
      for (int64_t p = 0; p < prompt_len; ++p)
        r.prompt.push_back(static_cast<int32_t>((p * 131 + i * 977 + 7) % vocab));
      r.max_tokens = max_tokens;
      r.temperature = 1.0;
      r.seed = static_cast<uint64_t>(i);
      futures.push_back(engine.generate(std::move(r)));
    }
    // Prefill every prompt (each samples its first token) before the clock starts.
    while (engine.stats().tokens_generated < c) engine.step();
    sync(l.device);
    const int64_t generated0 = engine.stats().tokens_generated;
    const auto t0 = Clock::now();
    while (engine.step()) {
    }
    sync(l.device);
    const double seconds = seconds_since(t0);
    const int64_t generated = engine.stats().tokens_generated - generated0;
    for (auto& fu : futures) {
      auto result = fu.get();
      if (result.error)
        fail(ErrorCode::kInternal,
             std::string("decode: a request failed: ") + result.error->what());
    }
    Json j = header("decode", l);
    j["concurrency"] = c;
    j["prompt"] = prompt_len;
    j["max_tokens"] = max_tokens;
    j["tokens"] = generated;
    j["seconds"] = seconds;
    j["tokens_per_s"] = generated / seconds;
    std::printf("%s\n", j.dump().c_str());
  }
  return 0;
}

int cmd_grpo(const Flags& f) {
  Loaded l = load(f);
  const int64_t group = f.number("group", 8), prompt_len = f.number("prompt", 128),
                completion = f.number("completion", 128);
  const int64_t reps = f.number("reps", 3);
  if (group < 2 || prompt_len < 1 || completion < 4)
    invalid_argument("--group >= 2, --prompt >= 1, --completion >= 4");
  const int64_t vocab = l.model->config().vocab_size;
  // One GRPO group: a shared prompt, completions of 75..100 % of `completion` tokens, rewards 0
  // / 1. The same tokens on every device (the seed is fixed), so the first step's loss can be
  // compared.
  std::mt19937_64 rng(1);
  auto token = [&] { return static_cast<int32_t>(rng() % static_cast<uint64_t>(vocab)); };
  std::vector<int32_t> prompt(static_cast<size_t>(prompt_len));
  for (auto& t : prompt) t = token();
  train_data::Batch batch;
  for (int64_t e = 0; e < group; ++e) {
    train_data::TrainSample s;
    s.episode_uuid = "e" + std::to_string(e);
    s.task_id = "task";
    s.reward = static_cast<double>(e % 2);
    s.token_ids = prompt;
    s.loss_mask.assign(prompt.size(), 0);
    const int64_t len = completion - (e * completion) / (4 * group);
    for (int64_t k = 0; k < len; ++k) {
      s.token_ids.push_back(token());
      s.loss_mask.push_back(1);
    }
    s.logprobs.assign(s.token_ids.size(), -1.0f);
    batch.samples.push_back(std::move(s));
  }
  train_data::TrainerOptions o;
  o.optim.lr = 1e-6;
  o.optim.grad_clip = 1.0;
  o.loss.use_kl = false;
  o.shuffle = false;
  o.micro_batch_tokens = 1 << 20;  // one micro-batch
  l.model->train();
  train::Trainer trainer(l.model, o);
  const auto t_first = Clock::now();
  const train_data::TrainMetrics first = trainer.train_step(batch);
  sync(l.device);
  const double first_seconds = seconds_since(t_first);
  std::vector<double> times;
  for (int64_t r = 0; r < reps; ++r) {
    const auto t0 = Clock::now();
    trainer.train_step(batch);
    sync(l.device);
    times.push_back(seconds_since(t0));
  }
  Json j = header("grpo", l);
  j["samples"] = group;
  j["tokens"] = first.tokens;
  j["trained_tokens"] = first.trained_tokens;
  j["loss"] = first.loss;
  j["pg_loss"] = first.pg_loss;
  j["grad_norm"] = first.grad_norm;
  j["entropy"] = first.entropy;
  j["first_step_seconds"] = first_seconds;  // includes the device's warm-up (allocator, kernels)
  j["step_seconds"] = times;
  if (!times.empty()) {
    const double best = *std::min_element(times.begin(), times.end());
    j["best_step_seconds"] = best;
    j["sample_tokens_per_s"] = static_cast<double>(first.tokens) / best;
  }
  std::printf("%s\n", j.dump().c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  ajet::set_log_level("warn");
  const std::string usage =
      "usage: gpu_check logits|decode|grpo --model DIR --device cpu|cuda|cuda:N [flags] (see "
      "gpu_check.cc)";
  if (argc < 2) {
    std::fprintf(stderr, "%s\n", usage.c_str());
    return 2;
  }
  const std::string cmd = argv[1];
  const std::vector<std::string> common = {"model", "device", "dtype", "threads"};
  auto with = [&](std::vector<std::string> extra) {
    extra.insert(extra.end(), common.begin(), common.end());
    return extra;
  };
  try {
    if (cmd == "logits") return cmd_logits(parse_flags(argc, argv, with({"ids", "out"})));
    if (cmd == "decode")
      return cmd_decode(
          parse_flags(argc, argv, with({"concurrency", "prompt", "max-tokens", "kv-cache-mb"})));
    if (cmd == "grpo")
      return cmd_grpo(parse_flags(argc, argv, with({"group", "prompt", "completion", "reps"})));
    std::fprintf(stderr, "gpu_check: unknown subcommand '%s'\n%s\n", cmd.c_str(), usage.c_str());
    return 2;
  } catch (const ajet::Error& e) {
    std::fprintf(stderr, "gpu_check %s: %s\n", cmd.c_str(), e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "gpu_check %s: %s\n", cmd.c_str(), e.what());
    return 1;
  }
}
