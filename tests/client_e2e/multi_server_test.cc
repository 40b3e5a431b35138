// Multi-model training against two real ajet-swarm servers (echo engine): one C++ client drives
// both with MultiEpisode; episode groups join the batches on both servers or on neither — also when
// the client is SIGKILLed mid-protocol (group_client_probe) and when one server trains in between.
#include <gmock/gmock.h>

#include "client/multi_episode.h"
#include "common/encoding.h"
#include "client_e2e_util.h"

namespace ajet::clients_test {
namespace {

using client::MultiEpisode;
using client::SwarmClient;
using client::WorkflowOutput;
using ::testing::HasSubstr;

// An echo-engine server in a directory of its own (ScratchDir is one per test; a test runs two). A
// participant names its coordinator (`ajet-swarm start --peer`): the only coordinator it may dial.
class GroupServer {
 public:
  explicit GroupServer(const std::string& backbone = "debug", int batch = 2, int repeat = 2,
                       const GroupServer* coordinator = nullptr)
      : dir_(fs::temp_directory_path() / ("ajet_group_server_" + new_uuid_hex())),
        server_(std::make_unique<EchoSwarm>(
            dir_ / "server", backbone, batch, repeat,
            coordinator != nullptr ? coordinator->url() : std::string())) {}
  ~GroupServer() {
    server_.reset();
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  const std::string& url() const { return server_->url(); }
  Json pool() { return server_->pool(); }
  int64_t completed() { return pool()["completed_episodes"].get<int64_t>(); }
  int64_t prepared() { return pool()["prepared_episodes"].get<int64_t>(); }
  Api& api() { return server_->api(); }

 private:
  fs::path dir_;
  std::unique_ptr<EchoSwarm> server_;
};

WorkflowOutput output_with(double r) {
  WorkflowOutput out;
  out.reward = r;
  return out;
}

TEST(MultiServer, OneClientEndsAGroupOnTwoServersWithTheirOwnModelsAndRewards) {
  GroupServer a, b("debug", 2, 2, &a);
  SwarmClient ca(a.url()), cb(b.url());
  std::vector<std::string> found = SwarmClient::start_multi_engine({{&ca, ""}, {&cb, ""}});
  EXPECT_EQ(found,
            (std::vector<std::string>{"ENGINE.ROLLING", "ENGINE.ROLLING"}));  // already running
  MultiEpisode group = MultiEpisode::begin({&ca, &cb});
  ASSERT_EQ(group.size(), 2u);
  EXPECT_THAT(group.episode(0).base_url, HasSubstr(a.url()));
  EXPECT_THAT(group.episode(1).base_url, HasSubstr(b.url()));
  // Each agent calls its own model with its own key; a key of one server is refused by the other.
  EXPECT_EQ(a.api().chat(group.episode(0).api_key, user_chat("hello A")).status, 200);
  EXPECT_EQ(b.api().chat(group.episode(1).api_key, user_chat("hello B")).status, 200);
  EXPECT_EQ(b.api().chat(group.episode(0).api_key, user_chat("wrong server")).status, 401);
  group.end("task-1", {output_with(1), output_with(0.25)});
  Json pa = a.pool(), pb = b.pool();
  EXPECT_EQ(pa["completed_episodes"], 1);
  EXPECT_EQ(pb["completed_episodes"], 1);
  EXPECT_EQ(pa["completed_tasks_rewards"]["task-1"], Json::array({1.0}));
  EXPECT_EQ(pb["completed_tasks_rewards"]["task-1"], Json::array({0.25}));
  EXPECT_EQ(pa["completed_client_shares"][ca.client_uuid()]["episodes"], 1);
  EXPECT_EQ(pb["prepared_episodes"], 0);
}

TEST(MultiServer, StartingSeveralEnginesNamesEveryServerThatFailed) {
  GroupServer a;
  SwarmClient ok(a.url()), down1("http://127.0.0.1:1"), down2("http://127.0.0.1:2");
  try {
    SwarmClient::start_multi_engine({{&ok, ""}, {&down1, "ajet: {}"}, {&down2, "ajet: {}"}}, false,
                                    2.0);
    FAIL() << "no error";
  } catch (const client::SwarmError& e) {
    EXPECT_THAT(e.what(), HasSubstr("failed to start 2 of 3 engines"));
    EXPECT_THAT(e.what(), HasSubstr("http://127.0.0.1:1: "));
    EXPECT_THAT(e.what(), HasSubstr("http://127.0.0.1:2: "));
  }
}

Json probe(const std::string& mode, const GroupServer& coordinator,
           const GroupServer& participant) {
  Captured r = run_capture(shell_quote(bin("group_client_probe").string()) + " " + mode + " " +
                           coordinator.url() + " " + participant.url() + " 0.5");
  Json episodes = Json::parse(r.out.substr(0, r.out.find('\n')), nullptr, false);
  EXPECT_TRUE(episodes.is_object()) << r.out;
  EXPECT_NE(r.status, 0);  // it killed itself
  return episodes;
}

TEST(MultiServer, AClientKilledAfterTheCoordinatorsCommitLeavesTheGroupCommittedOnBoth) {
  GroupServer a, b("debug", 2, 2, &a);
  Json episodes = probe("after-coordinator-commit", a, b);
  EXPECT_EQ(a.completed(), 1);
  // The participant asks the coordinator after its prepare_timeout and commits.
  ASSERT_TRUE(eventually([&] { return b.completed() == 1; })) << b.pool().dump();
  EXPECT_EQ(b.prepared(), 0);
  EXPECT_EQ(b.pool()["completed_tasks_details"]["task-1"][0], episodes["participant"]);
}

TEST(MultiServer, AClientKilledBeforeAnyCommitLeavesTheGroupOnNeither) {
  GroupServer a, b("debug", 2, 2, &a);
  Json episodes = probe("after-prepare", a, b);
  EXPECT_EQ(a.prepared(), 1);
  ASSERT_TRUE(eventually([&] { return a.prepared() == 0 && b.prepared() == 0; }))
      << b.pool().dump();
  EXPECT_EQ(a.completed(), 0);
  EXPECT_EQ(b.completed(), 0);
  // Both ends were aborted: a late commit by anyone is refused.
  auto late = b.api().post("/commit_episode",
                           Json{{"client_uuid", "x"}, {"episode_uuid", episodes["participant"]}});
  EXPECT_NE(late.status, 200);
}

TEST(MultiServer, AWeightUpdateBetweenClaimAndEndAbortsTheGroupOnBoth) {
  GroupServer a("torch", 1, 1), b("torch", 1, 1, &a);
  SwarmClient ca(a.url()), cb(b.url()), other(a.url());
  MultiEpisode group = MultiEpisode::begin({&ca, &cb});
  // Another client fills server A's batch: A trains a step while the group runs.
  client::Episode e = other.begin_episode();
  ASSERT_EQ(a.api().chat(e.api_key, user_chat("a token to train on")).status, 200);
  other.end_episode("other-task", e.episode_uuid, output_with(1));
  ASSERT_TRUE(eventually([&] { return a.api().status()["global_step"] == 1; }))
      << a.api().status().dump();
  try {
    group.end("task-1", {output_with(1), output_with(1)});
    FAIL() << "no WeightUpdatedHalfway";
  } catch (const client::WeightUpdatedHalfway& e) {
    EXPECT_THAT(e.what(), HasSubstr("step 0 -> 1"));
    EXPECT_THAT(e.what(), HasSubstr(a.url()));
  }
  EXPECT_EQ(a.completed(), 0);
  EXPECT_EQ(b.completed(), 0);
  EXPECT_EQ(a.prepared() + b.prepared(), 0);
  EXPECT_EQ(b.api().status()["global_step"], 0);
  EXPECT_EQ(b.pool()["running_episode_details"], Json(nullptr));  // B's half was aborted too
  // Redone: the next group commits on both (one task, one repeat: each server trains it).
  MultiEpisode redo = MultiEpisode::begin({&ca, &cb});
  ASSERT_EQ(a.api().chat(redo.episode(0).api_key, user_chat("model A")).status, 200);
  ASSERT_EQ(b.api().chat(redo.episode(1).api_key, user_chat("model B")).status, 200);
  redo.end("task-1", {output_with(1), output_with(0)});
  ASSERT_TRUE(eventually([&] { return b.api().status()["global_step"] == 1; }))
      << b.api().status().dump();
  ASSERT_TRUE(eventually([&] { return a.api().status()["global_step"] == 2; }))
      << a.api().status().dump();
}

}  // namespace
}  // namespace ajet::clients_test
