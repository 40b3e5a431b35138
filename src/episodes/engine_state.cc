#include "episodes/engine_state.h"

#include "common/error.h"

namespace ajet::episodes {

namespace {
constexpr std::pair<EngineStatus, std::string_view> kNames[] = {
    {EngineStatus::kOffline, "ENGINE.OFFLINE"},
    {EngineStatus::kBooting, "ENGINE.BOOTING"},
    {EngineStatus::kRolling, "ENGINE.ROLLING"},
    {EngineStatus::kRollingPost, "ENGINE.ROLLING_POST"},
    {EngineStatus::kWeightSyncing, "ENGINE.WEIGHT_SYNCING"},
    {EngineStatus::kWeightExporting, "ENGINE.WEIGHT_EXPORTING"},
};
}  // namespace

std::string_view engine_status_name(EngineStatus status) {
  for (const auto& [s, name] : kNames) {
    if (s == status) return name;
  }
  return "ENGINE.UNKNOWN";
}

std::optional<EngineStatus> parse_engine_status(std::string_view name) {
  for (const auto& [s, n] : kNames) {
    if (n == name) return s;
  }
  return std::nullopt;
}

std::string_view backbone_name(Backbone backbone) {
  switch (backbone) {
    case Backbone::kTorch: return "torch";
    case Backbone::kAsync: return "async";
    case Backbone::kDebug: return "debug";
  }
  return "torch";
}

Backbone parse_backbone(std::string_view name) {
  if (name == "torch" || name == "verl") return Backbone::kTorch;
  if (name == "async" || name == "trinity") return Backbone::kAsync;
  if (name == "debug") return Backbone::kDebug;
  invalid_argument("ajet.backbone must be torch, async or debug, got '" + std::string(name) + "'");
}

bool transition_allowed(EngineStatus from, EngineStatus to) {
  using S = EngineStatus;
  if (to == S::kOffline) return true;
  if (to == S::kBooting) return true;  // start (from OFFLINE) or supervisor restart (from anywhere)
  switch (from) {
    case S::kBooting: return to == S::kRolling;
    case S::kRolling: return to == S::kRollingPost;
    case S::kRollingPost: return to == S::kWeightSyncing || to == S::kRolling;
    case S::kWeightSyncing: return to == S::kRolling || to == S::kWeightExporting;
    case S::kWeightExporting: return to == S::kWeightSyncing || to == S::kRolling;
    case S::kOffline: return false;
  }
  return false;
}

bool claims_allowed(EngineStatus status) { return status == EngineStatus::kRolling; }

bool chat_allowed(EngineStatus status) {
  return status == EngineStatus::kRolling || status == EngineStatus::kRollingPost;
}

std::string claim_fail_cause(EngineStatus status) {
  std::string advice;
  switch (status) {
    case EngineStatus::kOffline:
      advice =
          "Please start the engine first. Please use one of the client to run `client.sync_train_config() + "
          "client.start_engine()` to start the engine.";
      break;
    case EngineStatus::kBooting:
      advice = "Please wait until the engine is fully booted. Try again (maybe 1 minute) later.";
      break;
    case EngineStatus::kRollingPost:
      advice =
          "Engine is in post-rolling phase (the batch is full; waiting for running episodes to finish). Try again "
          "(maybe 1 minute) later.";
      break;
    case EngineStatus::kWeightSyncing:
      advice = "Engine is syncing weights. Try again (maybe 1 minute) later.";
      break;
    case EngineStatus::kWeightExporting:
      advice = "Engine is exporting weights (checkpoint). Try again (maybe 1 minute) later.";
      break;
    case EngineStatus::kRolling: break;
  }
  return "Engine not ready. Current status: [" + std::string(engine_status_name(status)) + "]. " + advice;
}

std::string chat_unavailable_message(EngineStatus status) {
  return "The server is not in ENGINE.ROLLING status (current: " + std::string(engine_status_name(status)) +
         "); chat calls are served in ENGINE.ROLLING and ENGINE.ROLLING_POST. Retry after " +
         std::to_string(retry_after_seconds(status)) + " seconds.";
}

int retry_after_seconds(EngineStatus status) {
  switch (status) {
    case EngineStatus::kOffline: return 15;
    case EngineStatus::kBooting: return 15;
    default: return 5;
  }
}

void EngineState::transition(EngineStatus to, double now, std::string detail) {
  if (!transition_allowed(status_, to)) {
    fail(ErrorCode::kFailedPrecondition, "illegal engine transition " + std::string(engine_status_name(status_)) +
                                             " -> " + std::string(engine_status_name(to)));
  }
  if (to == EngineStatus::kBooting) {
    booting_start_time_ = now;
  } else {
    booting_start_time_.reset();
  }
  status_ = to;
  detail_ = std::move(detail);
}

Json EngineState::to_json() const {
  return Json{{"engine_status", engine_status_name(status_)},
              {"engine_status_detail", detail_.empty() ? Json(nullptr) : Json(detail_)},
              {"global_step", global_step_}};
}

}  // namespace ajet::episodes
