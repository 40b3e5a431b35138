// The front's engine state machine: the six ENGINE.* statuses of docs/protocol.md ("Engine
// statuses"), which transitions are legal, what each status allows (claims, chat calls), and the
// retryable advice sent to clients.
// EngineState is a plain value guarded by its owner (the Registry's mutex); it never locks or
// blocks.
//
//   OFFLINE → BOOTING → ROLLING → ROLLING_POST → WEIGHT_SYNCING → ROLLING …
//   ROLLING_POST → ROLLING (debug backbone: a batch is recorded, nothing trains)
//   WEIGHT_SYNCING ⇄ WEIGHT_EXPORTING (a checkpoint export inside a training step) → ROLLING
//   any non-OFFLINE → BOOTING (the supervisor restarts a crashed engine), any → OFFLINE
//   (stop_engine)
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "common/json.h"
#include "config/backbone.h"

namespace ajet::episodes {

// Where the engine is in its life cycle, as the front tracks it (its wire name is "engine_status").
// A phase, not a "status": client::EngineStatus is the whole GET /get_engine_status answer a
// client reads (this phase's name, its detail, the global step, ...).
enum class EnginePhase {
  kOffline,
  kBooting,
  kRolling,
  kRollingPost,
  kWeightSyncing,
  kWeightExporting
};

// "ENGINE.OFFLINE", … exactly as on the wire.
std::string_view engine_phase_name(EnginePhase status);
std::optional<EnginePhase> parse_engine_phase(std::string_view name);

// The backbone is config's typed one (config/backbone.h spells its names).
using config::Backbone;
using config::backbone_name;
using config::parse_backbone;

bool transition_allowed(EnginePhase from, EnginePhase to);
bool claims_allowed(EnginePhase status);  // ROLLING only
bool chat_allowed(EnginePhase status);    // ROLLING or ROLLING_POST

// claim_episode's fail_cause when claims are not served: "Engine not ready. Current status:
// [ENGINE.X]. <what to wait for>" (upstream's wording, so upstream clients retry correctly).
std::string claim_fail_cause(EnginePhase status);
// The message of a refused chat call (the route answers 503 + Retry-After; see
// retry_after_seconds).
std::string chat_unavailable_message(EnginePhase status);
// How long a client should wait before retrying in `status` (seconds, for Retry-After).
int retry_after_seconds(EnginePhase status);

class EngineState {
 public:
  EnginePhase status() const { return status_; }
  const std::string& detail() const { return detail_; }
  int64_t global_step() const { return global_step_; }
  std::optional<double> booting_start_time() const { return booting_start_time_; }

  // Moves to `to` (throws Error(kFailedPrecondition) naming both statuses when illegal). Entering
  // BOOTING records `now` as booting_start_time; leaving it clears it.
  void transition(EnginePhase to, double now, std::string detail);
  void set_detail(std::string detail) { detail_ = std::move(detail); }
  void set_global_step(int64_t step) { global_step_ = step; }

  // GET /get_engine_status: {"engine_status", "engine_status_detail" (null when empty),
  // "global_step"}.
  Json to_json() const;

 private:
  EnginePhase status_ = EnginePhase::kOffline;
  std::string detail_;
  int64_t global_step_ = 0;
  std::optional<double> booting_start_time_;
};

}  // namespace ajet::episodes
