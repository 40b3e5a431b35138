// The rows the store keeps: episodes, LLM calls, batches, metrics, and what a restart recovers.
// Plain data only; the SQL lives in store.cc / store_read.cc.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/json.h"

namespace ajet::store {

// Episode statuses on disk. Registered (unclaimed) episodes are never stored: they are empty slots.
inline constexpr const char* kEpisodeClaimed = "claimed";
inline constexpr const char* kEpisodeFinished = "finished";  // ended with a reward; calls kept
inline constexpr const char* kEpisodePrepared =
    "prepared";  // episode groups: ended, waiting for commit
inline constexpr const char* kEpisodeAborted = "aborted";  // calls deleted
inline constexpr const char* kEpisodeReclaimed =
    "reclaimed";  // idle past its timeout; calls deleted
inline constexpr const char* kEpisodeDropped =
    "dropped";  // in flight at stop / batch boundary; calls deleted

// Batch statuses: taken (handed to the trainer), trained, recorded (debug backbone), abandoned
// (stop).
inline constexpr const char* kBatchTaken = "taken";
inline constexpr const char* kBatchTrained = "trained";
inline constexpr const char* kBatchRecorded = "recorded";
inline constexpr const char* kBatchAbandoned = "abandoned";
// Trained, but the engine restarted from a checkpoint older than that step: the weights lost it,
// and its episodes are collected again (Store::rollback_after, Registry::engine_ready).
inline constexpr const char* kBatchRolledBack = "rolled_back";

// Keys of the server-state table.
inline constexpr const char* kStateEpisodeKeySecret = "episode_key_secret";
inline constexpr const char* kStateTrainConfigYaml = "train_config_yaml";
inline constexpr const char* kStateGlobalStep = "global_step";
inline constexpr const char* kStateEngineStatus = "engine_status";
inline constexpr const char* kStateRegistrySnapshot = "registry_snapshot";
// The first batch id of the run the engine trains (set when start_engine starts a new one): a
// rollback never reaches the batches of an earlier run on the same store.
inline constexpr const char* kStateRunFirstBatch = "run_first_batch";
inline constexpr const char* kStateLatestCheckpoint =
    "latest_checkpoint";  // the engine's newest save_checkpoint

struct EpisodeRow {
  std::string uuid;
  std::string client_uuid;
  std::string episode_type = "train";  // train | eval
  std::string status = kEpisodeClaimed;
  std::string task_id;           // from end_episode
  std::string optional_task_id;  // from the claim's throttle policy
  std::optional<double> reward;
  std::optional<bool> is_success;
  Json metadata = Json::object();
  Json log_metrics = Json::object();
  double discard_episode_timeout = 240.0;  // seconds
  double claimed_at = 0;                   // unix seconds
  std::optional<double> ended_at;
  std::optional<int64_t> batch_id;  // set when the episode's batch is taken
};

// Token span [begin, end) of one chat message inside the rendered prompt.
struct MessageSpan {
  int32_t begin = 0;
  int32_t end = 0;
  bool operator==(const MessageSpan&) const = default;
};

// One LLM call (one completion; a request with n > 1 is n calls with consecutive indices). The
// request and response bodies of such a request are kept once, on its first choice's row: the
// others name that row in `bodies_from` and hold empty bodies (tracking::calls_from_rows resolves
// it).
struct CallRow {
  std::string episode_uuid;
  std::string agent_name;
  int64_t call_index = 0;     // per episode, from 0
  std::string request_json;   // the OpenAI request body as received ("" when bodies_from is set)
  std::string response_json;  // the answer sent, all choices (may be empty for streams; "" when
                              // bodies_from is set)
  // The call_index of the row of the same episode that holds this call's request and response (its
  // request's first choice); nullopt: this row holds its own. Stores before schema version 2:
  // nullopt.
  std::optional<int64_t> bodies_from;
  std::string adapter;  // the LoRA adapter that generated it; "" = the base model (schema 3)
  std::vector<int32_t> prompt_ids;
  std::vector<MessageSpan> message_spans;
  std::vector<int32_t> completion_ids;
  std::vector<float> logprobs;      // per completion token, under the sampling distribution used
  std::vector<float> raw_logprobs;  // per completion token, under the raw model (may be empty)
  std::vector<int32_t> policy_versions;  // per completion token
  std::string finish_reason;
  double latency_ms = 0;
  double started_at = 0;  // unix seconds
  double finished_at = 0;

  // Bytes this row keeps: the bodies and the token arrays (4 bytes per value). What the per-episode
  // stored-bytes limit counts.
  int64_t stored_bytes() const {
    const size_t values = prompt_ids.size() + 2 * message_spans.size() + completion_ids.size() +
                          logprobs.size() + raw_logprobs.size() + policy_versions.size();
    return int64_t(request_json.size() + response_json.size() + 4 * values);
  }
};

struct BatchRow {
  int64_t id = 0;
  int64_t global_step = 0;  // the step this batch trains (or was recorded at)
  double created_at = 0;
  std::string status = kBatchTaken;
  std::optional<double> finished_at;
  Json stats = Json::object();
};

// How much of trained batches' calls the store keeps (Store::retain_calls): every call of the
// newest `full_steps` trained batches, and of each older one the calls of its first
// `sample_episodes` episodes (by end time). The rest's call rows are deleted; episode rows, batch
// rows and their stats stay. full_steps -1 keeps everything. Set by ajet.store_retention
// (config/config.h).
struct CallRetention {
  int64_t full_steps = 5;
  int64_t sample_episodes = 4;
};

// An episode whose calls retention deleted (Store::get_dropped_calls).
struct DroppedCalls {
  int64_t batch_id = 0;
  int64_t calls = 0;   // rows deleted
  int64_t bytes = 0;   // their request, response and token arrays
  std::string policy;  // call_retention_text() of the retention that deleted them
  double at = 0;       // unix seconds
};

struct MetricRow {
  int64_t step = 0;
  std::string name;
  double value = 0;
  double created_at = 0;
};

// One metric's series in the `metrics` table (Store::list_metric_names).
struct MetricSeriesInfo {
  std::string name;
  int64_t points = 0;     // rows
  int64_t last_step = 0;  // the largest step
};

struct RecoveredEpisode {
  EpisodeRow episode;
  std::vector<CallRow> calls;  // by call_index
};

// What a restarted front needs to resume (Store::recover()).
struct RecoveredState {
  bool has_data = false;           // any episode, batch or state row existed
  std::string episode_key_secret;  // empty: none yet
  std::string train_config_yaml;   // empty: none synced
  int64_t global_step = 0;
  std::string engine_status;  // at the last write ("" if never written)
  Json registry_snapshot = nullptr;
  int64_t next_batch_id = 1;
  // Finished train episodes not in a trained/recorded/abandoned batch, oldest first: the current
  // batch.
  std::vector<EpisodeRow> pending_finished;
  std::vector<RecoveredEpisode>
      claimed;  // in flight (claimed or prepared) at the crash, with their calls
};

}  // namespace ajet::store
