// The episode registry: the front's single owner of swarm state — engine status, the pool of
// claimable episodes, claimed episodes, the batch being collected, active clients. Every command of
// docs/protocol.md maps onto one method whose result is the response body (or an ajet::Error whose
// code maps to the HTTP status through episodes::http_status_for). No HTTP, no engine RPC, no
// sleeping here.
//
// Threads: every method is thread-safe (one mutex) and quick; none blocks on disk except the two
// marked "blocks" (never call those from an I/O thread). Hooks run outside the mutex.
//
// Who calls what:
//   routes (HTTP I/O threads): claim_episode, end_episode (async), abort_episode,
//   can_continue_episode,
//     episode_buffer, pool_info, agree_sync_weight, engine_status_json; for /v1/*:
//     signer().verify(), begin_llm_call() before generating, record_llm_call() after.
//   supervisor / app: configure, restore, start_booting, engine_ready, engine_restarting, stop,
//     set_status_detail, begin_weight_export / end_weight_export.
//   trainer driver thread (torch/async): wait_batch_ready → take_batch → train → finish_batch.
//   janitor thread: sweep() every few seconds (janitor.h).
// The debug backbone needs no trainer: a full batch is recorded and ROLLING resumes by itself.
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "common/json.h"
#include "episodes/batch_trigger.h"
#include "episodes/commands.h"
#include "episodes/engine_state.h"
#include "episodes/episode_key.h"
#include "store/records.h"

namespace ajet::config {
struct Config;
}
namespace ajet::store {
class Store;
}

namespace ajet::episodes {

using UnixClock = std::function<double()>;  // unix seconds (tests pass a fake one)
double system_clock_seconds();

inline constexpr double kClientActiveTimeout = 600.0;  // upstream CLIENT_ACTIVE_TIMEOUT
inline constexpr size_t kMaxAbortCauses =
    32;  // distinct abort causes counted; the rest are "other"
inline constexpr size_t kRetiredEpisodesKept =
    20000;  // ended episodes remembered for precise errors

struct RegistryOptions {
  Backbone backbone = Backbone::kTorch;
  SampleCollection sample_collection = SampleCollection::kEnoughTasks;
  int64_t train_batch_size = 32;
  int64_t num_repeat = 4;
  int64_t max_env_worker = 64;         // pool size: registered + claimed episodes while ROLLING
  int64_t max_cached_episodes = 9999;  // warn (80 %, 100 %) when a batch holds this many
  // ROLLING_POST waits only for train episodes that are alive: a call in flight, an end in
  // progress, or a sign of life from the client within drain_idle_grace seconds (a client between
  // two calls); and for at most drain_timeout seconds. Episodes it does not wait for carry into the
  // next batch (still claimed, nothing lost), so a dead client's claim never holds the swarm at a
  // batch boundary.
  double drain_timeout = 600.0;
  double drain_idle_grace = 0.5;
  // With an agree-based trigger the boundary (ROLLING_POST) stays visible this long on every
  // backbone (async too, which otherwise never leaves ROLLING): clients that agreed poll for it.
  double agree_boundary_dwell = 2.0;
  int64_t max_staleness = 1;  // async: claims pause while more batches than this await training
  store::CallRetention call_retention;  // applied to the store after each trained batch
  double client_active_timeout = kClientActiveTimeout;
  std::string openai_base_url = "http://127.0.0.1:10086/v1";  // returned by claim_episode
  std::string training_model_path;                            // shown in pool info

  // ---- set by the front from its flags (ajet-swarm start), not by the train config ----
  // Live claimed episodes (claimed, ending or prepared) one client_uuid may hold at once, so one
  // client cannot take the whole pool: 0 = half of max_env_worker (at least 1), < 0 = no bound
  // (--max-claims-per-client). At the bound a claim answers success=false, as an empty pool does.
  int64_t max_claims_per_client = -1;
  // claim_episode refuses a larger discard_episode_timeout with 400
  // (--max-discard-episode-timeout): an idle claim must expire.
  double max_discard_episode_timeout = 3600.0;
  // A participant's question to its coordinator that brought no decision is asked again after
  // resolve_backoff_min seconds, doubling up to resolve_backoff_max; resolve_give_up seconds past
  // its prepare deadline the participant aborts the prepared episode (logged as an error).
  double resolve_backoff_min = 5.0;
  double resolve_backoff_max = 300.0;
  double resolve_give_up = 3600.0;

