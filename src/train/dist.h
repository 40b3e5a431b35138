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

}  // namespace ajet::train
