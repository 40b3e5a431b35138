#include "engine_control/replica_router.h"

#include <algorithm>

#include "common/error.h"
#include "rpc/client.h"

namespace ajet::engine_control {

RoutePolicy parse_route_policy(std::string_view name) {
  if (name == "sticky") return RoutePolicy::kSticky;
  if (name == "round_robin") return RoutePolicy::kRoundRobin;
  if (name == "first") return RoutePolicy::kFirst;
  invalid_argument("unknown route policy '" + std::string(name) +
                   "' (choose sticky, round_robin or first)");
}

const char* route_policy_name(RoutePolicy policy) {
  switch (policy) {
    case RoutePolicy::kSticky: return "sticky";
    case RoutePolicy::kRoundRobin: return "round_robin";
    case RoutePolicy::kFirst: return "first";
  }
  return "sticky";
}

struct ReplicaRouter::State {
  std::mutex mu;
  RouterFigures figures;
  // Episodes by recent use (front: newest) and where each one's calls go.
  std::list<std::string> recent;
  struct Placed {
    int replica;
    std::list<std::string>::iterator at;
  };
  std::unordered_map<std::string, Placed> episodes;
  size_t next_round_robin = 0;
};

// Ends the call's share of a replica's load when the call (which holds it) goes; keeps the state
// alive, so it may outlive the router.
struct ReplicaRouter::Lease {
  Lease(std::shared_ptr<State> s, size_t r, int64_t n)
      : state(std::move(s)), replica(r), sequences(n) {}
  Lease(const Lease&) = delete;  // one lease, one decrement
  Lease& operator=(const Lease&) = delete;
  ~Lease() {
    std::lock_guard<std::mutex> lock(state->mu);
    state->figures.replicas[replica].in_flight -= sequences;  // the vector never shrinks
  }
  const std::shared_ptr<State> state;
  const size_t replica;
  const int64_t sequences;
};

ReplicaRouter::ReplicaRouter(RoutePolicy policy, size_t max_episodes)
    : policy_(policy),
      max_episodes_(std::max<size_t>(max_episodes, 1)),
      state_(std::make_shared<State>()) {}

int ReplicaRouter::least_loaded(const std::vector<bool>& live) const {
  const std::vector<ReplicaFigures>& r = state_->figures.replicas;
  int best = -1;
  for (size_t i = 0; i < live.size(); ++i) {
    if (!live[i]) continue;
    // Fewest sequences in flight; among equals the one that served fewer calls (spreads the
    // episodes of an idle front), then the lowest rank.
    if (best < 0 || r[i].in_flight < r[size_t(best)].in_flight ||
        (r[i].in_flight == r[size_t(best)].in_flight && r[i].calls < r[size_t(best)].calls)) {
      best = int(i);
    }
  }
  return best;
}

void ReplicaRouter::remember(const std::string& episode, int replica) {
  State& s = *state_;
  auto it = s.episodes.find(episode);
  if (it != s.episodes.end()) {
    it->second.replica = replica;
    s.recent.splice(s.recent.begin(), s.recent, it->second.at);
    return;
  }
  s.recent.push_front(episode);
  s.episodes.emplace(episode, State::Placed{replica, s.recent.begin()});
  while (s.episodes.size() > max_episodes_) {
    s.episodes.erase(s.recent.back());
    s.recent.pop_back();
  }
}

ReplicaChoice ReplicaRouter::route(std::string_view episode,
                                   const std::vector<std::shared_ptr<rpc::Client>>& replicas,
                                   int64_t sequences) {
  State& s = *state_;
  std::lock_guard<std::mutex> lock(s.mu);
  if (s.figures.replicas.size() < replicas.size()) s.figures.replicas.resize(replicas.size());
  std::vector<bool> live(replicas.size());
  size_t live_count = 0;
  for (size_t i = 0; i < replicas.size(); ++i) {
    live[i] = replicas[i] && replicas[i]->connected();
    live_count += live[i] ? 1 : 0;
  }
  if (live_count == 0) {
    s.figures.unavailable += 1;
    return {};
  }
  int chosen = -1;
  if (policy_ == RoutePolicy::kFirst) {
    chosen = live[0] ? 0 : -1;
  } else if (policy_ == RoutePolicy::kRoundRobin) {
    for (size_t tries = 0; tries < replicas.size() && chosen < 0; ++tries) {
      const size_t i = s.next_round_robin++ % replicas.size();
      if (live[i]) chosen = int(i);
    }
  } else {
    const std::string key(episode);
    auto it = key.empty() ? s.episodes.end() : s.episodes.find(key);
    if (it != s.episodes.end() && size_t(it->second.replica) < live.size() &&
        live[size_t(it->second.replica)]) {
      chosen = it->second.replica;
      s.figures.sticky_calls += 1;
    } else {
      (it == s.episodes.end() ? s.figures.new_episodes : s.figures.moved_episodes) += 1;
      chosen = least_loaded(live);
    }
    if (!key.empty()) remember(key, chosen);
  }
  if (chosen < 0) {
    s.figures.unavailable += 1;
    return {};
  }
  ReplicaFigures& f = s.figures.replicas[size_t(chosen)];
  f.calls += 1;
  f.in_flight += sequences;
  return ReplicaChoice{replicas[size_t(chosen)], chosen,
                       std::make_shared<Lease>(state_, size_t(chosen), sequences)};
}

void ReplicaRouter::forget(std::string_view episode) {
  State& s = *state_;
  std::lock_guard<std::mutex> lock(s.mu);
  auto it = s.episodes.find(std::string(episode));
  if (it == s.episodes.end()) return;
  s.recent.erase(it->second.at);
  s.episodes.erase(it);
}

RouterFigures ReplicaRouter::figures() const {
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->figures;
}

}  // namespace ajet::engine_control