  static RegistryOptions from_config(const config::Config& config, std::string openai_base_url);
};

// Why an episode stopped being live (for hooks and error messages).
enum class EpisodeEnd { kFinished, kAborted, kReclaimed, kDropped };
std::string_view episode_end_name(EpisodeEnd end);

struct EpisodeClosed {
  std::string episode_uuid;
  std::string episode_type;  // train | eval
  EpisodeEnd how;
};

struct RegistryHooks {
  // An episode ended, was aborted, reclaimed or dropped: drop its tracker state (finished: its
  // calls are committed in the store). May run on any thread, including the store's writer thread.
  std::function<void(const EpisodeClosed&)> on_episode_closed;
  // One line for /get_verbose_logs (tag, message).
  std::function<void(const std::string&, const std::string&)> on_verbose_log;
  // A batch's numbers were queued for the store's `metrics` table (step, name -> value, unix time):
  // for other sinks (TensorBoard). Must not block.
  std::function<void(int64_t, const std::vector<std::pair<std::string, double>>&, double)>
      on_metrics = nullptr;
  // Runs a task that reads the store (end_episode or commit_episode of an episode only the store
  // knows) where blocking is fine: the front's work pool. Unset: inline.
  std::function<void(std::function<void()>)> run_blocking = nullptr;
};

// Who reads a public view (pool information, episode buffer): the admin sees every id; anyone else
// sees the episode and client ids of `client_uuid` (the caller's own, when it names itself) and a
// stable pseudonym ("client-…", "episode-…") for everyone else's, so a stranger cannot learn whose
// episodes to target. Counts are the same for everyone.
struct ViewScope {
  bool all_ids = false;
  std::string client_uuid;
};

// Returned by begin_llm_call: what the route needs to serve one chat call.
struct LlmCallTicket {
  std::string episode_uuid;
  std::string episode_type;  // train: the server's sampling settings win; eval: the request's
  std::string client_uuid;
  int64_t call_index = 0;  // use as CallRow::call_index (n > 1: begin_llm_calls)
};

// What one OpenAI request asks of its episode (begin_llm_calls): `calls` choices, and a request
// body of `request_bytes` to store; and the front's per-episode limits, checked against what the
// episode has recorded (and has in flight) before anything is generated. 0: no limit.
struct CallReservation {
  int64_t calls = 1;          // the request's n
  int64_t request_bytes = 0;  // its body, stored once
  int64_t max_calls = 0;  // ajet-swarm --max-episode-calls: recorded + in flight + this request's
  int64_t max_bytes =
      0;  // ajet-swarm --max-episode-mb: stored bytes (store::CallRow::stored_bytes) + this body
};

class Registry;

// Ends the calls it holds (Registry::end_llm_call) when the last owner lets go, on any path.
class CallInFlight {
 public:
  CallInFlight(Registry& registry, std::string episode_uuid)
      : registry_(registry), uuid_(std::move(episode_uuid)) {}
  ~CallInFlight();
  CallInFlight(const CallInFlight&) = delete;
  CallInFlight& operator=(const CallInFlight&) = delete;
  // After each successful begin_llm_call, with the ticket's call_index (-1: not known).
  void add(int64_t call_index = -1) { call_indices_.push_back(call_index); }

