#include "engine/options.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>

#include "common/error.h"
#include "common/fs.h"
#include "common/log.h"
#include "config/load.h"
#include "model/model_source.h"

namespace ajet::engine {

EngineOptions options_from_config(const config::Config& config) {
  EngineOptions o;
  o.model_dir = config.model.path;
  o.threads = static_cast<int>(config.engine.threads);
  o.kv_cache_mb = config.engine.kv_cache_memory_mb;
  o.device = config.engine.device;
  o.dtype = config.engine.dtype;
  o.kv_cache_dtype = config.engine.kv_cache_dtype;
  o.max_batch_tokens = config.engine.prefill_chunk_tokens;
  o.max_model_len = config.rollout.max_model_len;
  o.max_running = config.rollout.max_num_seqs;
  o.prefix_caching = config.engine.enable_prefix_caching;
  return o;
}

EngineOptions options_from_config_file(const std::filesystem::path& path,
                                       const std::string& model_dir) {
  if (!std::filesystem::is_regular_file(path))
    fail(ErrorCode::kNotFound, "--conf " + path.string() + ": no such file");
  std::string text = read_file(path);
  if (!model_dir.empty()) {
    // The flag fills in ajet.model.path before validation, which requires it.
    try {
      YAML::Node root = YAML::Load(text);
      if (root.IsMap() || root.IsNull()) {
        root["ajet"]["model"]["path"] = model_dir;
        YAML::Emitter out;
        out << root;
        text = out.c_str();
      }
    } catch (const YAML::Exception&) {
      // Left as it is: parse_config below names what is wrong with the file.
    }
  }
  config::LoadedConfig loaded = config::parse_config(text, path.string());
  for (const std::string& warning : loaded.warnings) log().warn("{}: {}", path.string(), warning);
  EngineOptions options = options_from_config(loaded.config);
  options.config = std::move(loaded.config);
  return options;
}

void validate_options(const EngineOptions& o) {
  auto at_least = [](const char* flag, int64_t value, int64_t min) {
    if (value < min) {
      invalid_argument(std::string(flag) + " must be >= " + std::to_string(min) + ", got " +
                       std::to_string(value));
    }
  };
  at_least("--threads", o.threads, 0);
  at_least("--kv-cache-mb", o.kv_cache_mb, 1);
  at_least("--max-model-len", o.max_model_len, 0);
  at_least("--max-batch-tokens", o.max_batch_tokens, 1);
  at_least("--max-running", o.max_running, 1);
  at_least("--policy-version", o.policy_version, 0);
  if (std::find(config::kKvCacheDtypes.begin(), config::kKvCacheDtypes.end(), o.kv_cache_dtype) ==
      config::kKvCacheDtypes.end()) {
    invalid_argument(fmt::format("--kv-cache-dtype must be one of {}, got '{}'",
                                 fmt::join(config::kKvCacheDtypes, ", "), o.kv_cache_dtype));
  }
  if (o.model_dir.empty()) invalid_argument("--model is required (or ajet.model.path in --conf)");
  if (!std::filesystem::is_directory(o.model_dir)) {
    fail(ErrorCode::kNotFound, "--model " + o.model_dir.string() + ": not a directory");
  }
  try {
    model::resolve_model_source(o.model_dir);  // a model directory, a checkpoint or a PEFT adapter
  } catch (const Error& e) {
    fail(e.code(), std::string("--model: ") + e.what());
  }
}

}  // namespace ajet::engine
