// Classic mode for several models: `ajet --conf calc_duo.yaml`, where the config names the models
// under ajet.multi_model (docs/classic.md "Several models"). Each model is either a server — one
// `ajet-swarm` front (and engine) per model, each with the shared config and its own model path,
// experiment subdirectory and step counter — or a LoRA adapter of the one model a single front and
// engine serve (each adapter with its own optimizer and GRPO groups). One launcher drives them all
// with MultiEpisode: every rollout claims one episode per model, the built-in two-model agent plays
// it, and the group ends all-or-nothing with each model's own reward. Validation runs the pair
// greedily (and at T=1) on the held-out tasks. Every front and engine is stopped on exit.
#pragma once

#include <atomic>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "classic/launcher.h"
#include "common/json.h"

namespace ajet::multi_model {

struct ModelSpec {
  std::string name;            // "caller": metric prefix and experiment subdirectory
  std::filesystem::path path;  // a server: its model directory (relative to the config file's dir)
  // An adapter of the one served model: the POST /adapters body less the name; null for a server.
  Json adapter;
};

struct MultiModelSpec {
  std::string workflow = "calc_duo";  // the built-in multi-model agent
  std::vector<ModelSpec> models;
};

// ajet.multi_model of the config file (the typed config's section), or nullopt when it has none.
// Throws Error(kInvalidArgument) naming the file and key for a malformed section (unknown workflow,
// not two models, duplicate names, ...).
std::optional<MultiModelSpec> read_multi_model_spec(const std::filesystem::path& conf);

classic::RunResult run_multi_model(const classic::LaunchOptions& options,
                                   const MultiModelSpec& spec, const std::atomic<bool>& stop,
                                   const std::function<void(const std::string&)>& out);

}  // namespace ajet::multi_model