 private:
  Registry& registry_;
  std::string uuid_;
  std::vector<int64_t> call_indices_;
};

struct Batch {
  int64_t batch_id = 0;
  int64_t global_step = 0;  // the step that trains on it
  double created_at = 0;
  // async: the policy version the trainer starts from (set by take_batch; -1 before). An episode's
  // staleness is this minus its oldest token's version; none above ajet.async.max_staleness is
  // trained.
  int64_t policy_version = -1;
  std::vector<FinishedEpisode> episodes;  // train episodes only; calls are in the store
  // Train episodes their clients aborted while this batch was collected, by cause (summary()'s
  // "aborted": the step's rollout/aborted/<cause> metrics).
  std::map<std::string, int64_t> aborted_by_cause;
  // async: episodes take_batch left out for staleness (the task ledger records why).
  std::vector<FinishedEpisode> left_out_stale;
  Json summary() const;  // counts and reward statistics for logs and the store
  // One line for the log: "staleness min 0, mean 0.42, max 1 over 128 episodes (0: 74, 1: 54)"; the
  // per-episode map is in summary() (the store's batch stats), not in the log.
  std::string staleness_text() const;
};

// A participant's prepared episode whose prepare_timeout passed: its janitor asks the coordinator.
struct PendingResolution {
  std::string episode_uuid;
  EpisodeGroup group;
};

struct SweepResult {
  std::vector<std::string> reclaimed;  // idle past discard_episode_timeout; slots back in the pool
  std::vector<std::string> expired_clients;  // inactive for client_active_timeout
  std::vector<std::string>
      group_aborted;  // a coordinator's prepared episode past its prepare_timeout
  std::vector<PendingResolution> to_resolve;  // ask the coordinator, then settle_prepared()
};

// GET /metrics: the registry's figures, read under one lock (Registry::figures()).
struct RegistryFigures {
  EnginePhase engine_status = EnginePhase::kOffline;
  int64_t global_step = 0;
  // Live episodes by state: in the pool unclaimed, claimed, ending (an end, prepare or commit being
  // stored), prepared (waiting for its group's commit or abort).
  int64_t registered = 0;
  int64_t claimed = 0;
  int64_t ending = 0;
  int64_t prepared = 0;
  int64_t llm_calls_in_flight = 0;
  // Claimed episodes that ended since this registry was built, by (episode_end_name, episode_type).
  std::map<std::pair<std::string, std::string>, int64_t> ended;
  // Claimed episodes aborted by their client, by the abort's cause (at most kMaxAbortCauses
  // distinct causes; later ones count as "other").
  std::map<std::string, int64_t> aborted_by_cause;
  // The batch being collected against its trigger's targets (docs/protocol.md "Batch triggers").
  int64_t batch_episodes = 0;
  int64_t batch_episode_target = 0;   // train_batch_size * num_repeat
  int64_t batch_tasks = 0;            // tasks with num_repeat finished episodes
  int64_t batch_non_dummy_tasks = 0;  // of those, tasks whose rewards differ
  int64_t batch_task_target = 0;      // train_batch_size
  bool batch_ready = false;
  int64_t batches_in_training = 0;
  int64_t batches_recorded = 0;  // debug backbone
  int64_t active_clients = 0;
  int64_t agreed_clients = 0;
};

class Registry {
 public:
  // `store` may be null (tests without persistence): then end_episode succeeds without durability.
  // The store, if any, must outlive the registry.
  Registry(RegistryOptions options, EpisodeKeySigner signer, store::Store* store,
           UnixClock clock = system_clock_seconds);
  ~Registry();  // waits for this registry's pending store writes (their callbacks touch it)
  Registry(const Registry&) = delete;
  Registry& operator=(const Registry&) = delete;

  void set_hooks(RegistryHooks hooks);  // before serving
  const EpisodeKeySigner& signer() const { return signer_; }
  RegistryOptions options() const;

