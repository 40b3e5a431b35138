// A participant front's questions to its episode-group coordinators (docs/protocol.md "Episode
// groups across servers"): POST /resolve_episode_group, with the coordinator episode's key, on a
// few threads of their own — never the front's work pool, so a coordinator that does not answer
// cannot hold store reads or engine control. Each question is bounded as a whole (connect, send,
// answer); at most `max_queued` wait. The registry sees only the decision; what the remote
// answered, or that it could not be reached, goes to the front's own log (stderr), never to the
// public verbose log.
//
// Threads: ask() from the janitor; `settle` runs on an asker thread (or in ask() when the queue is
// full). The destructor abandons questions in flight: their threads finish alone (within the
// deadline) and deliver nothing, so `settle` is never called once the destructor has returned.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>

#include "episodes/registry.h"

namespace ajet::swarm {

class CoordinatorAsker {
 public:
  // Gets the coordinator's decision ("committed", "aborted", "pending") or "unreachable" (no
  // decision: refused, timed out, an unexpected answer): Registry::settle_prepared.
  using Settle = std::function<void(const std::string& episode_uuid, const std::string& decision)>;
  struct Options {
    size_t threads = 4;
    size_t max_queued = 256;
    std::chrono::milliseconds deadline{10'000};  // one whole question
  };

  CoordinatorAsker(Options options, Settle settle);
  ~CoordinatorAsker();
  CoordinatorAsker(const CoordinatorAsker&) = delete;
  CoordinatorAsker& operator=(const CoordinatorAsker&) = delete;

  void ask(episodes::PendingResolution question);

  struct Shared;  // the queue and the settle callback, shared with the (possibly abandoned) threads

 private:
  std::shared_ptr<Shared> shared_;
};

}  // namespace ajet::swarm
