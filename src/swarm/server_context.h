// What every route of the swarm front shares: the parts (store, registry, supervisor, trackers …)
// and the synced training state (config YAML, synced code, the loaded model context), plus the
// engine life-cycle operations the command API and a restarted front both use. Routes stay thin:
// they parse HTTP and call these. Every operation that may block (disk, processes) is marked and
// must run on the WorkPool, never on an HTTP I/O thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "config/config.h"
#include "engine_control/batch_runner.h"
#include "engine_control/admission.h"
#include "engine_control/code_archive.h"
#include "engine_control/replica_router.h"
#include "episodes/model_context.h"
#include "http/message.h"
#include "openai/call_metrics.h"

namespace ajet::store {
class Store;
struct RecoveredState;
}  // namespace ajet::store

namespace ajet::episodes {
class Registry;
class VerboseLog;
class TrackerMap;
struct RegistryOptions;
}  // namespace ajet::episodes

namespace ajet::engine_control {
class EngineSupervisor;
class BatchRunner;
}  // namespace ajet::engine_control

namespace ajet::openai {
class LatestCall;
}

namespace ajet::swarm {

class WorkPool;

// What a front does when its store already holds an earlier run (a synced config, a global step,
// episodes): continue it (a restart after a crash), move it aside and start empty (a new experiment
// in the same directory), or refuse to start and say which of the two to choose.
enum class OldStoreRule { kRefuse, kResume, kFresh };

struct FrontOptions {
  std::string host = "127.0.0.1";
  uint16_t port = 10086;    // 0: an ephemeral port (printed in the ready line)
  std::string admin_token;  // empty: no admin token (anyone who can reach the port is trusted)
  // --inference-key: a key for untracked OpenAI/Anthropic calls (a teacher or judge for other
  // runs): served by the current policy, recorded in no episode, never trained on. Empty: none.
  std::string inference_key;
  // --teacher-url: the teachers (ajet.distillation.base_url) a synced config may name; no other
  // address is ever dialed for distillation.
  std::vector<std::string> teacher_urls;
  std::filesystem::path server_dir = "ajet_swarm";  // --exp-dir: store, experiments, synced code
  std::filesystem::path store_path;                 // empty: <server_dir>/swarm.sqlite
  std::filesystem::path conf;  // --conf: a train config to sync at start (when OFFLINE)
  OldStoreRule old_store = OldStoreRule::kRefuse;  // --resume / --fresh
  std::filesystem::path engine_binary;             // empty: the ajet-engine next to ajet-swarm
  int io_threads = 2;
  double janitor_interval_s = 5.0;
  size_t max_body_bytes = 64ull << 20;  // any request (sync_train_code archives are the largest)
  size_t max_json_body_bytes = 16ull << 20;  // JSON bodies: commands and OpenAI requests
  // Request-body bytes all requests together may hold while read and until answered (503 beyond).
  size_t max_body_memory_bytes = 512ull << 20;
  size_t max_connections = 0;  // 0: min(RLIMIT_NOFILE - 64, 16384)
  // Bytes of SSE a streamed call may queue for a reader that does not keep up; beyond, it is
  // cancelled.
  size_t max_stream_backlog_bytes = 8ull << 20;
  size_t max_queued_prompts = 256;  // /v1 requests waiting for the prompt pool; beyond: 503
  // What one episode key may make the front keep (0: no limit): its LLM calls (each of n choices
  // counts; recorded + in flight), and the bytes its calls store (request and response bodies,
  // token arrays). A call over either is refused (413) before anything is generated.
  int64_t max_episode_calls = 1024;        // --max-episode-calls
  size_t max_episode_bytes = 64ull << 20;  // --max-episode-mb
  // One OpenAI request's n × max_tokens × (1 + top_logprobs) (400 above; 0: no limit).
  int64_t max_request_token_entries = int64_t(1) << 19;  // --max-request-token-entries
  engine_control::ArchiveLimits archive_limits;
  double engine_boot_timeout_s = 600;
  // Engine processes on this machine (--engine-ranks): data-parallel ranks that each train their
  // share of every batch and each serve inference (engine_control/replica_router.h).
  int engine_ranks = 1;
  // Engine replicas on other hosts (--engine-at, repeated; engine_control/remote_group.h): the
  // front starts no engine; it forms these into one group. Their token: --engine-token-file, else
  // AJET_ENGINE_TOKEN.
  std::vector<std::string> engine_at;
  // Trainer ranks apart from inference (--trainer-at, repeated): with them the --engine-at engines
  // only serve, and after every step the trainers' weights are pushed to them.
  std::vector<std::string> trainer_at;
  std::string engine_token_file;
  double engine_group_timeout_s = 120;
  // Which rank serves a call (--route): an episode's calls stay on one replica (sticky, the
  // default), round_robin, or first (rank 0 serves every call).
  engine_control::RoutePolicy route = engine_control::RoutePolicy::kSticky;
  // --admission: cap claimed episodes by the engines' KV-cache pressure (kv, the default) or only
  // by the pool size ajet.rollout.max_env_worker (fixed). engine_control/admission.h.
  bool kv_admission = true;
  double engine_stop_grace_s = 10;

