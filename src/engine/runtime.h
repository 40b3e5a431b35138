// Starts what an engine process serves: loads the model directory onto the configured device and
// dtype, sets thread counts explicitly (libtorch starts with one here), logs the BLAS and threads
// in use, and starts the InferenceEngine. No libtorch in this header, so command files stay cheap.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>

#include "common/json.h"
#include "engine/options.h"
#include "batching/madness.h"
#include "hf/hf_config.h"
#include "model/qwen2.h"

namespace ajet::infer {
class InferenceEngine;
}

namespace ajet::engine {

struct ModelInfo {
  std::filesystem::path path;
  hf::ModelConfig config;
  int64_t parameters = 0;
  std::string dtype;  // "float32", "bfloat16", "float16"
};

struct ComputeInfo {
  std::string device;   // "cpu", "cuda:0"
  int threads = 0;      // intra-op threads of the engine thread
  std::string backend;  // model::describe_compute_backend(): BLAS library, threads, CPU capability
};

struct EngineRuntime {
  EngineRuntime();
  EngineRuntime(EngineRuntime&&) noexcept;
  EngineRuntime& operator=(EngineRuntime&&) noexcept;
  ~EngineRuntime();  // stops the engine thread

  ModelInfo model;
  ComputeInfo compute;
  std::unique_ptr<infer::InferenceEngine> engine;
};

// Validates `options` (validate_options), then loads and starts. Errors name the flag or file:
// a CUDA device on a libtorch without CUDA, an unknown dtype, a broken config.json or weights.
// `start_thread` false gives a manually stepped engine (tests).
EngineRuntime start_engine(const EngineOptions& options, bool start_thread = true);

// ajet.deterministic (`mode`: auto, true or false; docs/determinism.md) for `model`, loaded on
// `device` in `dtype`: turns model::set_batch_invariant on or off for the process (auto: on for a
// float32 CPU model that keeps packed weight copies anyway; true: on, making `model` keep them)
// and, when on, seeds torch's generator with `seed`. Returns whether it is on. The engine calls it
// once its model is loaded; `ajet replay` too, so that it trains with the same kernels.
bool apply_determinism(const std::string& mode, model::Qwen2Model& model,
                       const torch::Device& device, torch::ScalarType dtype, int64_t seed);

// {"path", "config" (config.json content), "parameters", "dtype"}.
Json model_info_json(const ModelInfo& info);

// The engine's madness detectors from ajet.rollout.madness; the garbage and language-switch ones
// read the token classes of the tokenizer of `model_dir` (a model, checkpoint or adapter dir).
batching::MadnessLimits madness_limits(const config::Config& config,
                                       const std::filesystem::path& model_dir);

}  // namespace ajet::engine