  // ---- engine lifecycle (supervisor) ----
  void configure(RegistryOptions options);  // only in OFFLINE (sync_train_config → start_engine)
  // Resumes after a restart: global step, the current batch's finished episodes, claimed episodes
  // (their keys stay valid: same secret). Only in OFFLINE, before start_booting.
  void restore(const store::RecoveredState& recovered);
  // OFFLINE → BOOTING (start_engine). `continues_run`: the engine resumes the run from its newest
  // checkpoint (a restarted front, start_engine from_checkpoint); false: a new run starts here, and
  // the batches trained before it are never rolled back.
  void start_booting(std::string detail = "", bool continues_run = false);
  // BOOTING → ROLLING: fills the pool. `engine_policy_version`: the version the engine reports it
  // serves (after --resume, its checkpoint's); global_step adopts it, so front and engine agree.
  // When the engine continues the run (a crash restart, or continues_run) the batches that trained
  // into later versions are lost from the weights: the store rolls them back (with the task
  // ledger, Store::rollback_after) and they are trained again, each as the batch it was, before any
  // new batch (registry_replay.cc). Blocks on the store then.
  // `roll_back` false: the engine serves trained state its version does not count (named adapters
  // restored from their own checkpoints); the version is adopted, nothing is rolled back.
  void engine_ready(std::string detail = "",
                    std::optional<int64_t> engine_policy_version = std::nullopt,
                    bool roll_back = true);
  // any → BOOTING: a batch the trainer never finished is formed again, as it was, once the engine
  // is ready (after the batches the weights lost).
  void engine_restarting(std::string detail);
  // → OFFLINE from anywhere: drops every live episode (returned), abandons the unfinished batch
  // (finished episodes stay stored, never trained), forgets active clients.
  std::vector<std::string> stop(std::string detail = "");
  void set_status_detail(std::string detail);
  void begin_weight_export();  // WEIGHT_SYNCING → WEIGHT_EXPORTING
  void end_weight_export();    // WEIGHT_EXPORTING → WEIGHT_SYNCING
  EnginePhase engine_status() const;
  int64_t global_step() const;
  // GET /get_engine_status body, with `recent_batches` (below) read under the same lock as
  // global_step. Other clients' ids in recent_batches' client shares are pseudonyms unless `scope`
  // shows them.
  Json engine_status_json(const ViewScope& scope = ViewScope{.all_ids = true}) const;

  // ---- command API (routes) ----
  // Throws Error(kInvalidArgument) for an unknown episode_type. Not ROLLING, async trainer behind,
  // or an empty pool: success=false with a fail_cause saying what to wait for.
  ClaimResponse claim_episode(const ClaimRequest& request);
  // At most `cap` claimed episodes at once (engine_control/admission.h: KV-cache pressure); <= 0:
  // no cap beyond the pool. Episodes already claimed keep running when the cap drops below them.
  void set_admission_cap(int64_t cap);
  // Validates, commits the episode to the store, then calls `done` with nullopt (answer
  // {"success": true}) or the error to answer. `done` runs inline for validation errors and without
  // a store, else on the store's writer thread after the commit: post it back to your executor.
  void end_episode(EndRequest request, std::function<void(std::optional<CommandError>)> done);
  // The same, waiting for the commit; throws Error. Blocks.
  void end_episode_wait(EndRequest request);
  // Always succeeds ({"success": true}). A claimed episode of this client is dropped with its calls
  // and its slot returns to the pool.
  void abort_episode(const AbortRequest& request);
  bool can_continue_episode(const EpisodeRef& request) const;

  // ---- episode groups across servers (docs/protocol.md "Episode groups across servers") ----
  // Validates as end_episode does, stores the episode as prepared, then calls `done` (on the
  // store's writer thread, as end_episode). A prepared episode takes no calls and counts toward
  // nothing.
  using PrepareDone = std::function<void(std::optional<CommandError>, PrepareResponse)>;
  void prepare_end_episode(PrepareRequest request, PrepareDone done);
  // A prepared episode of this client ends as end_episode would have ended it (after the commit).
  void commit_episode(const EpisodeRef& request,
                      std::function<void(std::optional<CommandError>)> done);
  // The coordinator's decision for a participant: "committed", "aborted" (a prepared or claimed
  // episode is aborted now), or "pending" (its prepare or commit is being stored: ask again). May
  // read the store for an episode it no longer remembers. Blocks.
  std::string resolve_group(const ResolveRequest& request);
  // A participant learned its coordinator's decision: "committed" commits, "aborted" aborts;
  // anything else (pending, unreachable) leaves it prepared until the next sweep asks again.
  void settle_prepared(const std::string& episode_uuid, const std::string& decision);
  // {"buffer": [episode status…]} (docs/protocol.md, get_episode_buffer).
  Json episode_buffer(const ViewScope& scope = {true, ""}) const;
  // GET /get_current_batch_rollout_pool_information body.
  Json pool_info(const ViewScope& scope = {true, ""}) const;
  RegistryFigures figures() const;  // GET /metrics (pool_info.cc)
  BoolResponse agree_sync_weight(const AgreeRequest& request);