  // ---- episodes (docs/protocol.md "Command API") ----
  // --peer: the fronts this one may dial as an episode group's coordinator ("http://host:port",
  // normalized by normalized_coordinator_url). A prepare naming any other coordinator needs the
  // admin token; with no admin token configured, only peers are accepted.
  std::vector<std::string> peers;
  // --allow-keyless-episode-commands: end/abort/prepare/commit/resolve without the episode's key
  // (upstream clients send none). Off: they need the key or the admin token.
  bool allow_keyless_episode_commands = false;
  double max_discard_episode_timeout_s = 3600;  // --max-discard-episode-timeout
  int64_t max_claims_per_client =
      0;  // --max-claims-per-client: 0 = half of max_env_worker, -1 = no bound
  size_t max_episode_metadata_bytes =
      1u << 20;  // --max-episode-metadata-mb: end's metadata, log_metrics each
  double group_resolve_give_up_s = 3600;  // --group-resolve-give-up: past the prepare deadline
};

// Error(kInvalidArgument) when `config` names a distillation teacher (ajet.distillation.base_url)
// that is not among `teacher_urls` (ajet-swarm start --teacher-url).
void check_teacher_allowed(const std::vector<std::string>& teacher_urls,
                           const config::Config& config);

// The registry's settings from the train config plus those the front's flags decide (claim share,
// timeout bound, coordinator re-asking).
episodes::RegistryOptions registry_options_for(const FrontOptions& front,
                                               const config::Config* config, std::string base_url);

// The state sync_train_config / sync_train_code / start_engine leave behind.
struct TrainState {
  std::string yaml;
  std::optional<config::Config> config;
  std::vector<std::string> warnings;
  std::filesystem::path code_root;                      // synced source tree (empty: none)
  std::filesystem::path code_build;                     // its build directory
  std::filesystem::path experiment_dir;                 // resolved at start_engine (empty before)
  std::shared_ptr<const episodes::ModelContext> model;  // loaded at start_engine
  // Names the engine start_engine started last (random; kept when the front or the engine restarts
  // it): stop_engine {"engine_run": ...} stops only that one. Empty before the first start.
  std::string engine_run;
};

// The synced training state, shared by the life-cycle operations (which write it) and the batch
// runner (which reads the model and the checkpoint settings). Thread-safe.
class SyncedTrain {
 public:
  TrainState get() const;
  // save_freq and the checkpoint directory of the synced config (relative checkpoint_base_dir:
  // under the experiment directory, so the engine's working directory does not matter).
  engine_control::TrainSettings settings() const;
  std::shared_ptr<const episodes::ModelContext> model() const;
  // Applies `change` under the lock.
  void update(const std::function<void(TrainState&)>& change);

 private:
  mutable std::mutex mu_;
  TrainState state_;
};

// Complete when constructed: every part exists before the routes that use it.
class ServerContext {
 public:
  ServerContext(const FrontOptions& options, std::string base_url, store::Store& store,
                episodes::Registry& registry, episodes::VerboseLog& verbose, WorkPool& pool,
                engine_control::EngineSupervisor& supervisor, episodes::TrackerMap& trackers,
                openai::LatestCall& latest, SyncedTrain& synced,
                engine_control::BatchRunner& batches);

  const FrontOptions& options;
  store::Store& store;
  episodes::Registry& registry;
  episodes::VerboseLog& verbose;
  WorkPool& pool;
  engine_control::EngineSupervisor& supervisor;
  episodes::TrackerMap& trackers;
  openai::LatestCall& latest;
  SyncedTrain& synced;
  engine_control::BatchRunner& batches;
  const std::string base_url;        // "http://HOST:PORT/v1" (claim_episode's openai_base_url)
  openai::CallMetrics call_metrics;  // LLM call totals for GET /metrics (every LlmCall feeds them)
  engine_control::ReplicaRouter router;  // which engine rank serves each call
  // The KV-pressure admission loop (null with --admission fixed); set before serving.
  std::atomic<engine_control::AdmissionLoop*> admission{nullptr};

