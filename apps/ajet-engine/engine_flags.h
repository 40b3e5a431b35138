// The engine settings flags shared by `ajet-engine serve` and `ajet-engine generate`: --model,
// --conf, --threads, --kv-cache-mb, --max-model-len, --max-batch-tokens, --max-running, --device,
// --dtype, --kv-cache-dtype, --no-prefix-caching, --policy-version. A flag given on the command
// line wins over the --conf file, which wins over the defaults. No libtorch here.
#pragma once

#include <CLI/CLI.hpp>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "engine/options.h"

namespace ajet::engine_cli {

class EngineFlags {
 public:
  void add_to(CLI::App* command);
  // The settings to start the engine with (not yet validated; start_engine does that).
  engine::EngineOptions resolve() const;
  const std::string& model_dir() const { return flags_.model_dir_text; }

 private:
  struct Values {
    std::string model_dir_text;
    engine::EngineOptions options;
  };
  Values flags_;
  std::string conf_;
  bool no_prefix_caching_ = false;
  // Each given flag copies its value over the config's.
  std::vector<std::pair<CLI::Option*, std::function<void(engine::EngineOptions&)>>> overrides_;
};

inline void EngineFlags::add_to(CLI::App* cmd) {
  engine::EngineOptions& o = flags_.options;
  auto add = [&](CLI::Option* option, std::function<void(engine::EngineOptions&)> copy) {
    overrides_.emplace_back(option, std::move(copy));
  };
  cmd->add_option("--model", flags_.model_dir_text,
                  "Model directory (Hugging Face layout, e.g. from `ajet model init`)");
  cmd->add_option(
      "--conf", conf_,
      "YAML config: ajet.model.path, ajet.engine.*, ajet.rollout.max_model_len/max_num_seqs");
  add(cmd->add_option("--threads", o.threads, "Intra-op compute threads (0: one per core)")
          ->capture_default_str(),
      [this](engine::EngineOptions& x) { x.threads = flags_.options.threads; });
  add(cmd->add_option("--kv-cache-mb", o.kv_cache_mb, "KV cache memory budget in MiB")
          ->capture_default_str(),
      [this](engine::EngineOptions& x) { x.kv_cache_mb = flags_.options.kv_cache_mb; });
  add(cmd->add_option(
             "--max-model-len", o.max_model_len,
             "Context limit: prompt + generated tokens (0: the model's max_position_embeddings)")
          ->capture_default_str(),
      [this](engine::EngineOptions& x) { x.max_model_len = flags_.options.max_model_len; });
  add(cmd->add_option("--max-batch-tokens", o.max_batch_tokens,
                      "Tokens per engine step (prefill chunk size)")
          ->capture_default_str(),
      [this](engine::EngineOptions& x) { x.max_batch_tokens = flags_.options.max_batch_tokens; });
  add(cmd->add_option("--max-running", o.max_running, "Sequences decoded together")
          ->capture_default_str(),
      [this](engine::EngineOptions& x) { x.max_running = flags_.options.max_running; });
  add(cmd->add_option("--device", o.device, "cpu, cuda, cuda:N or auto")->capture_default_str(),
      [this](engine::EngineOptions& x) { x.device = flags_.options.device; });
  add(cmd->add_option("--dtype", o.dtype, "float32, bfloat16 or float16")->capture_default_str(),
      [this](engine::EngineOptions& x) { x.dtype = flags_.options.dtype; });
  add(cmd->add_option("--kv-cache-dtype", o.kv_cache_dtype,
                      "KV cache element type: auto (the model's), float32, bfloat16 or float16")
          ->capture_default_str(),
      [this](engine::EngineOptions& x) { x.kv_cache_dtype = flags_.options.kv_cache_dtype; });
  add(cmd->add_flag("--no-prefix-caching", no_prefix_caching_,
                    "Compute every prompt in full (default: reuse the keys/values of prefixes "
                    "already computed)"),
      [](engine::EngineOptions& x) { x.prefix_caching = false; });
  add(cmd->add_option("--policy-version", o.policy_version,
                      "Policy version reported with generated tokens")
          ->capture_default_str(),
      [this](engine::EngineOptions& x) { x.policy_version = flags_.options.policy_version; });
}

inline engine::EngineOptions EngineFlags::resolve() const {
  if (conf_.empty()) {
    engine::EngineOptions o = flags_.options;
    o.model_dir = flags_.model_dir_text;
    if (no_prefix_caching_) o.prefix_caching = false;
    return o;
  }
  engine::EngineOptions o = engine::options_from_config_file(conf_, flags_.model_dir_text);
  for (const auto& [option, copy] : overrides_) {
    if (option->count() > 0) copy(o);
  }
  if (!flags_.model_dir_text.empty()) o.model_dir = flags_.model_dir_text;
  return o;
}

}  // namespace ajet::engine_cli
