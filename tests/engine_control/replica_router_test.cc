// Which engine replica serves a call: the router over real RPC connections (one rpc::Server per
// replica on a Unix socket, with no methods: the router only needs to know who is connected).
#include "engine_control/replica_router.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "common/error.h"
#include "rpc/client.h"
#include "rpc/router.h"
#include "rpc/server.h"

namespace ajet::engine_control {
namespace {

std::string socket_path() {
  static std::atomic<int> counter{0};
  return (std::filesystem::temp_directory_path() /
          ("ajet-rr-" + std::to_string(::getpid()) + "-" + std::to_string(counter++) + ".sock"))
      .string();
}

// N listening replicas and a connected client to each.
struct Replicas {
  explicit Replicas(int n) {
    for (int i = 0; i < n; ++i) {
      routers.push_back(std::make_unique<rpc::Router>());
      servers.push_back(std::make_unique<rpc::Server>(*routers.back()));
      const std::string address = "unix:" + socket_path();
      servers.back()->listen(address);
      clients.push_back(std::make_shared<rpc::Client>(address));
      clients.back()->connect();
    }
  }
  ~Replicas() {
    for (auto& c : clients) c->close();
    for (auto& s : servers) s->stop();
  }
  std::vector<std::unique_ptr<rpc::Router>> routers;
  std::vector<std::unique_ptr<rpc::Server>> servers;
  std::vector<std::shared_ptr<rpc::Client>> clients;
};

TEST(ReplicaRouter, AnEpisodesCallsStayOnTheReplicaOfItsFirstCall) {
  Replicas r(2);
  ReplicaRouter router;
  // Two episodes start while the front is idle: each goes to another replica.
  ReplicaChoice a1 = router.route("episode-a", r.clients);
  ReplicaChoice b1 = router.route("episode-b", r.clients);
  ASSERT_NE(a1.client, nullptr);
  ASSERT_NE(b1.client, nullptr);
  EXPECT_NE(a1.replica, b1.replica);
  // Later calls follow their episode, whatever the load.
  std::vector<ReplicaChoice> held;
  for (int i = 0; i < 5; ++i) {
    held.push_back(router.route("episode-a", r.clients));
    EXPECT_EQ(held.back().replica, a1.replica);
    EXPECT_EQ(held.back().client, r.clients[size_t(a1.replica)]);
  }
  EXPECT_EQ(router.route("episode-b", r.clients).replica, b1.replica);
  const RouterFigures f = router.figures();
  EXPECT_EQ(f.new_episodes, 2);
  EXPECT_EQ(f.sticky_calls, 6);
  EXPECT_EQ(f.moved_episodes, 0);
  EXPECT_EQ(f.replicas[size_t(a1.replica)].calls, 6);
}

TEST(ReplicaRouter, ANewEpisodeGoesToTheReplicaWithFewestSequencesInFlight) {
  Replicas r(3);
  ReplicaRouter router;
  // Replica 0 gets an episode with 8 sequences in flight, replica 1 one with 2.
  ReplicaChoice busy = router.route("busy", r.clients, 8);
  ReplicaChoice light = router.route("light", r.clients, 2);
  ReplicaChoice idle = router.route("idle", r.clients, 1);
  EXPECT_EQ(busy.replica, 0);
  EXPECT_EQ(light.replica, 1);
  EXPECT_EQ(idle.replica, 2);
  EXPECT_EQ(router.route("next", r.clients).replica, 2);  // 1 + 1 in flight there, still fewest
  {
    const RouterFigures f = router.figures();
    EXPECT_EQ(f.replicas[0].in_flight, 8);
    EXPECT_EQ(f.replicas[1].in_flight, 2);
    EXPECT_EQ(f.replicas[2].in_flight, 1);  // "next"'s lease was dropped at once
  }
  // Calls end when their leases go: replica 0 is the least loaded again.
  busy = {};
  EXPECT_EQ(router.figures().replicas[0].in_flight, 0);
  EXPECT_EQ(router.route("after", r.clients).replica, 0);
}

TEST(ReplicaRouter, EpisodesOfAReplicaThatIsGoneMoveAndNoCallGoesThere) {
  Replicas r(2);
  ReplicaRouter router;
  const int first = router.route("a", r.clients).replica;
  r.clients[size_t(first)]->close();  // the replica died (its connection is gone)
  ReplicaChoice again = router.route("a", r.clients);
  ASSERT_NE(again.client, nullptr);
  EXPECT_NE(again.replica, first);
  EXPECT_EQ(router.figures().moved_episodes, 1);
  for (int i = 0; i < 4; ++i)
    EXPECT_NE(router.route("n" + std::to_string(i), r.clients).replica, first);
  // It stays on its new replica.
  EXPECT_EQ(router.route("a", r.clients).replica, again.replica);
  // None connected: no replica, counted.
  r.clients[size_t(again.replica)]->close();
  EXPECT_EQ(router.route("a", r.clients).client, nullptr);
  EXPECT_EQ(router.figures().unavailable, 1);
}

TEST(ReplicaRouter, RoundRobinAndFirstIgnoreEpisodes) {
  Replicas r(2);
  ReplicaRouter round_robin(RoutePolicy::kRoundRobin);
  std::vector<int> seen;
  for (int i = 0; i < 4; ++i) seen.push_back(round_robin.route("same", r.clients).replica);
  EXPECT_EQ(seen, (std::vector<int>{0, 1, 0, 1}));
  ReplicaRouter first(RoutePolicy::kFirst);
  for (const char* e : {"a", "b", "c"}) EXPECT_EQ(first.route(e, r.clients).replica, 0);
  EXPECT_EQ(parse_route_policy("round_robin"), RoutePolicy::kRoundRobin);
  try {
    parse_route_policy("random");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("sticky, round_robin or first"), std::string::npos);
  }
}

TEST(ReplicaRouter, RemembersABoundedNumberOfEpisodes) {
  Replicas r(2);
  ReplicaRouter router(RoutePolicy::kSticky, /*max_episodes=*/2);
  router.route("a", r.clients);
  router.route("b", r.clients);
  router.route("a", r.clients);  // a is the most recent now
  router.route("c", r.clients);  // b is forgotten
  EXPECT_EQ(router.figures().new_episodes, 3);
  router.route("a", r.clients);
  EXPECT_EQ(router.figures().new_episodes, 3);  // a was remembered
  router.route("b", r.clients);
  EXPECT_EQ(router.figures().new_episodes, 4);  // b was not
  router.forget("a");
  router.route("a", r.clients);
  EXPECT_EQ(router.figures().new_episodes, 5);
}

TEST(ReplicaRouter, ALeaseMayOutliveItsRouter) {
  Replicas r(1);
  ReplicaChoice kept;
  {
    ReplicaRouter router;
    kept = router.route("a", r.clients);
  }
  kept = {};  // no use after free (the sanitizer builds catch one)
  SUCCEED();
}

}  // namespace
}  // namespace ajet::engine_control
