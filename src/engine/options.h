// How an engine process is set up: model directory, device, dtype, threads and memory limits.
// Filled from command-line flags over the YAML config's `ajet.engine` / `ajet.rollout` keys. Data
// and checks only (no libtorch): runtime.h turns these into a running engine.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>

#include "config/config.h"

namespace ajet::engine {

struct EngineOptions {
  std::filesystem::path model_dir;  // Hugging Face layout: config.json + safetensors
  int threads = 0;                  // intra-op threads; 0: one per core
  int64_t kv_cache_mb =
      config::kDefaultKvCacheMemoryMb;  // KV cache budget (keys + values, all layers), MiB
  int64_t max_model_len = 0;  // prompt + generated tokens; 0: the model's max_position_embeddings
  int64_t max_batch_tokens = 512;  // tokens per engine step (decode first, then prefill chunks)
  int64_t max_running = 64;        // sequences decoding at once
  std::string device = "cpu";      // cpu | cuda | cuda:N | auto (cuda when available)
  // A data-parallel rank's place on its node (torchrun's LOCAL_RANK): `cuda` and `auto` mean GPU
  // `local_rank`, so the ranks of one node use one GPU each. `cuda:N` is taken as written.
  int local_rank = 0;
  std::string dtype = "float32";        // float32 | bfloat16 | float16
  std::string kv_cache_dtype = "auto";  // auto (the model's dtype) | float32 | bfloat16 | float16
  int64_t policy_version = 0;  // version reported with every generated token until weights change
  bool prefix_caching = true;  // reuse keys/values of prompt prefixes already computed
  // The whole --conf file when one was given: the trainer methods take their settings from it
  // (backbone, ajet.trainer_common.*, ajet.lora.*, ajet.async.*); without it they use defaults.
  std::optional<config::Config> config;
};

// The engine settings of a loaded config: ajet.model.path, ajet.engine.{threads,
// kv_cache_memory_mb, device, dtype, kv_cache_dtype, prefill_chunk_tokens},
// ajet.rollout.{max_model_len, max_num_seqs}.
EngineOptions options_from_config(const config::Config& config);

// Reads a YAML config file (load_config_file's checks and messages) and takes its engine settings.
// `model_dir`, when not empty, stands in for ajet.model.path (which the file may then omit).
// Unknown-key warnings are logged.
EngineOptions options_from_config_file(const std::filesystem::path& path,
                                       const std::string& model_dir);

// Throws Error(kInvalidArgument) naming the flag (e.g. "--kv-cache-mb must be >= 1, got 0") and
// Error(kNotFound) for a model directory that is missing or holds no config.json.
void validate_options(const EngineOptions& options);

}  // namespace ajet::engine
