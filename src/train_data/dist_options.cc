#include "train_data/dist_options.h"

#include <algorithm>
#include <charconv>
#include <cstdlib>
#include <string_view>

#include "common/error.h"

namespace ajet::train_data {

namespace {

int parse_int(std::string_view text, const std::string& what) {
  int value = 0;
  const char* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(text.data(), end, value);
  if (text.empty() || ec != std::errc() || ptr != end)
    invalid_argument(what + ": '" + std::string(text) + "' is not an integer");
  return value;
}

std::optional<int> env_int(const EnvLookup& env, const char* name) {
  const char* v = env(name);
  if (v == nullptr || *v == '\0') return std::nullopt;
  return parse_int(v, std::string("environment variable ") + name);
}

}  // namespace

EnvLookup process_env() {
  return [](const char* name) -> const char* { return std::getenv(name); };
}

DistPlacement resolve_placement(const DistOptions& o, const EnvLookup& env) {
  DistPlacement p;
  const bool by_flags = o.nnodes || o.node_rank || o.nproc_per_node;
  if (by_flags) {
    const int nnodes = o.nnodes.value_or(1);
    const int nproc = o.nproc_per_node.value_or(1);
    const int node_rank = o.node_rank.value_or(0);
    if (nnodes < 1) invalid_argument("--nnodes must be >= 1, got " + std::to_string(nnodes));
    if (nproc < 1) invalid_argument("--nproc-per-node must be >= 1, got " + std::to_string(nproc));
    if (node_rank < 0 || node_rank >= nnodes) {
      invalid_argument("--node-rank " + std::to_string(node_rank) + " is outside [0, --nnodes " +
                       std::to_string(nnodes) + ")");
    }
    const int local = o.local_rank ? *o.local_rank : env_int(env, "LOCAL_RANK").value_or(0);
    if (local < 0 || local >= nproc) {
      invalid_argument(std::string(o.local_rank ? "--local-rank " : "LOCAL_RANK ") +
                       std::to_string(local) + " is outside [0, --nproc-per-node " +
                       std::to_string(nproc) + ")");
    }
    p.world_size = nnodes * nproc;
    p.rank = node_rank * nproc + local;
    p.local_rank = local;
    p.local_world_size = nproc;
  } else if (auto world = env_int(env, "WORLD_SIZE")) {
    const auto rank = env_int(env, "RANK");
    if (!rank) invalid_argument("WORLD_SIZE is set but RANK is not (torchrun sets both)");
    if (*world < 1) invalid_argument("WORLD_SIZE must be >= 1, got " + std::to_string(*world));
    if (*rank < 0 || *rank >= *world) {
      invalid_argument("RANK " + std::to_string(*rank) + " is outside [0, WORLD_SIZE " +
                       std::to_string(*world) + ")");
    }
    p.world_size = *world;
    p.rank = *rank;
    p.local_rank = o.local_rank ? *o.local_rank : env_int(env, "LOCAL_RANK").value_or(0);
    p.local_world_size = env_int(env, "LOCAL_WORLD_SIZE").value_or(std::max(1, p.local_rank + 1));
    if (p.local_rank < 0 || p.local_rank >= p.local_world_size) {
      invalid_argument("LOCAL_RANK " + std::to_string(p.local_rank) +
                       " is outside [0, LOCAL_WORLD_SIZE " + std::to_string(p.local_world_size) +
                       ")");
    }
  } else if (o.local_rank && *o.local_rank != 0) {
    invalid_argument("--local-rank " + std::to_string(*o.local_rank) +
                     " without --nproc-per-node or WORLD_SIZE");
  }

  if (o.master_addr) {
    p.master_addr = *o.master_addr;
  } else if (const char* a = env("MASTER_ADDR"); a != nullptr && *a != '\0') {
    p.master_addr = a;
  }
  if (p.master_addr.empty()) invalid_argument("--master-addr is empty");
  int port = 29500;
  std::string port_source = "--master-port";
  if (o.master_port) {
    port = *o.master_port;
  } else if (auto e = env_int(env, "MASTER_PORT")) {
    port = *e;
    port_source = "MASTER_PORT";
  }
  if (port < 1 || port > 65535)
    invalid_argument(port_source + " " + std::to_string(port) + " is outside [1, 65535]");
  p.master_port = static_cast<uint16_t>(port);
  if (!(o.timeout_seconds > 0)) invalid_argument("distributed timeout must be positive");
  p.timeout = std::chrono::milliseconds(static_cast<int64_t>(o.timeout_seconds * 1000));
  if (o.backend != "auto" && o.backend != "gloo" && o.backend != "nccl") {
    invalid_argument("distributed backend '" + o.backend + "' is not one of auto, gloo, nccl");
  }
  p.backend = o.backend;
  return p;
}

}  // namespace ajet::train_data
