// Data parallelism for the trainer: where this engine process sits in the group (torchrun-style
// placement from flags or the torchrun environment) and a Collective over a torch.distributed
// (c10d) process group — Gloo on CPU, NCCL when libtorch was built with it — met through a TCPStore
// on the master. It never splits batches (train_data/dist_split.h) and never trains (trainer.h); it
// only sums tensors.
#pragma once

#include <memory>

#include "train_data/dist_options.h"
#include "train/trainer.h"

namespace ajet::train {

// Joins the group: rank 0 serves the TCPStore on master_port (every rank connects to it), then the
// backend connects every pair of ranks. Blocks until all world_size ranks joined. Errors (the port
// is in use, the master is unreachable, a peer never joins within the timeout) throw
// Error(kUnavailable) naming master_addr:master_port and the rank. world_size 1 needs no store and
// returns a collective whose all_reduce_sum leaves the tensors as they are.
std::shared_ptr<Collective> make_collective(const train_data::DistPlacement& placement);

// Elastic groups: a front forms (and after a replica died or joined, re-forms) the group of the
// engine replicas it drives, one generation at a time (docs/cluster.md, "Engines on other hosts").
// The would-be rank 0 first serves a rendezvous store on a port the OS picks; the front then tells
// every member its rank and where that store is, and each joins with join_collective.
class RendezvousStore {
 public:
  // Listens on every interface; throws Error(kUnavailable) when it cannot.
  static std::shared_ptr<RendezvousStore> serve(std::chrono::milliseconds timeout);
  ~RendezvousStore();
  uint16_t port() const;

  struct Impl;
  explicit RendezvousStore(std::unique_ptr<Impl> impl);
  Impl& impl() const { return *impl_; }

 private:
  std::unique_ptr<Impl> impl_;
};

// Joins the group `name` (one generation's key prefix in the store) as placement.rank of
// placement.world_size. Rank 0 passes the store it serves; the others connect to
// placement.master(). The Gloo transport binds to `bind_addr` when given (the address this
// host is reached at from the others), else as make_collective does. Blocks until every rank
// joined; errors as make_collective's.
std::shared_ptr<Collective> join_collective(const train_data::DistPlacement& placement,
                                            const std::string& name,
                                            std::shared_ptr<RendezvousStore> served,
                                            const std::string& bind_addr);

// Makes every rank hold rank `root`'s trainer: each model parameter (in named_parameters order,
// which the same architecture and LoRA settings make identical), the KL reference's, the
// optimizer's moments and step counts, the global step, the policy version and the RNG states.
// Every rank calls it; the trainers must have the same architecture. Throws what the transport
// throws; a non-root rank then holds a mix and must not train before a successful call.
void broadcast_trainer(Trainer& trainer, Collective& collective, int root);

// Disaggregated training (docs/cluster.md, "Trainers apart from the replicas"): rank `root`, a
// trainer, sends its model's parameters to every other rank, inference replicas whose served
// models have the same parameters by name and shape (the same base model, LoRA attached alike;
// checked first: every rank throws Error(kFailedPrecondition) when one differs). Two sets travel,
// each only when some receiver's values differ from root's: the parameters root trains
// (requires_grad) and the rest, so a push after a LoRA step carries the adapters only, and a
// joiner that loaded the same base receives no base. Receivers only read `model` (inference may go
// on meanwhile): what they received comes back staged, to swap in with apply_pushed_weights.
struct PushedWeights {
  std::vector<std::pair<size_t, torch::Tensor>> staged;  // index in named_parameters order, values
  int64_t bytes = 0;                                     // bytes sent (root) or received
  bool sent_trainable = false;
  bool sent_frozen = false;
  int64_t policy_version = -1;  // root's: the version the pushed weights are
  uint64_t checksum = 0;        // parameter_checksum of root's model
  // Where the time went: the sets' checksums compared, the transfer, the final checksum.
  double compare_s = 0, transfer_s = 0, verify_s = 0;
};
// Every rank calls it; root's `policy_version` goes to all. A receiver checks that its model with
// the staged values swapped in has root's checksum (else Error(kDataLoss), nothing to swap).
// What one engine keeps from one push to the next (push_parameters fills it).
struct PushState {
  // A receiver's buffers by parameter index. Memory touched for the first time is slow to receive
  // into (in a VM: 2 GB took over 5 s to fault in), so a later push reuses them.
  std::vector<torch::Tensor> buffers;
  // Each set's checksum with the tensors (storage and version counter) it was computed over: a set
  // unchanged since (a LoRA base) is not read again.
  struct Sum {
    std::vector<std::pair<const void*, uint32_t>> key;
    uint64_t value = 0;
  };
  Sum sums[2];
};
PushedWeights push_parameters(model::Qwen2Model& model, int64_t policy_version, Collective& c,
                              int root, PushState* state = nullptr);
// Copies the staged values into `model` (call it when nothing reads the model: between two
// inference steps).
void apply_pushed_weights(model::Qwen2Model& model, const PushedWeights& pushed);

}  // namespace ajet::train