  // ---- OpenAI API (routes) ----
  // Before generating. Throws Error(kUnavailable) when the engine is not ROLLING/ROLLING_POST (503
  // + Retry-After: retry_after_seconds), Error(kNotFound) for an unknown, unclaimed or ended
  // episode. The call is in flight from here until end_llm_call: an episode with a call in flight
  // is active, and the janitor never reclaims it however long the generation takes (CallInFlight
  // pairs them).
  LlmCallTicket begin_llm_call(const std::string& episode_uuid);
  // The same for a request's `reservation.calls` choices at once (consecutive call indices, one
  // ticket each), after checking the episode's limits: Error(kResourceExhausted) naming the limit
  // and its ajet-swarm flag when the episode's recorded and in-flight calls plus these would pass
  // max_calls, or its stored bytes plus the request body would pass max_bytes.
  std::vector<LlmCallTicket> begin_llm_calls(const std::string& episode_uuid,
                                             const CallReservation& reservation);
  // Once per begin_llm_call, however the call ended (answered, failed, the client hung up): its
  // episode's idle clock starts again now. Unknown or ended episodes are ignored. With the ticket's
  // call_index, a call that was not recorded stops counting against --max-episode-calls.
  void end_llm_call(const std::string& episode_uuid, int64_t call_index = -1);
  // Whether the episode is claimed and not ended: what a route that made per-episode state after
  // begin_llm_call asks, since the episode's close hook may have run before that state existed.
  bool is_live(const std::string& episode_uuid) const;
  // After generating: stores the call (asynchronously) if the episode is still claimed; false when
  // it ended meanwhile (discard the call). Refreshes the episode's activity.
  bool record_llm_call(store::CallRow call);

  // ---- batches (trainer driver) ----
  bool batch_ready() const;
  // When a sweep next has something to do before the janitor's period is up: the moment the drain's
  // last awaited episode passes its idle grace. nullopt: nothing sooner.
  std::optional<std::chrono::milliseconds> next_sweep_due() const;
  // Waits until a batch is ready or the timeout passed; returns false at once while OFFLINE (also
  // when stop() ends the wait), so a driver loop should exit on OFFLINE. Blocks.
  bool wait_batch_ready(std::chrono::milliseconds timeout);
  // Hands over the ready batch (Error(kFailedPrecondition) if none). torch: ROLLING_POST →
  // WEIGHT_SYNCING (train episodes still running carry into the next batch); async: status
  // unchanged. Either way an episode whose staleness would exceed ajet.async.max_staleness (one
  // carried across boundaries, or async's) is left out (logged; its calls stay stored), so no
  // trained sample lags more than that.
  Batch take_batch();
  // The trainer is done: global_step becomes the engine's `policy_version` from `stats` when it has
  // one, else global_step + 1; torch: → ROLLING. Blocks until the step is durable.
  void finish_batch(int64_t batch_id, Json stats);
  // The engine connection was lost while batch `batch_id` trained: it is formed again, as it was,
  // before any new batch once the engine is back (engine_restarting, engine_ready). A batch no
  // longer being trained (engine_restarting queued it already) is left alone.
  void return_batch(int64_t batch_id);
  // The trainer could not train the batch (the engine rejected it, `code` says how): the batch is
  // stored as abandoned, global_step stays; torch: → ROLLING. A batch whose engine died is not
  // failed: return_batch or engine_restarting queue it again. Throws Error(kFailedPrecondition) if
  // the batch is not being trained.
  void fail_batch(int64_t batch_id, ErrorCode code, const std::string& reason);
  // engine_status_json()'s `recent_batches`: what became of the last kRecentBatches batches handed
  // to the trainer, oldest first, so a caller reads a step's trainer statistics or why it was not
  // trained as fields, not from the store or status text: {"batch_id", "global_step" (the step that
  // trains on it), "trained": true, "stats": the trainer's stats with "rollout" (the batch summary
  // without async's per-episode staleness map, which the store keeps)} or {..., "trained": false,
  // "error": {"code": error_code_name(code), "message"}}.
  static constexpr size_t kRecentBatches = 16;
  // Batches handed to the trainer plus the one ready for it (the async staleness bound counts
  // these).
  int64_t batches_behind() const;
  std::optional<Batch> last_recorded_batch() const;  // debug backbone

