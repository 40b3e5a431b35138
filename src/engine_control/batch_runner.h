// The batch loop of the torch and async backbones: waits for the registry's ready batch, takes it,
// merges each episode's stored calls into training samples (src/tracking), sends them to the
// engine's `train_step` RPC (docs/engine-rpc.md) and reports the step to Registry::finish_batch.
// Every `save_freq` policy versions (and on stop_engine, and when the front stops) it asks the
// engine to `save_checkpoint`, and tells the supervisor where the newest checkpoint is so a crashed
// engine restarts from it. The debug backbone never gets here: the registry records its batches
// itself and ROLLING resumes.
//
// Data parallel (ajet-swarm start --engine-ranks N): the request is split with
// train_data::split_batch (balanced by tokens, task groups kept whole) and part r goes to rank r's
// train_step, all at once (an empty part too: every rank takes part in every all-reduce). The step
// counts when every rank acknowledged it; one rank's error fails the batch, naming the rank.
// Checkpoints come from rank 0 (the ranks hold the same weights). Inference runs on rank 0 only.
//
// torch: the registry is in WEIGHT_SYNCING from take_batch until finish_batch (WEIGHT_EXPORTING
// while a checkpoint is written). async: the status stays ROLLING; the registry pauses claims when
// more than ajet.async.max_staleness batches wait for the trainer. Threads: one thread of its own;
// it blocks on the registry, the store and the engine, never on an I/O thread. It never advances
// global_step without a step the engine acknowledged.
#pragma once

#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "engine_control/teacher.h"
#include "episodes/registry.h"
#include "rpc/messages.h"
#include "tracking/merge.h"
#include "train_data/advantage.h"
#include "train_data/batch.h"

namespace ajet::store {
class Store;
}
namespace ajet::rpc {
class Client;
}

namespace ajet::episodes {
class VerboseLog;
struct ModelContext;
}  // namespace ajet::episodes

namespace ajet::engine_control {

struct BatchSamples {
  episodes::Batch batch;
  std::vector<tracking::Sample> samples;  // every episode's merged samples, episode by episode
  tracking::MergeDiagnostics totals;      // summed counts (calls, samples, tokens before/after)
  // Madness (ajet.rollout.madness): episodes with a call a detector stopped, and of those the
  // ones penalized or dropped; stopped calls per detector ("repetition": 3, ...).
  int64_t mad_episodes = 0, mad_penalized = 0, mad_dropped = 0;
  std::map<std::string, int64_t> mad_calls;
};

// What training does with an episode one of whose calls a madness detector stopped.
enum class MadnessAction { kPenalize, kDrop, kKeep };
struct MadnessPolicy {
  MadnessAction action = MadnessAction::kPenalize;
  double reward = -1.0;  // kPenalize: the episode's reward
};

// What the runner needs from the synced config at the time a batch trains.
struct TrainSettings {
  int64_t save_freq = 0;  // checkpoint when the new policy version is a multiple; <= 0: never
  std::filesystem::path
      checkpoint_dir;  // passed as save_checkpoint's `dir` (empty: the engine's default)
  std::chrono::milliseconds train_timeout{std::chrono::hours(2)};  // one train_step call
  train_data::AdvantageOptions
      advantage;  // the engine's; how a batch is split across data-parallel ranks
  MadnessPolicy madness;
  bool madness_detection = false;  // some detector is on: madness metrics every step (zeros too)
  std::optional<TeacherOptions> teacher;  // on-policy distillation (ajet.distillation)
  // Multi-agent episodes: each role its own advantage group and, when the episode reported
  // metadata.role_rewards, its own reward (ajet.trainer_common.algorithm.per_role_advantages).
  bool per_role_advantages = false;
  // ajet.deterministic (not false): a batch's episodes in a canonical order (task, reward, tokens)
  // instead of the order they ended in, so the trainer's sums run in the same order on every rerun.
  bool deterministic = false;
  // ajet.trainer_common.record_rollouts: each trained batch (the train_step request as sent) and
  // the trainer's reply go under this directory (docs/determinism.md "Rollout record and replay");
  // empty: not recorded. `record_header` is the record's record.json (config, start model).
  std::filesystem::path record_dir;
  Json record_header = Json::object();
};

// Writes the batch of the step after `global_step` (step N = global_step + 1, as metrics.jsonl
// counts) and the trainer's reply into `dir` (record.json first when missing): step_NNNNNN.batch
// (the train_step request frame's bytes) and step_NNNNNN.json ({step, batch_id, reply}). Each file
// atomically.
void record_train_step(const std::filesystem::path& dir, const Json& header,
                       const rpc::TrainBatch& request, const Json& reply, int64_t global_step,
                       int64_t batch_id);

// The runner's view of the rest of the front (all may return null / empty while nothing is loaded).
struct TrainerLink {
  std::function<std::shared_ptr<const episodes::ModelContext>()> model;
  std::function<std::shared_ptr<rpc::Client>()>
      engine;  // null while booting, restarting or stopped
  // Every data-parallel rank's connection in rank order (rank 0 = engine()); unset or empty:
  // engine() alone.
  std::function<std::vector<std::shared_ptr<rpc::Client>>()> engine_ranks;
  // Elastic replica groups (ajet-swarm start --engine-at): the members to train on, in rank order,
  // the group re-formed first when a member was lost or one waits to join (`after_failure`: also
  // when the last step failed). Throws Error(kUnavailable) when no replica is left. Set, it
  // replaces engine_ranks, and a step that fails because a member died is trained again on the
  // re-formed group instead of being abandoned.
  std::function<std::vector<std::shared_ptr<rpc::Client>>(bool after_failure)> train_ranks;
  std::function<int64_t()> group_version;  // the policy version the formed group serves
  // A step was trained: the group's new version and weights checksum (rank 0's). Disaggregated
  // fronts push the weights to their inference replicas in it.
  std::function<void(int64_t, const std::string&)> step_done;
  // Held while a step trains on the replica group and step_done runs (unset: nothing held).
  std::function<std::unique_lock<std::mutex>()> hold_trainer;
  std::function<TrainSettings()> settings;
  std::function<void(const std::filesystem::path&)>
      checkpoint_saved;  // newest checkpoint directory
};

// The train_step request for these samples (S samples packed back to back, N tokens). Samples that
// are not trainable (no generated token) are left out. advantages stay empty: the engine computes
// them per task_id group from `rewards`. Throws Error(kFailedPrecondition) when no sample is
// trainable.
rpc::TrainBatch build_train_batch(const BatchSamples& samples);

// Per-role advantages: each role's samples (by agent name) become an episode and a group of their
// own ("<uuid>@<role>" in "<task>@<role>"), weighted 1 / (that role's trainable samples), with the
// role's reward when the episode reported one in metadata.role_rewards.
void split_by_role(tracking::MergedEpisode& merged, const Json& metadata);

// The reward an episode trains with under the madness policy (ajet.rollout.madness.action), given
// its calls: its own when no detector stopped one; nullopt when it is dropped. Counts into `out`.
std::optional<double> madness_reward(const std::vector<tracking::CallRecord>& calls, double reward,
                                     const MadnessPolicy& policy, BatchSamples& out);

// Rank r's train_step request for `world_size` data-parallel ranks: train_data::split_batch of
// `request` (so each rank's advantages equal those of one rank on the whole batch), `meta` carried
// over with "rank" and "world_size" added. Some parts may hold no sample.
std::vector<rpc::TrainBatch> split_train_batch(const rpc::TrainBatch& request, int world_size,
                                               const train_data::AdvantageOptions& advantage);

// The step metrics of the ranks' replies, as one rank would report them for the batch `whole` (the
// request's samples, train_data::batch_from_rpc): into `metrics` (rank 0's reply) go the advantage
// means over every rank's trained samples and the reward mean, group and zero-variance-group counts
// of the whole batch.
void whole_batch_metrics(const train_data::Batch& whole,
                         const train_data::AdvantageOptions& advantage,
                         const std::vector<Json>& replies, Json& metrics);

class BatchRunner {
 public:
  BatchRunner(episodes::Registry& registry, store::Store& store, episodes::VerboseLog& verbose,
              TrainerLink link);
  ~BatchRunner();  // stops and joins
  BatchRunner(const BatchRunner&) = delete;
  BatchRunner& operator=(const BatchRunner&) = delete;

