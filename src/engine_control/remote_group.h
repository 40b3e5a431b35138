// Engine replicas on other hosts (ajet-swarm start --engine-at tcp:HOST:PORT, repeated;
// docs/cluster.md, "Engines on other hosts"). Each is an `ajet-engine serve --elastic` the operator
// started, reached with the engine token. The front forms them into one data-parallel group (engine
// RPC open_group and join_group: c10d over TCP, every member takes rank 0's weights and trainer
// state, and their weights checksums must agree), routes calls to the members, and keeps watch:
//   * a heartbeat (`status`, every `heartbeat`) takes a member that misses one answer, or whose
//     connection closed, out of routing at once (so a dead replica gets no call within about a
//     second); a closed connection, or three misses in a row, mark it gone;
//   * engines that are not connected (listed, added later, or gone) are dialled again every
//     `redial`; one that answers waits as a standby;
//   * at the next step boundary (train_ranks) the group is re-formed when a member is gone or a
//     standby waits: a new generation with the live members first (the one holding the newest
//     weights as rank 0), and the joiners receive the current weights.
// Replica slots are stable: an engine keeps its slot (its index in serving()) for the front's
// lifetime, so the router's sticky episodes stay where they were. No libtorch; thread-safe.
#pragma once

#include <chrono>
#include <filesystem>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "common/json.h"

namespace ajet::rpc {
class Client;
}
namespace ajet::episodes {
class VerboseLog;
}

namespace ajet::engine_control {

struct RemoteGroupOptions {
  std::vector<std::string> addresses;  // tcp:HOST:PORT (or unix:PATH) of each engine
  std::string token;                   // the engines' shared secret
  std::chrono::milliseconds heartbeat{250};
  std::chrono::milliseconds heartbeat_timeout{600};  // one status answer
  std::chrono::milliseconds redial{1000};
  // join_group's timeout: how long the members wait for each other when forming, and every later
  // all-reduce waits for a silent peer (a cut link) before the step fails.
  std::chrono::milliseconds group_timeout{120'000};
  std::chrono::milliseconds call_timeout{600'000};  // open_group, join_group, load_checkpoint
};

class RemoteGroup {
 public:
  RemoteGroup(RemoteGroupOptions options, episodes::VerboseLog& verbose);
  ~RemoteGroup();
  RemoteGroup(const RemoteGroup&) = delete;
  RemoteGroup& operator=(const RemoteGroup&) = delete;

  // One round of the watch: heartbeats to the members, dials to the others. Call it every
  // options.heartbeat (the supervisor's thread). Blocks at most about heartbeat_timeout.
  void check();

  // Forms a new generation when one is due (a member gone, a standby waiting, `force`, or no group
  // yet) and returns the members in rank order (rank 0 first). With no member left, `checkpoint`
  // (when not empty) is loaded on the new rank 0 first: the weights it held are gone with the
  // members. Throws Error(kUnavailable) when no engine can be reached. Blocks while forming.
  std::vector<std::shared_ptr<rpc::Client>> train_ranks(bool force,
                                                        const std::filesystem::path& checkpoint);

  // Routing: one entry per slot (registration order); null for a slot whose engine is not a
  // serving member (not connected, not yet joined, missed a heartbeat, gone).
  std::vector<std::shared_ptr<rpc::Client>> serving() const;
  // The lowest-ranked member's connection (rank 0's while it lives): checkpoints are saved there.
  // Null when no member is left.
  std::shared_ptr<rpc::Client> first() const;
  bool has_members() const;
  // The policy version the group serves (after the last forming or recorded step); -1 without one.
  int64_t policy_version() const;
  // The batch runner trained a step: every member now serves this version with these weights.
  void note_step(int64_t policy_version, const std::string& weights_checksum);
  int64_t generation() const;

  // Disaggregated training (ajet-swarm start --trainer-at): this group holds the inference
  // replicas, which train nothing and form no group; publish() brings every connected replica
  // (members and standbys) to the weights of `trainer` (the trainer group's rank 0, reached at
  // `trainer_address`) over a push group (engine RPC open_push, push_weights): only what differs
  // travels, and each replica swaps the weights in once its in-flight calls ended. A replica that
  // took them is a member serving the trainer's policy version; one that failed gets no calls
  // until a later push succeeds. Returns the trainer's reply ({"policy_version",
  // "weights_checksum", "bytes", ...}, with "replicas" added); throws Error(kUnavailable) when
  // the trainer failed (the replicas then serve what they served) and kFailedPrecondition when no
  // replica is connected.
  Json publish(const std::shared_ptr<rpc::Client>& trainer, const std::string& trainer_address);
  // Connected replicas that do not serve the newest pushed weights yet (disaggregated).
  bool has_standbys() const;
  // The lowest-ranked member's address ("" without members).
  std::string first_address() const;

  // Registers an engine (admin endpoint or config); it joins at the next step boundary. Throws
  // kInvalidArgument for a malformed address, kFailedPrecondition for one already registered.
  void add(const std::string& address);
  // The engine leaves: no calls from now, out of the group at the next step boundary. Throws
  // kNotFound for an address never registered.
  void remove(const std::string& address);

  struct Counts {
    int registered = 0;  // not removed
    int members = 0;
    int standbys = 0;
  };
  Counts counts() const;

  // {"generation", "policy_version", "engines": [{"slot", "address", "state", "rank",
  // "policy_version", "weights_checksum", "missed_heartbeats", "lost", "joined"}]}.
  Json json() const;

 private:
  enum class State { kDialing, kStandby, kMember, kGone, kRemoved };
  struct Engine;
  std::vector<std::shared_ptr<rpc::Client>> form(const std::filesystem::path& checkpoint);
  void mark_gone(Engine& e, const std::string& why);  // mu_ held; drops its connection
  const Engine* first_member() const;                 // mu_ held; the lowest-ranked member, or null

  RemoteGroupOptions options_;
  episodes::VerboseLog& verbose_;
  mutable std::mutex mu_;
  std::mutex form_mu_;                            // one forming at a time
  std::vector<std::shared_ptr<Engine>> engines_;  // by slot
  int64_t generation_ = 0;
  int64_t policy_version_ = -1;
  bool due_ = true;  // a member was lost or an engine waits to join
};

// The host part of a tcp:HOST:PORT address ("127.0.0.1" for unix:). Throws kInvalidArgument.
std::string engine_host(const std::string& address);

}  // namespace ajet::engine_control