  // ---- janitor ----
  // Reclaims claimed episodes idle longer than their discard_episode_timeout, expires inactive
  // clients, ends a timed-out ROLLING_POST drain, re-checks the batch trigger.
  SweepResult sweep();

 private:
  // kEnding: an end, prepare or commit is being stored. kPrepared: waits for commit or abort.
  enum class State { kRegistered, kClaimed, kEnding, kPrepared };
  static const char* state_name(State state);
  struct Prepared {
    EpisodeGroup group;
    EndRequest request;      // what commit ends it with
    double deadline = 0;     // unix seconds: the janitor settles it after this
    bool resolving = false;  // a participant's question to its coordinator is in flight
    double next_ask = 0;     // unix seconds: a participant asks (again) from then on
    int asks = 0;            // questions that brought no decision (the backoff doubles with each)
  };
  struct Episode {
    std::string uuid;
    std::string api_key;
    State state = State::kRegistered;
    std::string client_uuid;
    std::string episode_type = "train";
    std::string optional_task_id;
    double claimed_at = 0;
    double latest_activity =
        0;  // the janitor's idle clock (restarted when the engine re-enters ROLLING)
    // The client's own last sign of life (claim, a call beginning or ending, an end); the server
    // never moves it. The batch-boundary drain judges liveness by it: a dead client's episode must
    // not look alive again after every boundary because the idle clock restarted.
    double client_seen = 0;
    // Restored after a restart with its stored last activity: its idle clock keeps running through
    // the restart and the boot (entering ROLLING does not restart it) until the client shows up.
    bool restored_clock = false;
    // A sign of life from the client: both clocks start again.
    void seen(double now) {
      latest_activity = client_seen = now;
      restored_clock = false;
    }
    double discard_episode_timeout = -1;
    int64_t llm_call_count = 0;
    int64_t calls_in_flight = 0;  // begun and not yet ended: the episode is active
    int64_t next_call_index = 0;
    std::vector<int64_t> call_indices;
    int64_t stored_bytes = 0;  // of its recorded calls' rows (store::CallRow::stored_bytes)
    // Begun, and neither recorded nor ended: with call_indices, what counts against max_calls (a
    // recorded call may still be in flight; it counts once).
    std::unordered_set<int64_t> pending_calls;
    int64_t oldest_policy_version = -1;  // of its calls' generated tokens; -1 before any
    int64_t claim_global_step = 0;     // global_step when claimed (prepare reports weights_changed)
    std::optional<Prepared> prepared;  // set from a stored prepare until commit or abort
  };
  // What a finished episode ended with: a repeated end must send the same (else 409).
  struct EndResult {
    double reward = 0;
    std::string task_id;
    std::optional<bool> is_success;
  };
  struct Retired {
    EpisodeEnd how;
    std::string client_uuid;
    std::string episode_type;
    std::string note;                 // why, for error messages
    std::string group_id;             // the episode group it was prepared in ("" for none)
    std::optional<EndResult> result;  // finished episodes
  };
  struct ActiveClient {
    double latest_activity = 0;
    bool agreed = false;
  };
  // Side effects gathered under the mutex and delivered after it is released.
  struct Outbox {
    std::vector<EpisodeClosed> closed;
    std::vector<std::pair<std::string, std::string>> logs;
    bool batch_ready = false;
    struct Metrics {
      int64_t step = 0;
      std::vector<std::pair<std::string, double>> values;
      double at = 0;
    };
    std::vector<Metrics> metrics;  // queued for the store; for hooks_.on_metrics
  };