  TrainState train() const { return synced.get(); }
  // The running engine's name (TrainState::engine_run): "" while OFFLINE.
  std::string running_engine_run() const;
  // Whether the engine `engine_run` names has been replaced: another start's engine runs now. An
  // empty name, the running engine's own, or an OFFLINE front: false.
  bool engine_replaced(const std::string& engine_run) const;
  std::shared_ptr<const episodes::ModelContext> model() const { return synced.model(); }

  // ---- named LoRA adapters on the engine (docs/protocol.md "Adapters") ----
  // The adapters the engine served at the last /adapters call (thread-safe); what a bare adapter
  // name in a call's "model" resolves against.
  std::vector<std::string> adapter_names() const;
  void set_adapter_names(std::vector<std::string> names);
  // The adapter a call's "model" names: "<served name>:<adapter>", or an adapter's bare name;
  // anything else is the base model (""). A "<served name>:<x>" whose x is not a valid adapter
  // name is refused (kInvalidArgument), one the engine does not serve kNotFound.
  std::string adapter_of_model(const std::string& model_field,
                               const std::string& served_name) const;
  // What made each adapter (its POST /adapters body), so that an engine the supervisor restarts
  // gets them again: each from its newest checkpoint (<checkpoint dir>/adapters_step_N/<name>/)
  // when there is one, else as first made. stop_engine forgets them. The store keeps them, so a
  // front resumed from it (ajet-swarm start --resume) makes them again too.
  void remember_adapter(const std::string& name, Json create_body);
  void forget_adapter(const std::string& name);
  // Creates the front's named adapters on a (re)started engine, each from its newest checkpoint;
  // returns whether there were any (their training is not counted by the policy version).
  bool restore_adapters(rpc::Client& engine);

  // True when the request may use an admin endpoint (no token configured, or the right Bearer
  // token).
  bool admin_ok(const http::RequestHead& request) const;
  // `key` (an Authorization or x-api-key value) is the --inference-key (false when none is set).
  bool inference_key_ok(std::optional<std::string_view> key) const;
  // True only when an admin token is configured and the request carries it (what unlocks other
  // clients' episodes, every id in the public views, and a coordinator outside --peer).
  bool admin_token_given(const http::RequestHead& request) const;
  // Whether `coordinator_url` (normalized) is one of --peer.
  bool is_peer(const std::string& coordinator_url) const;

  // ---- engine life cycle (block: run on the WorkPool) ----
  // Validates and stores the YAML (only in OFFLINE); returns the warnings (unknown keys). Throws
  // Error naming the bad key. `source` names the text in messages: the file it was read from when
  // known (`ajet-swarm start --conf`, a client's `source`), else "sync_train_config
  // yaml_as_string".
  // Error(kInvalidArgument) when the config names a distillation teacher not in --teacher-url.
  void check_teacher_allowed(const config::Config& config) const;
  std::vector<std::string> sync_train_config(const std::string& yaml,
                                             const std::string& source = "");
  // Unpacks a zip of a source tree for the next start_engine (only in OFFLINE).
  engine_control::UnpackedTree sync_train_code(std::string_view archive);
  // OFFLINE → BOOTING with the synced config; returns the engine pid (0 while synced code builds).
  // The engine loads ajet.model.path, or with `from_checkpoint` the newest checkpoint the store
  // names (weights, optimizer, step: continuing a stopped run; the model when there is none).
  int64_t start_engine(const std::string& reason, bool from_checkpoint = false);
  // → OFFLINE; drops live episodes, terminates the engine. With `engine_run` set, only while the
  // engine is that start's (TrainState::engine_run): another client's engine is refused
  // (kFailedPrecondition) and left running; an OFFLINE engine is nothing to stop either way.
  void stop_engine(const std::string& reason, const std::string& engine_run = "");
  // After a front restart: the synced state from the store, the registry restored, and the engine
  // started again when the store says it was running. Call before serving.
  void resume(const store::RecoveredState& recovered);

 private:
  void require_offline(const char* what) const;
  int64_t start_engine_locked(const std::string& reason, const store::RecoveredState* resumed,
                              bool from_checkpoint = false);

  std::mutex lifecycle_mu_;  // one sync/start/stop at a time
  mutable std::mutex adapters_mu_;
  std::vector<std::string> adapter_names_;
  std::vector<std::pair<std::string, Json>> adapter_specs_;  // creation order; in the store too
  void persist_adapter_specs_locked();                       // under adapters_mu_
};

}  // namespace ajet::swarm
