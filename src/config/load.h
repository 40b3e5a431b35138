// Reads, validates, overrides and writes the YAML config (upstream AgentJet key names).
// Unknown keys are collected as warnings (never fatal); wrong types and broken relations throw
// Error(kInvalidArgument) naming the full dotted key, what was expected, and the source file.
#pragma once

#include <chrono>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "config/config.h"

namespace ajet::config {

struct LoadedConfig {
  Config config;
  std::vector<std::string>
      warnings;  // each names the full dotted key, e.g. "unknown key 'ajet.foo' (ignored)"
};

// Who reads a config. The swarm server has no task reader and no judge: its clients (the classic
// launcher, a swarm client) bring the tasks and report the rewards, reading `ajet.task_reader` and
// `ajet.task_judge` from the same config they sync. So the server skips those two sections:
// accepted whatever they hold (upstream's readers and judges included), without a warning (they are
// the clients' keys, not mistakes), and left at their defaults. Every other key is read the same
// way by both.
enum class ConfigUse { kClassic, kSwarmServer };

// Parses YAML text layered over the defaults, then validates. `source` names the text in messages
// (a file path, or e.g. "sync_train_config body").
LoadedConfig parse_config(std::string_view yaml_text, std::string_view source,
                          ConfigUse use = ConfigUse::kClassic);

// Reads and parses a file (Error(kIo) naming the path when unreadable).
LoadedConfig load_config_file(const std::filesystem::path& path);

// Sets one key from a YAML scalar/flow text ("debug", "[0.9, 0.95]", "null"), e.g. from a CLI flag.
// Throws for unknown keys and bad values; re-run validate() after a set of overrides.
void set_config_value(Config& config, std::string_view dotted_key, std::string_view yaml_value);

// Bounds of every key and the relations between keys (e.g. max_response_length_in_one_turn <=
// max_model_len). Throws one Error listing every violation, each naming its keys and `source`.
void validate(const Config& config, std::string_view source);
// Train episodes sampled with top-p or top-k come from a truncated distribution the trainer does
// not form (it forms softmax(logits / temperature)). Where the loss divides by the rollout's own
// logprobs (the async backbone's off-policy correction, old_logprob_source: rollout), every ratio
// carries that difference (measured each step as rollout_logprob_diff): the warning that says so,
// naming `source`, or nullopt. parse_config adds it; callers that override keys afterwards
// (--backbone, --set) ask again.
std::optional<std::string> truncated_rollout_warning(const Config& config, std::string_view source);

// ajet.engine.device: cpu, cuda, cuda:N (N up to three digits) or auto.
bool valid_device_name(std::string_view device);

// The whole config as YAML (every key, resolved values) and as nested JSON.
std::string to_yaml(const Config& config);
Json to_json(const Config& config);

// Upstream's "auto" names: experiment_name `read_yaml_name` → `{yaml basename}_{YYYYMMDD_HHMM}`
// (UTC), experiment_dir `auto` → `{exp_base_dir}/{experiment_name}`.
void resolve_auto_names(Config& config, std::string_view yaml_path,
                        std::chrono::system_clock::time_point now,
                        const std::filesystem::path& exp_base_dir = "saved_experiments");

}  // namespace ajet::config
