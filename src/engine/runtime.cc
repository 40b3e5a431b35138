#include "engine/runtime.h"

#include <algorithm>
#include <thread>

#include "common/error.h"
#include "common/log.h"
#include "infer/engine.h"
#include "model/compute.h"
#include "model/model_dir.h"
#include "model/model_source.h"
#include "model/qwen2.h"
#include "text/token_classes.h"
#include "text/tokenizer.h"

namespace ajet::engine {
namespace {

// Checked before anything is loaded. A CUDA device that cannot be used says why: a CPU-only build
// (the usual case here) is told apart from a CUDA build on a machine without that GPU.
torch::Device resolve_device(const std::string& given, int local_rank) {
  if (given == "auto" && !torch::cuda::is_available()) return torch::Device(torch::kCPU);
  // One GPU per local rank, as torchrun's convention has it.
  const std::string name =
      given == "auto" || given == "cuda" ? "cuda:" + std::to_string(local_rank) : given;
  const std::string what = "--device (ajet.engine.device) '" + name + "'";
  if (name.rfind("cuda", 0) == 0) {
#ifndef AJET_TORCH_CUDA
    invalid_argument(
        what +
        ": no usable CUDA: this engine is built against a CPU-only libtorch; build it against "
        "a CUDA libtorch (cmake -DAJET_TORCH_FROM_PYTHON=ON, docs/engine.md \"GPU\")");
#else
    const auto visible = static_cast<int64_t>(torch::cuda::device_count());
    if (visible == 0)
      invalid_argument(what + ": no usable CUDA: this build has CUDA but no GPU is visible");
#endif
  }
  torch::Device device = torch::kCPU;
  try {
    device = model::parse_device(name);
  } catch (const Error& e) {
    invalid_argument(what + ": " + e.what());
  }
  if (device.is_cuda() && device.has_index() &&
      device.index() >= static_cast<int64_t>(torch::cuda::device_count())) {
    invalid_argument(what + ": only " + std::to_string(torch::cuda::device_count()) +
                     " GPU(s) are visible");
  }
  return device;
}

torch::ScalarType resolve_dtype(const std::string& name) {
  try {
    return model::parse_dtype(name);
  } catch (const Error& e) {
    invalid_argument(std::string("--dtype: ") + e.what());
  }
}

}  // namespace

EngineRuntime::EngineRuntime() = default;
EngineRuntime::EngineRuntime(EngineRuntime&&) noexcept = default;
EngineRuntime& EngineRuntime::operator=(EngineRuntime&&) noexcept = default;
EngineRuntime::~EngineRuntime() {
  if (engine) engine->stop();
}

EngineRuntime start_engine(const EngineOptions& options, bool start_thread) {
  validate_options(options);
  // Every setting is checked before the (possibly large) weights are read.
  const torch::Device device = resolve_device(options.device, options.local_rank);
  const torch::ScalarType dtype = resolve_dtype(options.dtype);

  EngineRuntime rt;
  rt.compute.threads = options.threads > 0
                           ? options.threads
                           : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  model::configure_threads(rt.compute.threads);
  rt.compute.device = device.str();
  rt.compute.backend = model::describe_compute_backend();
  log().info("compute: {} (engine thread: {} intra-op threads, device {})", rt.compute.backend,
             rt.compute.threads, rt.compute.device);

  model::Qwen2Model model =
      model::load_model_dir(options.model_dir, model::LoadOptions{dtype, device});
  apply_determinism(options.config ? options.config->deterministic : "auto", model, device, dtype,
                    options.config ? options.config->engine.seed : 0);
  rt.model.path = std::filesystem::absolute(options.model_dir).lexically_normal();
  rt.model.config = model->config();
  rt.model.parameters = model->parameter_count();
  rt.model.dtype = model::dtype_to_hf_name(dtype);
  log().info("model: {} ({} {}, {} parameters, {} layers, hidden {}, vocab {}, {})",
             rt.model.path.string(), rt.model.config.model_type, rt.model.dtype,
             rt.model.parameters, rt.model.config.num_hidden_layers, rt.model.config.hidden_size,
             rt.model.config.vocab_size, rt.compute.device);

  infer::InferenceEngineOptions ec;
  ec.threads = rt.compute.threads;
  ec.cache_bytes = options.kv_cache_mb << 20;
  ec.max_batch_tokens = options.max_batch_tokens;
  ec.max_running = options.max_running;
  ec.max_model_len = options.max_model_len;
  ec.prefix_caching = options.prefix_caching;
  if (options.kv_cache_dtype != "auto") ec.cache_dtype = model::parse_dtype(options.kv_cache_dtype);
  ec.start_thread = start_thread;
  if (options.config) ec.madness = madness_limits(*options.config, options.model_dir);
  rt.engine = std::make_unique<infer::InferenceEngine>(std::move(model), ec);
  if (options.policy_version != 0) {
    std::future<void> set = rt.engine->set_policy_version(options.policy_version);
    if (!start_thread) rt.engine->step();  // manual mode: nobody else runs the engine's inbox
    set.get();
  }
  return rt;
}

bool apply_determinism(const std::string& mode, model::Qwen2Model& model,
                       const torch::Device& device, torch::ScalarType dtype, int64_t seed) {
  const bool cheap = device.is_cpu() && dtype == torch::kFloat && model->weight_packing();
  const bool on = mode == "true" || (mode == "auto" && cheap);
  model::set_batch_invariant(on);
  if (!on) {
    if (mode == "auto") {
      log().info("deterministic: auto leaves it off here ({}); reruns agree to float32 rounding",
                 !device.is_cpu()         ? "a GPU engine"
                 : dtype != torch::kFloat ? "not float32"
                                          : "the weights are over the packed-copy budget");
    }
    return false;
  }
  // A model over the budget keeps a packed copy anyway: the batch-invariant path needs it.
  if (!model->weight_packing()) model->set_weight_packing(true);
  // torch's generator too (LoRA initialisation; the RNG state checkpoints keep).
  torch::manual_seed(static_cast<uint64_t>(seed));
  log().info("deterministic ({}): batch-invariant kernels, every linear through ajet's own", mode);
  if (device.is_cuda())
    log().warn(
        "deterministic: on a GPU the kernels are torch's; batch invariance holds on CPU only");
  return true;
}

batching::MadnessLimits madness_limits(const config::Config& config,
                                       const std::filesystem::path& model_dir) {
  const config::MadnessConfig& m = config.rollout.madness;
  batching::MadnessLimits l;
  l.repeat_tokens = m.repeat_tokens;
  l.max_period = m.max_period;
  l.entropy_window = m.entropy_window;
  l.min_entropy_bits = m.min_entropy_bits;
  l.garbage_run = m.garbage_run;
  l.switch_run = m.switch_run;
  if (l.garbage_run > 0 || l.switch_run > 0) {
    // The two need to know what each token is: its script, or garbage (text/token_classes.h).
    const text::Tokenizer tokenizer =
        text::Tokenizer::load(model::resolve_model_source(model_dir).tokenizer_dir);
    std::vector<text::TokenId> allowed;
    if (auto eos = tokenizer.eos_id()) allowed.push_back(*eos);
    if (auto pad = tokenizer.pad_id()) allowed.push_back(*pad);
    for (const char* piece : {"<|im_end|>", "<|endoftext|>", "<think>", "</think>", "<tool_call>",
                              "</tool_call>", "<tool_response>", "</tool_response>"}) {
      if (auto id = tokenizer.token_to_id(piece)) allowed.push_back(*id);
    }
    const std::vector<uint8_t> classes = text::token_classes(tokenizer, allowed);
    auto table = std::make_shared<std::vector<batching::TokenClass>>();
    table->reserve(classes.size());
    for (uint8_t c : classes) table->push_back(static_cast<batching::TokenClass>(c));
    l.token_classes = std::move(table);
  }
  if (l.any()) {
    log().info(
        "madness detection: repetition {} (period <= {}), low entropy {} (< {} bits), garbage {}, "
        "language switch {} (tokens; 0 = off)",
        l.repeat_tokens, l.max_period, l.entropy_window, l.min_entropy_bits, l.garbage_run,
        l.switch_run);
  }
  return l;
}

Json model_info_json(const ModelInfo& info) {
  return Json{{"path", info.path.string()},
              {"config", hf::model_config_to_json(info.config)},
              {"parameters", info.parameters},
              {"dtype", info.dtype}};
}

}  // namespace ajet::engine
