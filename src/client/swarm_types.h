// Plain types of the swarm client (docs/protocol.md field names): a claimed episode, a workflow
// output, the throttle and retry policies, and SwarmError, the one exception the client throws.
// Nothing here talks to the network.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "common/error.h"
#include "common/json.h"

namespace ajet::client {

inline constexpr const char* kOffline = "ENGINE.OFFLINE";
inline constexpr const char* kBooting = "ENGINE.BOOTING";
inline constexpr const char* kRolling = "ENGINE.ROLLING";
inline constexpr const char* kRollingPost = "ENGINE.ROLLING_POST";
inline constexpr const char* kWeightSyncing = "ENGINE.WEIGHT_SYNCING";
inline constexpr const char* kWeightExporting = "ENGINE.WEIGHT_EXPORTING";
inline constexpr const char* kCannotConnect = "ENGINE.CANNOT_CONNECT";  // client-side only

// What went wrong, for callers that react differently (retry a connection, give up on a refusal).
enum class SwarmErrorKind {
  kConnection,  // unreachable server or broken connection
  kCommand,     // the server refused (http_status() says how)
  kOffline,     // the engine went OFFLINE while the client waited for another status
  kTimeout,     // a wait passed its max_wait
  kChat,        // an OpenAI-compatible call failed (http_status(), openai_code())
};

class SwarmError : public Error {
 public:
  SwarmError(SwarmErrorKind kind, const std::string& message, int http_status = 0,
             std::string openai_code = {})
      : Error(code_for(kind, http_status), message),
        kind_(kind),
        http_status_(http_status),
        openai_code_(std::move(openai_code)) {}
  SwarmErrorKind kind() const { return kind_; }
  int http_status() const { return http_status_; }  // 0 when no HTTP answer was involved
  const std::string& openai_code() const { return openai_code_; }

 private:
  static ErrorCode code_for(SwarmErrorKind kind, int status);
  SwarmErrorKind kind_;
  int http_status_;
  std::string openai_code_;
};

struct Episode {
  std::string episode_uuid;
  std::string base_url;  // "http://<the host this client dialled>/v1"
  std::string api_key;   // "sk-ajet-…"
  std::string client_uuid;
  std::string episode_type = "train";
  int64_t global_step = 0;  // the policy version the server served when it was claimed
};

// A member's role in an episode group (docs/protocol.md "Episode groups across servers"): the
// coordinator leaves coordinator_url empty; a participant names the coordinator and its episode.
struct GroupRole {
  std::string group_id;
  std::string coordinator_url;
  std::string coordinator_episode_uuid;
  double prepare_timeout = 60;  // seconds before the servers settle the group without this client
  std::string coordinator_episode_key;  // participants: the coordinator episode's api_key (their
                                        // fronts ask with it)
  Json to_json() const;
};

// The answer of prepare_end_episode.
struct Prepared {
  int64_t global_step_at_claim = 0;
  int64_t global_step = 0;
  bool weights_changed = false;
};

struct WorkflowOutput {
  double reward = 0;
  std::optional<bool> is_success;
  Json metadata = Json::object();
  Json log_metrics = Json::object();
  Json to_json(const std::string& task_id) const;  // metadata.task_id = task_id
};

// Cocktail training (docs/protocol.md "Throttle policy"); unset sizes come from the server's pool
// info.
struct ThrottlePolicy {
  std::string current_task_id;
  double ratio = 1.5;
  std::optional<int64_t> expected_batch_size;
  std::optional<int64_t> expected_num_repeat;
  Json to_json() const;
};

// Seconds between attempts. Upstream waits 15 s (busy, errors) and 2 s (empty pool, throttle); this
// server says what it waits for, so the defaults are shorter. ±jitter spreads many clients apart.
struct RetryPolicy {
  double status_poll = 1.0;
  double engine_busy = 3.0;
  double empty_pool = 0.5;
  double throttle = 2.0;
  double agree_sync_weight = 2.0;
  double cannot_connect_retry = 4.0;
  int end_episode_attempts =
      5;  // end_episode is idempotent on the server, so connection errors retry
  double jitter = 0.1;
};

struct ClaimOptions {
  double discard_episode_timeout = 240;  // seconds idle before the server reclaims the episode
  std::string episode_type = "train";    // "train" | "eval"
  std::optional<ThrottlePolicy> throttle_policy;
  // A LoRA adapter of the server's engine that the episode's calls use unless their "model" names
  // one (docs/protocol.md "Adapters"); empty: none.
  std::string adapter;
  std::optional<double> max_wait;  // seconds; unset: wait as long as it takes
  // Called with the server's fail_cause before each wait (progress reporting); may be empty.
  std::function<void(const std::string& fail_cause)> on_wait;
};

// One entry of GET /get_engine_status `recent_batches` (the front's newest batches, oldest first):
// a batch handed to the trainer, and whether it trained.
struct BatchOutcome {
  int64_t batch_id = 0;
  int64_t global_step = -1;  // the global step the batch was formed at
  bool trained = false;
  Json stats;  // the trainer's statistics (null when it did not train)
  Json error;  // {"code", "message"} when it did not train ({} otherwise)
  // The policy version the trainer's statistics name (stats.policy_version; -1 when absent).
  int64_t policy_version() const;
  std::string error_code() const;
};

struct EngineStatus {
  std::string status;  // ENGINE.* (kCannotConnect when unreachable)
  std::string detail;  // engine_status_detail ("" when null)
  int64_t global_step = 0;
  std::string
      engine_run;  // (ext) the running engine's start_engine name ("" when OFFLINE or unnamed)
  std::vector<BatchOutcome> recent_batches;  // oldest first
  Json body;                                 // the whole answer ({} when unreachable)

  // The newest record of the batch formed at `global_step`, or null.
  const BatchOutcome* batch_formed_at(int64_t global_step) const;
  // The newest record, or null.
  const BatchOutcome* newest_batch() const;
  // The trained batch whose training made policy `version` (its stats name the version); with
  // `synchronous` also the trained batch formed at version - 1 (an engine that names no version).
  const BatchOutcome* batch_trained_into(int64_t version, bool synchronous) const;
};

// recent_batches of a GET /get_engine_status answer (entries that are not objects are skipped).
std::vector<BatchOutcome> parse_recent_batches(const Json& status_body);

enum class EndResult {
  kEnded,    // stored by the server
  kDropped,  // the engine had moved on to WEIGHT_SYNCING (a batch-boundary race, routine): dropped
  kAbortedExpired  // the episode outlived 8 x discard_episode_timeout: aborted instead
};

}  // namespace ajet::client
