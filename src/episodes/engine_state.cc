#include "episodes/engine_state.h"

#include "common/error.h"

namespace ajet::episodes {

namespace {
constexpr std::pair<EnginePhase, std::string_view> kNames[] = {
    {EnginePhase::kOffline, "ENGINE.OFFLINE"},
    {EnginePhase::kBooting, "ENGINE.BOOTING"},
    {EnginePhase::kRolling, "ENGINE.ROLLING"},
    {EnginePhase::kRollingPost, "ENGINE.ROLLING_POST"},
    {EnginePhase::kWeightSyncing, "ENGINE.WEIGHT_SYNCING"},
    {EnginePhase::kWeightExporting, "ENGINE.WEIGHT_EXPORTING"},
};
}  // namespace

std::string_view engine_phase_name(EnginePhase status) {
  for (const auto& [s, name] : kNames) {
    if (s == status) return name;
  }
  return "ENGINE.UNKNOWN";
}

std::optional<EnginePhase> parse_engine_phase(std::string_view name) {
  for (const auto& [s, n] : kNames) {
    if (n == name) return s;
  }
  return std::nullopt;
}

bool transition_allowed(EnginePhase from, EnginePhase to) {
  using S = EnginePhase;
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

bool claims_allowed(EnginePhase status) { return status == EnginePhase::kRolling; }

bool chat_allowed(EnginePhase status) {
  return status == EnginePhase::kRolling || status == EnginePhase::kRollingPost;
}

std::string claim_fail_cause(EnginePhase status) {
  std::string advice;
  switch (status) {
    case EnginePhase::kOffline:
      advice =
          "Please start the engine first. Please use one of the client to run "
          "`client.sync_train_config() + "
          "client.start_engine()` to start the engine.";
      break;
    case EnginePhase::kBooting:
      advice = "Please wait until the engine is fully booted. Try again (maybe 1 minute) later.";
      break;
    case EnginePhase::kRollingPost:
      advice =
          "Engine is in post-rolling phase (the batch is full; waiting for running episodes to "
          "finish). Try again "
          "(maybe 1 minute) later.";
      break;
    case EnginePhase::kWeightSyncing:
      advice = "Engine is syncing weights. Try again (maybe 1 minute) later.";
      break;
    case EnginePhase::kWeightExporting:
      advice = "Engine is exporting weights (checkpoint). Try again (maybe 1 minute) later.";
      break;
    case EnginePhase::kRolling: break;
  }
  return "Engine not ready. Current status: [" + std::string(engine_phase_name(status)) + "]. " +
         advice;
}

std::string chat_unavailable_message(EnginePhase status) {
  return "The server is not in ENGINE.ROLLING status (current: " +
         std::string(engine_phase_name(status)) +
         "); chat calls are served in ENGINE.ROLLING and ENGINE.ROLLING_POST. Retry after " +
         std::to_string(retry_after_seconds(status)) + " seconds.";
}

int retry_after_seconds(EnginePhase status) {
  switch (status) {
    case EnginePhase::kOffline: return 15;
    case EnginePhase::kBooting: return 15;
    default: return 5;
  }
}

void EngineState::transition(EnginePhase to, double now, std::string detail) {
  if (!transition_allowed(status_, to)) {
    fail(ErrorCode::kFailedPrecondition, "illegal engine transition " +
                                             std::string(engine_phase_name(status_)) + " -> " +
                                             std::string(engine_phase_name(to)));
  }
  if (to == EnginePhase::kBooting) {
    booting_start_time_ = now;
  } else {
    booting_start_time_.reset();
  }
  status_ = to;
  detail_ = std::move(detail);
}

Json EngineState::to_json() const {
  return Json{{"engine_status", engine_phase_name(status_)},
              {"engine_status_detail", detail_.empty() ? Json(nullptr) : Json(detail_)},
              {"global_step", global_step_}};
}

}  // namespace ajet::episodes