  // All *_locked helpers need mu_ held.
  void transition_locked(EnginePhase to, double now, std::string detail, Outbox& out);
  void refill_pool_locked();
  void retire_locked(const std::string& uuid, EpisodeEnd how, std::string note, Outbox& out,
                     bool store_it);
  void touch_client_locked(const std::string& client_uuid, double now);
  void expire_clients_locked(double now, std::vector<std::string>* expired);
  TriggerInput trigger_input_locked() const;
  void check_trigger_locked(double now, Outbox& out);
  void note_batch_outcome_locked(Json outcome);  // appends to recent_batches_, keeps kRecentBatches
  void check_drained_locked(double now, Outbox& out);
  void form_ready_batch_locked(double now, Outbox& out);
  void drop_stale_episodes_locked(Batch& batch, Outbox& out);
  void adopt_engine_version_locked(int64_t version, const char* why, Outbox& out);
  void record_debug_batch_locked(double now, Outbox& out);
  // Rolls the store back to `version` and returns the batches to train again (registry_replay.cc).
  // Outside mu_: blocks on the store.
  std::vector<Batch> roll_back_to(int64_t version);
  void queue_replays_locked(std::vector<Batch> batches, Outbox& out);
  bool form_replay_batch_locked(double now, Outbox& out);
  // Every number of a batch's stats into the store's `metrics` table at `step` (batch_metrics.h).
  void put_batch_metrics_locked(int64_t step, const Json& stats, double now, Outbox& out);
  bool claims_paused_locked() const;
  // False while an agree-based boundary must stay visible (RegistryOptions::agree_boundary_dwell).
  bool agree_boundary_shown_locked(double now) const;
  // Until when the ROLLING_POST drain waits for `e` (RegistryOptions::drain_idle_grace): +inf while
  // a call runs or its end commits, its client's last sign of life + the grace otherwise, -inf for
  // an episode it never waits for (not a claimed train episode).
  double drain_waits_until_locked(const Episode& e) const;
  // Train episodes the ROLLING_POST drain waits for now.
  size_t train_alive_locked(double now) const;
  void refresh_activity_locked(double now);
  // `back_to`: the state a failed store write returns the episode to (claimed, or prepared for a
  // commit).
  void end_committed(const std::string& uuid, const EndRequest& request, std::exception_ptr error,
                     const std::function<void(std::optional<CommandError>)>& done,
                     State back_to = State::kClaimed);
  // What a failed store write said; "unknown error" for a non-std exception.
  static std::string store_error_text(std::exception_ptr error);
  // The answer while a write was in flight and the episode was dropped (stop()).
  std::optional<CommandError> no_longer_running_locked(const std::string& uuid) const;
  // The store row of an episode ending with `request` (status finished or prepared); `group`, when
  // given, is recorded in metadata.ajet_group.
  store::EpisodeRow ended_row_locked(const Episode& e, const EndRequest& request, double now,
                                     const char* status, const EpisodeGroup* group = nullptr) const;
  // prepare_end_episode's answer for `e` (a repeat answers the same).
  PrepareResponse prepare_answer_locked(const Episode& e) const;
  // Why a local participant (its coordinator episode on this front) cannot be prepared, if it
  // cannot.
  std::optional<std::string> local_coordinator_problem_locked(const PrepareRequest& request) const;
  // The answer for an episode that is no longer live but remembered: another client's (404), one
  // this client finished (nullopt: a success again; 409 when `repeat`, an end, differs from how it
  // ended) or one that ended otherwise (400 with the reason).
  std::optional<CommandError> retired_answer(const std::string& uuid, const Retired& r,
                                             const std::string& client,
                                             const EndRequest* repeat = nullptr) const;
  // 409 naming each field where a repeated end differs from the stored end; nullopt when identical.
  static std::optional<CommandError> repeat_conflict(const std::string& uuid,
                                                     const EndResult& stored,
                                                     const EndRequest& repeat);
  // A participant's question brought no decision (or could not be asked): ask again later, backing
  // off.
  void schedule_next_ask_locked(Episode& e, double now);
  // Live claimed episodes of `client_uuid`, and the most it may hold
  // (RegistryOptions::max_claims_per_client).
  int64_t claims_of_locked(const std::string& client_uuid) const;
  int64_t claim_share_locked() const;
  int64_t claimed_locked() const;  // live episodes a client holds (claimed, ending, prepared)
  // Stores `row` and runs `then` with the write's outcome (the destructor waits for it).
  void write_then(store::EpisodeRow row, std::function<void(std::exception_ptr)> then);
  void prepare_committed(const std::string& uuid, const PrepareRequest& request,
                         std::exception_ptr error, const PrepareDone& done);
  // kPrepared → kEnding; the commit is stored, then end_committed. `client` "" = any (the janitor).
  void begin_commit_locked(const std::string& uuid, const std::string& client,
                           store::EpisodeRow& row, EndRequest& request);
  void settle_expired_prepared_locked(double now, SweepResult& result, Outbox& out);
  // A stored prepared episode's group and end (restore); nullopt when the row's group is
  // unreadable.
  static std::optional<Prepared> prepared_from_row(const store::EpisodeRow& row, double now);
  // proceed: commit the end; else answer at once (nullopt answer: already ended by this client,
  // which is a success again so a client retrying after a lost response does not fail).
  struct EndVerdict {
    bool proceed = false;
    std::optional<CommandError> answer;
    bool unknown =
        false;  // neither live nor remembered: the store may know it (ended before a restart)
  };
  // The answer for an episode only the store knows: the same as for a remembered one
  // (`compare_result`: `request` is an end whose result must match the stored one; false for a
  // commit).
  std::optional<CommandError> end_of_stored(const EndRequest& request, const store::EpisodeRow& row,
                                            bool compare_result = true) const;
  // Runs `task` through RegistryHooks::run_blocking (inline when unset). Not under mu_.
  void run_blocking(std::function<void()> task);
  EndVerdict end_precheck_locked(const EndRequest& request) const;
  void deliver(Outbox& out);
  Json pool_info_locked(double now, const ViewScope& scope) const;
  // `id` as `scope` may see it: itself, or a stable pseudonym "<kind>-<12 hex>" (ViewScope).
  std::string shown_id(const ViewScope& scope, std::string_view kind, const std::string& id,
                       const std::string& owner) const;
  // Recovered claims: the client's last sign of life before the restart (its claim, its last call).
  static double last_activity_of(const store::RecoveredEpisode& claimed);

