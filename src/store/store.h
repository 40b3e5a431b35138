// The front's durable memory: SQLite in WAL mode holding episodes, LLM calls (token arrays as
// blobs), batches, metrics and server state, so a restarted front loses nothing it acknowledged.
// Writes never block the caller: they queue for one writer thread that commits them in groups.
// Never answer a client "success" for an episode before its write's future/callback has fired.
//
// Threads: any thread may call any method. Write methods enqueue and return at once; `done` runs on
// the writer thread after the commit (nullptr on success, the exception otherwise) and must be
// quick and must not wait on the store. Read methods run synchronously on a separate connection.
//
// Durability: `synchronous=FULL` (default) fsyncs the WAL at every commit, so an acknowledged write
// survives power loss as well as a killed process; group commit (up to `max_group` writes per
// transaction) keeps that to one fsync per group. `synchronous=NORMAL` (fsync_each_commit=false)
// survives SIGKILL but may lose the last commits on power loss.
#pragma once

#include <condition_variable>
#include <deque>
#include <exception>
#include <filesystem>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "store/episode_list.h"
#include "store/ledger.h"
#include "store/records.h"

namespace ajet::store {

class Db;

// PRAGMA user_version. 2: calls.bodies_from (a request's n choices keep its bodies once); a
// version-1 store gains the column when opened. 3: calls.adapter. 4: the task ledger
// (store/ledger.h); an older store gains the empty table when opened.
inline constexpr int kSchemaVersion = 4;
inline constexpr int kApplicationId = 0x414a4554;  // PRAGMA application_id: "AJET"

using Done = std::function<void(std::exception_ptr)>;

// A batch the weights lost (kBatchRolledBack) with the episodes still waiting to train again.
struct RolledBackBatch {
  BatchRow batch;
  std::vector<EpisodeRow> episodes;  // by end time
};

// "the last 5 trained steps in full, of each earlier step the first 4 episodes
// (ajet.store_retention)": what an episode whose calls were deleted says about why.
std::string call_retention_text(const CallRetention& retention);

class Store {
 public:
  struct Options {
    bool fsync_each_commit = true;  // synchronous=FULL (true) or NORMAL (false)
    size_t max_group = 512;         // writes per transaction at most
  };

  // Opens or creates the store. Throws Error(kDataLoss) for a file that is not an AgentJet store or
  // is corrupt, Error(kFailedPrecondition) for a store written by a newer schema version, kIo
  // otherwise.
  explicit Store(const std::filesystem::path& path, Options options);
  explicit Store(const std::filesystem::path& path) : Store(path, Options{}) {}
  ~Store();  // commits everything queued, then stops the writer
  Store(const Store&) = delete;
  Store& operator=(const Store&) = delete;

  const std::filesystem::path& path() const { return path_; }

  // ---- writes (queued, committed in order) ----
  // Inserts or replaces the whole row.
  std::future<void> upsert_episode(EpisodeRow row, Done done = nullptr);
  // Sets status (aborted | reclaimed | dropped) and ended_at, and deletes the episode's calls.
  std::future<void> retire_episode(std::string uuid, std::string status, double ended_at,
                                   Done done = nullptr);
  // Inserts or replaces (episode_uuid, call_index).
  std::future<void> put_call(CallRow row, Done done = nullptr);
  // Inserts or replaces the batch and sets batch_id on the given episodes.
  std::future<void> put_batch(BatchRow row, std::vector<std::string> episode_uuids,
                              Done done = nullptr);
  std::future<void> update_batch(int64_t id, std::string status, double finished_at, Json stats,
                                 Done done = nullptr);
  // Marks every finished train episode that is in no batch, or in a `taken` one, as part of a new
  // abandoned batch `batch_id` (used on stop, so a later recovery does not resume them).
  std::future<void> abandon_pending(int64_t batch_id, int64_t global_step, double at,
                                    Done done = nullptr);
  std::future<void> put_metrics(int64_t step, std::vector<std::pair<std::string, double>> values,
                                double at, Done done = nullptr);
  std::future<void> put_state(std::string key, std::string value, Done done = nullptr);
  // Applies `retention` to every trained batch it has not yet applied to that is older than the
  // newest retention.full_steps trained batches: deletes the calls of its episodes past the first
  // retention.sample_episodes (by end time) and notes each such episode (get_dropped_calls). Then
  // returns the freed pages to the file system where the store was created with incremental vacuum
  // (every store since issue 38); in an older store later writes reuse them, so the file stops
  // growing.
  std::future<void> retain_calls(CallRetention retention, double at, Done done = nullptr);
  // ---- the task ledger (store/ledger.h, store_ledger.cc) ----
  // Records draws: a new row as given, a row drawn before as redraw_row says.
  std::future<void> ledger_draw(std::vector<LedgerRow> rows, Done done = nullptr);
  // What `batch` did to its tasks' rows (trained, dropped and why; swarm mode: a row per episode).
  std::future<void> ledger_mark_batch(LedgerBatch batch, Done done = nullptr);
  // The engine serves policy version `version`: in one transaction, every trained batch that
  // trained into a later version becomes rolled_back, and the ledger's rows consumed after it go
  // back in flight (reconcile_row).
  std::future<void> rollback_after(int64_t version, Done done = nullptr);
  // Resolves once everything queued before it is committed.
  std::future<void> flush();
  // Writes queued and not yet taken by the writer thread (GET /metrics).
  size_t queued_writes();

