// The swarm command API's request and response bodies (docs/protocol.md "Command API", upstream
// field names) as plain structs: from_json() validates a request body and names the bad field;
// to_json() is the exact response body. Also the one mapping from ajet::ErrorCode to the HTTP
// status of swarm routes.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "common/error.h"
#include "common/json.h"

namespace ajet::episodes {

// docs/protocol.md "Statuses and error mapping": kInvalidArgument / kFailedPrecondition → 400,
// kUnauthenticated → 401, kPermissionDenied (episode of another client) and kNotFound → 404,
// kResourceExhausted → 413, kUnavailable (engine not rolling; add Retry-After) → 503, anything
// else → 500.
int http_status_for(ErrorCode code);

// A failed command, as delivered to end_episode's completion callback. `status`, when set,
// overrides the code's status: 409 for a repeated end that differs from the stored one.
struct CommandError {
  ErrorCode code = ErrorCode::kInternal;
  std::string message;
  int status = 0;
  int http_status() const { return status != 0 ? status : http_status_for(code); }
};

struct ThrottlePolicy {
  double ratio = 1.5;
  std::optional<int64_t> expected_batch_size;
  std::optional<int64_t> expected_num_repeat;
  std::string current_task_id;
  Json to_json() const;
};

// POST /claim_episode (alias /begin_episode).
struct ClaimRequest {
  std::string client_uuid;
  std::string episode_type = "train";  // "train" | "eval" (checked by the registry: 400 otherwise)
  double discard_episode_timeout = 240.0;  // seconds; > 0
  std::optional<ThrottlePolicy> throttle_policy;
  // (ext) A LoRA adapter of the engine that the episode's calls use unless their "model" names one
  // (docs/protocol.md "Adapters"); empty: the base (or what each call names).
  std::string adapter;
  static ClaimRequest from_json(const Json& body);
};

struct ClaimResponse {
  bool success = false;
  std::string client_uuid;
  std::string episode_uuid;
  std::string openai_base_url;
  std::string openai_api_key;
  std::string fail_cause;
  int64_t global_step = 0;  // (ext) the policy version the episode starts under
  Json to_json() const;
};

// end_episode's workflow_output.metadata and log_metrics: each at most this many bytes serialized
// unless the front says otherwise (ajet-swarm start --max-episode-metadata-mb). They are kept in
// memory until the episode's batch trains, so one end must not pin megabytes.
inline constexpr size_t kDefaultMaxEpisodeMetadataBytes = 1u << 20;

struct WorkflowOutput {
  double reward = 0;
  std::optional<bool> is_success;
  Json metadata = Json::object();  // always carries "task_id" after parsing
  Json log_metrics = Json::object();
};

// POST /end_episode. `task_id` and `workflow_output.metadata.task_id` must agree when both are
// given (400 naming both); either one alone is copied to the other; neither is a 400. reward is
// required.
struct EndRequest {
  std::string client_uuid;
  std::string episode_uuid;
  std::string task_id;
  WorkflowOutput workflow_output;
  bool declare_client_active = true;
  // `command` names the body in errors ("end_episode body: …"). workflow_output.metadata and
  // log_metrics are each refused above `max_field_bytes` serialized (413 naming the field, the
  // limit and ajet-swarm start --max-episode-metadata-mb).
  static EndRequest from_json(const Json& body, std::string_view command = "end_episode",
                              size_t max_field_bytes = kDefaultMaxEpisodeMetadataBytes);
};

// The episode group of POST /prepare_end_episode (docs/protocol.md "Episode groups across
// servers"). The coordinator names no coordinator; a participant names the coordinator, its
// episode and that episode's key (the participant's front sends it when it asks the coordinator for
// the decision). A participant whose coordinator episode is on the same front (two adapters of one
// engine) names only coordinator_episode_uuid, and the front settles it from its own registry.
struct EpisodeGroup {
  std::string group_id;
  std::string coordinator_url;           // "" on the coordinator and on a local participant; else
                                         // "http://host:port" (normalized)
  std::string coordinator_episode_uuid;  // participants only
  std::string
      coordinator_episode_key;    // participants only: the coordinator episode's openai_api_key
  double prepare_timeout = 60.0;  // seconds without commit/abort before the janitor settles it
  bool is_coordinator() const {
    return coordinator_url.empty() && coordinator_episode_uuid.empty();
  }
  // A participant whose coordinator episode is on this same front.
  bool is_local_participant() const {
    return coordinator_url.empty() && !coordinator_episode_uuid.empty();
  }
  Json to_json() const;
  // Throws Error(kInvalidArgument) naming `where`.field. `key_required`: a participant must name
  // coordinator_episode_key (a new prepare; a group stored before keys existed is read without
  // one).
  static EpisodeGroup from_json(const Json& group, std::string_view where,
                                bool key_required = false);
};

// A coordinator URL as a front may dial it: "http://host:port" and nothing else — no path, query,
// userinfo, spaces or control characters, a port in 1..65535 (https is refused: the front cannot
// dial TLS). Returns it normalized (host lower-cased, a trailing '/' dropped) so that allow-list
// entries compare as strings; throws Error(kInvalidArgument) starting with `where` (the field or
// flag) and saying what is wrong.
std::string normalized_coordinator_url(std::string_view url, std::string_view where);
// Ids a client chooses: a client_uuid, episode_uuid or group_id longer than this is refused (400
// naming the field), and so is a task_id longer than kMaxTaskIdBytes. They are copied into logs,
// the store, the pool information and error texts, so an unbounded one is memory a request can pin.
inline constexpr size_t kMaxIdBytes = 256;
inline constexpr size_t kMaxTaskIdBytes = 4096;
inline constexpr double kMaxPrepareTimeout = 86400.0;

// POST /prepare_end_episode: the end_episode body plus `group`.
struct PrepareRequest {
  EndRequest end;
  EpisodeGroup group;
  // A local participant whose group.coordinator_episode_key the front verified as the coordinator
  // episode's: its coordinator may then be another client's episode (one agent with two clients).
  bool coordinator_key_verified = false;
  static PrepareRequest from_json(const Json& body,
                                  size_t max_field_bytes = kDefaultMaxEpisodeMetadataBytes);
};

// The answer of a successful prepare.
struct PrepareResponse {
  std::string episode_uuid;
  int64_t global_step_at_claim = 0;
  int64_t global_step = 0;
  std::optional<int64_t> oldest_policy_version;
  bool weights_changed() const { return global_step != global_step_at_claim; }
  Json to_json() const;
};

// POST /resolve_episode_group (asked of the coordinator).
struct ResolveRequest {
  std::string group_id;
  std::string episode_uuid;
  static ResolveRequest from_json(const Json& body);
};

inline constexpr std::string_view kUnspecifiedAbortCause = "unspecified";
inline constexpr size_t kMaxAbortCauseBytes = 48;

// POST /abort_episode (same body as end_episode; the ids and declare_client_active matter).
struct AbortRequest {
  std::string client_uuid;
  std::string episode_uuid;
  // As upstream: a client aborting one of its train episodes becomes active (agree-based triggers
  // count it), unless it says false.
  bool declare_client_active = true;
  // Why the client gave up (ext): [a-z0-9_]{1,48}, e.g. "verifier_timeout"; counted by cause in
  // /metrics (ajet_episodes_aborted_total). Absent: "unspecified".
  std::string cause = std::string(kUnspecifiedAbortCause);
  static AbortRequest from_json(const Json& body);
};

// POST /can_continue_episode.
struct EpisodeRef {
  std::string client_uuid;
  std::string episode_uuid;
  // `command` names the body in errors; commit_episode requires client_uuid.
  static EpisodeRef from_json(const Json& body, std::string_view command = "can_continue_episode",
                              bool client_required = false);
};

// POST /agree_sync_weight.
struct AgreeRequest {
  std::string client_uuid;
  static AgreeRequest from_json(const Json& body);
};

// {"success", "failure_reason"} (upstream BoolResponse).
struct BoolResponse {
  bool success = false;
  std::string failure_reason;
  Json to_json() const { return Json{{"success", success}, {"failure_reason", failure_reason}}; }
};

}  // namespace ajet::episodes
