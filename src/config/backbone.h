// The backbone: how a run trains. The one place its names are spelled; everything else holds the
// enum.
//   torch: synchronous RL (a step's batch trains before the next step rolls out);
//   async: rollouts go on while earlier batches train, within async.max_staleness versions;
//   debug: inference only, nothing trains (batches are recorded).
#pragma once

#include <string>
#include <string_view>

namespace ajet::config {

struct Config;

enum class Backbone { kTorch, kAsync, kDebug };

std::string_view backbone_name(Backbone backbone);
// "torch" | "async" | "debug" (and upstream's "verl" / "trinity"); throws Error(kInvalidArgument).
Backbone parse_backbone(std::string_view name);
// The config's ajet.backbone (validated when the config was read).
Backbone backbone_of(const Config& config);

inline bool trains(Backbone b) { return b != Backbone::kDebug; }

}  // namespace ajet::config
