// Which engine replica serves an LLM call. With several engine ranks every rank serves inference
// (each with its own KV cache and prefix cache) and trains its share of each batch. The calls of
// one episode go to the replica that served its earlier calls, whose prefix cache holds the
// episode's context ("sticky"); an episode's first call goes to the least-loaded live replica, by
// the sequences this front has in flight there (queued and running: the front is the replicas' only
// caller). A replica whose connection is gone gets no calls: its episodes move to the least-loaded
// live one (their context is prefilled again there). Round-robin ignores episodes (the benchmark's
// baseline). No libtorch, no I/O; thread-safe.
#pragma once

#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace ajet::rpc {
class Client;
}

namespace ajet::engine_control {

enum class RoutePolicy { kSticky, kRoundRobin, kFirst };

// "sticky", "round_robin", "first" (rank 0 serves every call).
RoutePolicy parse_route_policy(
    std::string_view name);  // throws kInvalidArgument naming the choices
const char* route_policy_name(RoutePolicy policy);

// A call's replica. While it lives the replica counts its sequences as in flight: keep it with
// the call and drop it when the call ends.
struct ReplicaChoice {
  std::shared_ptr<rpc::Client> client;  // null: no replica is connected
  int replica = -1;
  std::shared_ptr<void> lease;
};

struct ReplicaFigures {
  int64_t calls = 0;      // calls routed here
  int64_t in_flight = 0;  // sequences routed here whose call has not ended
};

struct RouterFigures {
  std::vector<ReplicaFigures> replicas;
  int64_t sticky_calls = 0;    // calls that went where the episode's earlier calls went
  int64_t new_episodes = 0;    // first calls of an episode (placed on the least-loaded replica)
  int64_t moved_episodes = 0;  // episodes whose replica was gone: placed again
  int64_t unavailable = 0;     // calls with no connected replica
};

class ReplicaRouter {
 public:
  // Remembers at most `max_episodes` episodes' replicas (the least recently used are forgotten:
  // their next call is placed as a first call).
  explicit ReplicaRouter(RoutePolicy policy = RoutePolicy::kSticky, size_t max_episodes = 100'000);

  // `replicas` in rank order (a null or disconnected entry is skipped); `sequences` the call's
  // choices (n). The episode key may be empty (not an episode's call): least-loaded then.
  ReplicaChoice route(std::string_view episode,
                      const std::vector<std::shared_ptr<rpc::Client>>& replicas,
                      int64_t sequences = 1);
  // The episode ended: its replica need not be remembered.
  void forget(std::string_view episode);

  RoutePolicy policy() const { return policy_; }
  RouterFigures figures() const;

 private:
  struct State;
  struct Lease;
  int least_loaded(const std::vector<bool>& live) const;   // mu_ held
  void remember(const std::string& episode, int replica);  // mu_ held

  const RoutePolicy policy_;
  const size_t max_episodes_;
  std::shared_ptr<State> state_;  // shared with the leases, which may outlive the router
};

}  // namespace ajet::engine_control
