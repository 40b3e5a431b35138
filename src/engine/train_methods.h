// The engine's training methods over the RPC: `train_step`, `save_checkpoint`, `load_checkpoint`,
// on one train::Trainer. Backbone `torch`: a step pauses inference (it runs on the engine thread
// between two steps) and updates the served weights in place. `async`: the trainer works on its own
// copy of the model on the control thread while inference continues; the new weights are copied
// into the served model between two decode steps. `debug`: inference only, the methods answer an
// error. It never decides when to checkpoint (the caller's save_freq) and never touches sockets. No
// libtorch in this header.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>

#include "config/backbone.h"
#include "common/json.h"
#include "engine/options.h"
#include "engine/runtime.h"
#include "train_data/options.h"

namespace ajet::rpc {
struct TrainBatch;
}
namespace ajet::train {
class Collective;
}

namespace ajet::engine {

class EngineService;

struct TrainingOptions {
  config::Backbone backbone = config::Backbone::kTorch;
  train_data::TrainerOptions trainer;
  std::filesystem::path checkpoint_base_dir = "./saved_checkpoints";  // save_checkpoint's default
  int64_t keep_last = 3;                                              // <= 0 keeps all
  int threads = 0;  // the engine's intra-op threads (0: one per core)
  // async: while a step trains beside the rollouts, the trainer's threads (0: half of `threads`, at
  // least 1) and the decoder's (0: all of `threads`); ajet.async.trainer_threads /
  // decode_threads_while_training. A narrower decoder gets `threads` back with the new weights.
  int async_trainer_threads = 0;
  int async_decode_threads = 0;
  int async_trainer_nice = 19;  // ajet.async.trainer_nice: the trainer thread's nice value
  // The data-parallel group (train/dist.h's make_collective); null: one rank. With one, every
  // train_step all-reduces gradients with the other ranks, and an empty batch is a valid part.
  std::shared_ptr<train::Collective> collective;
  // ajet-engine serve --elastic: no group at start; the front forms it with open_group and
  // join_group (and re-forms it when a member died or joined). A train_step that fails on a
  // collective leaves the weights and optimizer as they were before it (a snapshot per step).
  bool elastic = false;
  // ajet.engine.adapter_memory_mb in bytes: named adapters beyond it move out to
  // <checkpoint_base_dir>/adapters_out/ (engine/adapters.h). 0: no limit.
  int64_t adapter_memory_bytes = 0;
};

// From the --conf file when the engine options carry one (ajet.backbone, ajet.trainer_common.*,
// ajet.lora.*, ajet.async.*), else the defaults. Throws Error(kInvalidArgument) naming the key.
TrainingOptions training_options(const EngineOptions& options);

class TrainMethods {
 public:
  // Registers train_step, save_checkpoint and load_checkpoint as control methods of `service`
  // (before its server listens). The trainer is built on first use, so an engine that never trains
  // holds no optimizer state or KL reference.
  TrainMethods(EngineService& service, ModelInfo model, TrainingOptions options);
  ~TrainMethods();
  TrainMethods(const TrainMethods&) = delete;
  TrainMethods& operator=(const TrainMethods&) = delete;

  // Each runs on the caller's thread (the service's control thread for RPC calls); see
  // docs/engine-rpc.md for the bodies. Bad input throws Error(kInvalidArgument) before any weight
  // changes.
  Json train_step(const rpc::TrainBatch& batch);
  // Writes base_dir/global_step_<policy version>/ with {"front_cursor": front_cursor} as the user
  // blob.
  Json save_checkpoint(const std::optional<std::filesystem::path>& base_dir,
                       const Json& front_cursor);
  // `dir` is a checkpoint directory or a base directory (its latest checkpoint is loaded). The
  // served weights and the policy version change together between two engine steps.
  Json load_checkpoint(const std::filesystem::path& dir);
  // Elastic groups (options.elastic): `open_group` serves a rendezvous store for generation G and
  // answers {"port"}; `join_group` {generation, rank, world_size, master_addr, master_port,
  // bind_addr, timeout_s, policy_version} leaves the previous group, joins this one (blocks until
  // every member joined), then every member takes rank 0's weights and trainer state; it answers
  // {"policy_version", "global_step", "weights_checksum", "rank", "world_size", "generation"}.
  Json open_group(const Json& body);
  Json join_group(const Json& body);
  // Weight pushes (disaggregated training): `open_push` {push_id, timeout_s?} makes this engine,
  // a trainer, serve the push's rendezvous store and answers {"port"}; `push_weights` {push_id,
  // rank, world_size, master_addr, master_port, bind_addr?, timeout_s?} meets the others: rank 0
  // sends its trainer's weights (train::push_parameters), every other rank receives them and swaps
  // them in once its in-flight requests ended, serving the trainer's policy version from then on.
  // Answers {"policy_version", "weights_checksum", "bytes", "sent_trainable", "sent_frozen",
  // "push_s", "swap_wait_s"}.
  Json open_push(const Json& body);
  Json push_weights(const Json& body);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace ajet::engine