  RegistryOptions options_;
  EpisodeKeySigner signer_;
  const std::string view_salt_;  // keys the pseudonyms of shown_id (random per process)
  store::Store* store_;
  UnixClock clock_;
  RegistryHooks hooks_;

  mutable std::mutex mu_;
  int64_t admission_cap_ = 0;  // set_admission_cap (mu_)
  std::condition_variable batch_cv_;
  EngineState engine_;
  std::unordered_map<std::string, Episode> live_;
  std::deque<std::string> unclaimed_;  // FIFO of registered episodes
  std::unordered_map<std::string, Retired> retired_;
  std::map<std::pair<std::string, std::string>, int64_t> ended_counts_;  // RegistryFigures::ended
  std::map<std::string, int64_t> aborted_by_cause_;        // RegistryFigures::aborted_by_cause
  std::map<std::string, int64_t> batch_aborted_by_cause_;  // train aborts since the last batch
  std::deque<std::string> retired_order_;
  std::map<std::string, ActiveClient> clients_;
  BatchProgress current_;
  std::optional<Batch> ready_;
  std::map<int64_t, Batch> training_;
  // Batches to train again before any new one: rolled back (the weights lost them), then the ones
  // the trainer never finished.
  std::deque<Batch> replay_;
  bool continues_run_ = false;  // the engine booting resumes the run (start_booting, a restart)
  std::deque<Json> recent_batches_;  // see kRecentBatches
  std::optional<Batch> last_recorded_;
  int64_t batches_recorded_ = 0;
  int64_t next_batch_id_ = 1;
  double rolling_post_since_ = 0;
  bool cache_warned_ = false;
  int64_t eval_finished_ = 0;
  double eval_reward_sum_ = 0;
  int64_t eval_successes_ = 0;
  int64_t pending_store_callbacks_ = 0;
  std::condition_variable callbacks_cv_;
};

}  // namespace ajet::episodes