  // ---- reads (synchronous) ----
  std::optional<std::string> get_state(const std::string& key);
  std::optional<EpisodeRow> get_episode(const std::string& uuid);
  // The uuid of the episode `id` names: its whole uuid, or a prefix that only one episode's uuid
  // starts with (`ajet episode list` prints the first 12 characters). Error(kNotFound) when no
  // episode matches; Error(kInvalidArgument) naming how many do when more than one starts with the
  // prefix.
  std::string resolve_episode_uuid(const std::string& id);
  std::vector<CallRow> get_calls(const std::string& episode_uuid);
  // Set when retain_calls deleted the episode's calls.
  std::optional<DroppedCalls> get_dropped_calls(const std::string& episode_uuid);
  std::vector<EpisodeRow> get_batch_episodes(int64_t batch_id);
  std::vector<BatchRow> get_batches();
  std::vector<MetricRow> get_metrics(const std::string& name);
  // The rows of `name` with step > after_step, by step then insertion.
  std::vector<MetricRow> get_metrics_after(const std::string& name, int64_t after_step);
  // Every metric name with its number of rows and largest step, by name.
  std::vector<MetricSeriesInfo> list_metric_names();
  int64_t count_episodes(const std::string& status);
  // One page of episode summaries, newest first (store/episode_list.h; store_list.cc). Reads
  // `limit` rows along the claimed_at index, and counts matches only up to kEpisodeCountBound.
  // Error(kInvalidArgument) for a limit out of 1..500 or a cursor this store never gave out.
  EpisodePage list_episodes(const EpisodePageRequest& request);
  // EXPLAIN QUERY PLAN of that page query, one line per step (for tests and benchmarks).
  std::string list_episodes_plan(const EpisodePageRequest& request);
  RecoveredState recover();
  std::vector<LedgerRow> ledger_rows();  // by drawn step, source, position
  // Rolled-back batches whose episodes have not been taken again, oldest step first.
  std::vector<RolledBackBatch> rolled_back_batches();

  // The per-server secret for episode keys: read it, or create and commit one (blocks until
  // durable).
  std::string load_or_create_secret();

 private:
  struct Job {
    std::function<void(Db&)> apply;
    std::promise<void> promise;
    Done done;
  };
  std::future<void> enqueue(std::function<void(Db&)> apply, Done done);
  void writer_loop();
  void commit_group(std::vector<Job>& group);

  std::filesystem::path path_;
  Options options_;
  int lock_fd_ = -1;               // flock on <path>.lock: one front per store
  std::unique_ptr<Db> writer_db_;  // used only by the writer thread after construction
  std::unique_ptr<Db> reader_db_;  // guarded by reader_mu_
  std::mutex reader_mu_;

  std::mutex queue_mu_;
  std::condition_variable queue_cv_;
  std::deque<Job> queue_;
  bool stopping_ = false;
  std::thread writer_;
};

}  // namespace ajet::store