  // After start_engine: wakes the loop so it waits on the registry again; forgets the last
  // session's trained/saved policy versions.
  void notify();

  // Merges the batch's episodes (calls read from the store) into samples. Blocks on the store.
  BatchSamples merge_batch(episodes::Batch batch, const episodes::ModelContext& model,
                           const TrainSettings& settings);
  // Trains the taken batch on the engine, then finish_batch (or fail_batch when the engine rejects
  // it; nothing when the engine died: engine_restarting already returned the batch to collection).
  void train_on_engine(BatchSamples samples);
  // Asks the engine for a checkpoint (blocks). Returns its directory and policy version, or nullopt
  // when nothing was trained since the last one or the engine is not there. Used every save_freq
  // steps, on stop_engine and when the front stops.
  struct SavedCheckpoint {
    std::filesystem::path dir;
    int64_t policy_version = 0;
  };
  std::optional<SavedCheckpoint> save_checkpoint(const std::string& why);
  // The policy version of the newest step that no checkpoint holds yet (trained since the last
  // save_checkpoint of this engine session), or nullopt when there is none.
  std::optional<int64_t> unsaved_version();
  // Ends the batch loop and joins it; a step in flight finishes first (so unsaved_version() then
  // counts it). save_checkpoint still works after. Idempotent; the destructor calls it.
  void stop();

 private:
  void run();
  // train_step on every rank at once; rank 0's reply with the ranks' counts summed. Throws the
  // first error (by rank), naming the rank, after every call returned.
  Json train_on_ranks(const std::vector<std::shared_ptr<rpc::Client>>& ranks,
                      const rpc::TrainBatch& request, const TrainSettings& settings);

  // The elastic path of train_on_engine: trains `request` on the replica group, re-forming it and
  // trying again when a member died. The step's metrics, or nullopt when the batch was failed
  // (or returned to collection).
  std::optional<Json> train_elastic(const episodes::Batch& b, const std::string& merged,
                                    const rpc::TrainBatch& request, const TrainSettings& settings);
  // The engine refused the batch (bad input, not a lost engine): logged, and the batch failed.
  void reject_batch(const episodes::Batch& b, const Error& e);
  // The task ledger (store/ledger.h): what batch `b` did to its tasks, committed before the step's
  // checkpoint may be written (so the ledger is never behind a checkpoint). `failed`: not trained.
  void record_in_ledger(const episodes::Batch& b, int64_t version, const TrainSettings& settings,
                        std::optional<std::string> failed);

  episodes::Registry& registry_;
  store::Store& store_;
  episodes::VerboseLog& verbose_;
  TrainerLink link_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;
  bool poked_ = false;
  std::mutex save_mu_;            // one save_checkpoint at a time
  int64_t trained_version_ = -1;  // policy_version after the last acknowledged step
  int64_t saved_version_ = -1;    // policy_version of the last checkpoint
  std::thread thread_;
};

}  // namespace ajet::engine_control
