// SwarmClient: the swarm command API (docs/protocol.md "Command API") for C++ agents and the
// classic-mode launcher, with the same verbs and self-healing rules as the Python client: claims
// wait while the engine is not rolling or the pool is empty, an episode older than 8 x its discard
// timeout is aborted instead of ended, the WEIGHT_SYNCING race at a batch boundary is logged and
// dropped, an unreachable server reads as ENGINE.CANNOT_CONNECT. Thread-safe: share one client
// between threads (connections are pooled). It never retries a refused command, only connection
// failures of idempotent ones.
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "client/connection_pool.h"
#include "client/swarm_types.h"
#include "client/throttle.h"
#include "common/json.h"

namespace ajet::client {

// The admin token for the server at `server_url`: its entry in $AJET_ADMIN_TOKENS ("URL=TOKEN"
// pairs separated by commas or whitespace, for servers with tokens of their own), else
// $AJET_ADMIN_TOKEN, else "". URLs compare without trailing slashes. A malformed entry throws
// Error(kInvalidArgument) naming it (never the token).
std::string admin_token_for(const std::string& server_url);

struct SwarmClientOptions {
  std::string
      admin_token;  // sent to the commands that change the server; default admin_token_for(url)
  std::string client_uuid;                    // default: a fresh uuid
  std::chrono::milliseconds timeout{30'000};  // each socket wait of a command
  std::chrono::milliseconds connect_timeout{5'000};
  RetryPolicy retry;
  bool verbose = false;  // log claims and ends at info level (debug otherwise)
};

class SwarmClient {
 public:
  // `server_url`: the address this machine dials ("http://10.0.0.5:10086"); episode base URLs are
  // rewritten to it. Throws SwarmError(kCommand) for a malformed URL.
  explicit SwarmClient(std::string server_url, SwarmClientOptions options = {});

  // Claims an episode, waiting while the engine is not ROLLING or the pool is empty (up to
  // options.max_wait: SwarmError kTimeout). kOffline when the engine goes OFFLINE during the wait
  // after having been seen in another status.
  Episode begin_episode(const ClaimOptions& options = {});
  // Reports the result; `task_id` defines the GRPO group. Refusals other than the WEIGHT_SYNCING
  // race throw SwarmError(kCommand) with the server's message and status.
  EndResult end_episode(const std::string& task_id, const std::string& episode_uuid,
                        const WorkflowOutput& output);
  // Never throws; true when confirmed. `cause` ([a-z0-9_]{1,48}, e.g. "judge_failed"): why, counted
  // by the front's /metrics (ajet_episodes_aborted_total{cause}); "" sends none.
  bool abort_episode(const std::string& episode_uuid, const std::string& cause = "");
  // Episode groups (several servers, docs/protocol.md): the first phase of an end, then the commit.
  // Refusals throw SwarmError(kCommand); connection errors are retried (both are idempotent).
  // Every episode command sends the key this client's claim got (the front refuses one without it).
  // A participant's `role` carries the coordinator episode's key (MultiEpisode fills it in).
  Prepared prepare_end_episode(const std::string& task_id, const std::string& episode_uuid,
                               const WorkflowOutput& output, const GroupRole& role);
  void commit_episode(const std::string& episode_uuid);
  bool can_continue_episode(const std::string& episode_uuid);  // false on any error
  Json get_episode_buffer();

  EngineStatus get_engine_status();  // never throws: kCannotConnect when unreachable
  int64_t get_global_step();  // the policy version the server serves; SwarmError when unreachable
  // `source`: the file `yaml` is the verbatim text of, named in the server's warnings and errors
  // (leave it empty for generated text: its line numbers are no file's).
  Json sync_train_config(const std::string& yaml, const std::string& source = "");
  Json sync_train_code(const std::string& zip_archive);
  // from_checkpoint: the engine continues from the newest checkpoint the front knows (a stopped
  // run). The answer's "engine_run" names the engine this call started.
  Json start_engine(bool wait = true, std::optional<double> max_wait = std::nullopt,
                    bool from_checkpoint = false);
  // Claims from now on name this engine (start_engine's "engine_run"): once another client's
  // start_engine has replaced it, begin_episode throws SwarmError kOffline instead of claiming from
  // the new engine, and so it does when it finds the front OFFLINE (the engine was stopped or gave
  // up). "" (the default): any engine, and OFFLINE is waited out until some engine starts.
  void follow_engine_run(const std::string& engine_run);
  std::string followed_engine_run() const;
  // engine_run (start_engine's answer, or get_engine_status' "engine_run"): stop only that engine;
  // when another start_engine replaced it since, the front refuses (SwarmError, HTTP 400) and
  // leaves the running one alone. Empty: whatever runs.
  void stop_engine(bool wait = true, std::optional<double> max_wait = std::nullopt,
                   const std::string& engine_run = "");
  // Idempotent (upstream semantics): OFFLINE → sync + start + wait for ROLLING;
  // ROLLING/ROLLING_POST → nothing; BOOTING/WEIGHT_SYNCING/WEIGHT_EXPORTING → wait; unreachable →
  // one retry, then kConnection. Returns the status found first.
  std::string auto_sync_train_config_and_start_engine(
      const std::string& yaml, bool force_restart = false,
      std::optional<double> max_wait = std::nullopt);
  // Multi-model training (upstream's async_and_start_multi_engine): the call above for every
  // (client, config YAML) pair at once, one thread each. Returns the status each found, in order;
  // when any failed, throws one SwarmError naming every server that failed and why.
  static std::vector<std::string> start_multi_engine(
      const std::vector<std::pair<SwarmClient*, std::string>>& pairs, bool force_restart = false,
      std::optional<double> max_wait = std::nullopt);
  // Polls until `desired`; kOffline when the engine is OFFLINE after it was started (`started`) or
  // seen in another status; kTimeout after max_wait.
  EngineStatus wait_for_status(const std::string& desired,
                               std::optional<double> max_wait = std::nullopt, bool started = false);

  Json get_rollout_stat();  // pool info; {} when unreachable
  // Retries every retry.agree_sync_weight seconds until accepted when `retry` (or max_wait passes).
  // `wait`: once accepted, also waits for the batch boundary — ROLLING_POST or a weight update
  // showing, or global_step (or the debug backbone's recorded batches) moving — so this client's
  // next episodes cannot leak into the batch it agreed to close (cocktail training's per-client
  // shares).
  bool agree_sync_weight(bool retry = true, std::optional<double> max_wait = std::nullopt,
                         bool wait = false);
  Json get_verbose_logs();
  // GET /episodes/{uuid} (admin token): the stored episode document (docs/tracking.md).
  Json get_episode(const std::string& episode_uuid);
  // GET /get_server_experiment_dir: the experiment directory of the front's newest engine start (""
  // before any). Throws SwarmError when unreachable.
  std::string get_server_experiment_dir();
  // POST /log_metrics (admin token): name -> number at `step` into the server's metrics table and
  // its TensorBoard file. Throws SwarmError(kCommand) with the server's 400 message for bad
  // names/values.
  Json log_metrics(int64_t step, const Json& metrics);
  // GET /metrics_history (admin token): with no names, the index {"names": [{name, points,
  // last_step}], "global_step"}; with names (at most 32), {"series": {name: [[step, value,
  // unix_time], ...]}} after `after_step`.
  Json get_metrics_history(const std::vector<std::string>& names = {}, int64_t after_step = -1);
  // POST /ledger/draw (admin token): records the tasks drawn for `step` in the task ledger,
  // {"draws": [{"task_id", "source", "seq", "repeat_in_step"?}]}; answers once committed.
  Json ledger_draw(int64_t step, const Json& draws);
  // GET /ledger (admin token): {"global_step", "summary": {...}} and with `rows` every row.
  Json get_ledger(bool rows);
  // The named LoRA adapters of the front's engine (admin token; docs/protocol.md "Adapters"):
  // GET /adapters; POST /adapters with {name, rank?, alpha?, dropout?, target_modules?, seed?} or
  // {name, path}; POST /adapters/save with {name, dir, merged?}. Throw SwarmError(kCommand) with
  // the front's message for a refusal.
  Json list_adapters();
  Json create_adapter(const Json& body);
  Json save_adapter(const Json& body);

  std::string rewrite_base_url(const std::string& base_url) const;
  const std::string& server_url() const { return server_url_; }
  const std::string& client_uuid() const { return client_uuid_; }

 private:
  http::ClientResponse send(const std::string& method, const std::string& path, const Json* body,
                            bool admin,
                            std::optional<std::chrono::milliseconds> timeout = std::nullopt,
                            const http::Headers& extra = {});
  http::ClientResponse post_retrying(const std::string& path, const Json& body, int attempts,
                                     const http::Headers& headers = {});
  // `Authorization: Bearer <the episode's key>` for an episode command; for an episode this client
  // did not claim, the admin token if it has one, else nothing (the front then asks for the key).
  http::Headers episode_auth(const std::string& episode_uuid) const;
  void forget_key(const std::string& episode_uuid);
  Json json_or_throw(const http::ClientResponse& r, const std::string& what) const;
  std::variant<Episode, std::string> claim_once(const ClaimOptions& options);
  void sleep_within(double seconds,
                    const std::optional<std::chrono::steady_clock::time_point>& deadline,
                    const std::string& what) const;
  void note(const std::string& message) const;

  std::string server_url_;
  SwarmClientOptions options_;
  std::string client_uuid_;
  ConnectionPool commands_;       // timeout = options.timeout
  ConnectionPool long_commands_;  // start/stop/sync_train_code: up to 600 s
  mutable std::mutex mu_;         // guards expire_at_, keys_, recent_ and engine_run_
  std::mutex claim_mu_;           // serialises claims under a throttle policy
  std::map<std::string, std::chrono::steady_clock::time_point> expire_at_;
  // The key of each episode this client claimed (the episode commands need it), until it ends.
  std::map<std::string, std::string> keys_;
  RecentTasks recent_;
  std::string engine_run_;  // follow_engine_run
};

}  // namespace ajet::client
