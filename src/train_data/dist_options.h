// Where this engine process sits in a data-parallel group, torchrun-style: flags (--nnodes,
// --node-rank,
// --master-addr, --master-port, --nproc-per-node, --local-rank) with the torchrun environment as
// the fallback. Plain data and parsing, no libtorch, no sockets, no CLI11 (the engine app registers
// the flags: apps/ajet-engine/dist_flags.h); train/dist.h joins the group.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>

namespace ajet::train_data {

// What the command line said; unset fields fall back to the torchrun environment, then to defaults.
// Flags: --nnodes --node-rank --master-addr --master-port --nproc-per-node --local-rank
// (apps/ajet-engine/dist_flags.h).
struct DistOptions {
  std::optional<int> nnodes, node_rank, nproc_per_node, local_rank;
  std::optional<std::string> master_addr;
  std::optional<int> master_port;
  double timeout_seconds = 300;  // rendezvous (every rank joins) and each collective
  std::string backend =
      "auto";  // "auto" (NCCL for CUDA tensors when built with it, else Gloo), "gloo", "nccl"
};

// The resolved place of this process: global rank in [0, world_size).
struct DistPlacement {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  int local_world_size = 1;
  std::string master_addr = "127.0.0.1";
  uint16_t master_port = 29500;
  std::chrono::milliseconds timeout{300000};
  std::string backend = "auto";

  std::string master() const { return master_addr + ":" + std::to_string(master_port); }
};

// Reads an environment variable (null when unset); tests pass their own.
using EnvLookup = std::function<const char*(const char*)>;
EnvLookup process_env();

// Flags win field by field; a placement flag given (--nnodes, --node-rank, --nproc-per-node) means
//   world_size = nnodes * nproc_per_node, rank = node_rank * nproc_per_node + local_rank
// (local_rank: --local-rank, else LOCAL_RANK, else 0). Without them, torchrun's RANK / WORLD_SIZE /
// LOCAL_RANK / LOCAL_WORLD_SIZE are taken as they are; without those, one rank. MASTER_ADDR and
// MASTER_PORT fill the master when the flags do not (defaults 127.0.0.1:29500). Out-of-range or
// malformed values throw Error(kInvalidArgument) naming the flag or variable.
DistPlacement resolve_placement(const DistOptions& options, const EnvLookup& env = process_env());

}  // namespace ajet::train_data
