// The torchrun-style data-parallel flags of `ajet-engine serve` (and of the tests and benchmarks
// that start ranks the same way): --nnodes, --node-rank, --nproc-per-node, --local-rank,
// --master-addr,
// --master-port, --dist-timeout, --dist-backend. CLI11 wiring only; train_data/dist_options.h
// resolves them.
#pragma once

#include <CLI/CLI.hpp>
#include <optional>
#include <string>

#include "train_data/dist_options.h"

namespace ajet::engine_cli {

// Adds the flags to a command. Only given flags are set in `options`; call
// train_data::resolve_placement after parsing.
inline void add_dist_flags(CLI::App& cmd, train_data::DistOptions& o) {
  auto set_int = [&](const char* name, std::optional<int>& field, const char* help) {
    cmd.add_option_function<int>(
           name, [&field](const int& v) { field = v; }, help)
        ->group("Data parallel");
  };
  set_int(
      "--nnodes", o.nnodes,
      "Nodes (machines) in the data-parallel group (torchrun --nnodes; default WORLD_SIZE or 1)");
  set_int("--node-rank", o.node_rank, "This node's index in [0, nnodes)");
  set_int("--nproc-per-node", o.nproc_per_node, "Engine processes per node");
  set_int("--local-rank", o.local_rank,
          "This process's index on its node (default LOCAL_RANK or 0)");
  cmd.add_option_function<std::string>(
         "--master-addr", [&o](const std::string& v) { o.master_addr = v; },
         "Address of rank 0's rendezvous store (default MASTER_ADDR or 127.0.0.1)")
      ->group("Data parallel");
  set_int("--master-port", o.master_port,
          "Port of the rendezvous store (default MASTER_PORT or 29500)");
  cmd.add_option("--dist-timeout", o.timeout_seconds,
                 "Seconds to wait for every rank to join, and for each all-reduce")
      ->capture_default_str()
      ->group("Data parallel");
  cmd.add_option("--dist-backend", o.backend, "auto, gloo or nccl")
      ->capture_default_str()
      ->group("Data parallel");
}

}  // namespace ajet::engine_cli
