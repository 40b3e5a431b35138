// The front's engine state machine: the six ENGINE.* statuses of docs/protocol.md ("Engine
// statuses"), which transitions are legal, what each status allows (claims, chat calls), and the
// retryable advice sent to clients.
// EngineState is a plain value guarded by its owner (the Registry's mutex); it never locks or blocks.
//
//   OFFLINE → BOOTING → ROLLING → ROLLING_POST → WEIGHT_SYNCING → ROLLING …
//   ROLLING_POST → ROLLING (debug backbone: a batch is recorded, nothing trains)
//   WEIGHT_SYNCING ⇄ WEIGHT_EXPORTING (a checkpoint export inside a training step) → ROLLING
//   any non-OFFLINE → BOOTING (the supervisor restarts a crashed engine), any → OFFLINE (stop_engine)
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "common/json.h"

namespace ajet::episodes {

enum class EngineStatus { kOffline, kBooting, kRolling, kRollingPost, kWeightSyncing, kWeightExporting };

// "ENGINE.OFFLINE", … exactly as on the wire.
std::string_view engine_status_name(EngineStatus status);
std::optional<EngineStatus> parse_engine_status(std::string_view name);

enum class Backbone { kTorch, kAsync, kDebug };
std::string_view backbone_name(Backbone backbone);
// "torch" | "async" | "debug" (and upstream's "verl" / "trinity"); throws Error(kInvalidArgument).
Backbone parse_backbone(std::string_view name);

bool transition_allowed(EngineStatus from, EngineStatus to);
bool claims_allowed(EngineStatus status);  // ROLLING only
bool chat_allowed(EngineStatus status);    // ROLLING or ROLLING_POST

// claim_episode's fail_cause when claims are not served: "Engine not ready. Current status:
// [ENGINE.X]. <what to wait for>" (upstream's wording, so upstream clients retry correctly).
std::string claim_fail_cause(EngineStatus status);
// The message of a refused chat call (the route answers 503 + Retry-After; see retry_after_seconds).
std::string chat_unavailable_message(EngineStatus status);
// How long a client should wait before retrying in `status` (seconds, for Retry-After).
int retry_after_seconds(EngineStatus status);

class EngineState {
 public:
  EngineStatus status() const { return status_; }
  const std::string& detail() const { return detail_; }
  int64_t global_step() const { return global_step_; }
  std::optional<double> booting_start_time() const { return booting_start_time_; }

  // Moves to `to` (throws Error(kFailedPrecondition) naming both statuses when illegal). Entering
  // BOOTING records `now` as booting_start_time; leaving it clears it.
  void transition(EngineStatus to, double now, std::string detail);
  void set_detail(std::string detail) { detail_ = std::move(detail); }
  void set_global_step(int64_t step) { global_step_ = step; }

  // GET /get_engine_status: {"engine_status", "engine_status_detail" (null when empty), "global_step"}.
  Json to_json() const;

 private:
  EngineStatus status_ = EngineStatus::kOffline;
  std::string detail_;
  int64_t global_step_ = 0;
  std::optional<double> booting_start_time_;
};

}  // namespace ajet::episodes
