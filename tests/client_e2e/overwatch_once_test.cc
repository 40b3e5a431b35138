// `ajet-swarm overwatch --once` against the real server: the plain-text snapshot shows the engine,
// the chosen batch trigger's progress, running episodes, per-task rewards and log lines; an
// unreachable server prints CANNOT_CONNECT and exits 1. With two servers (multi-model training, one
// client driving both with MultiEpisode) it prints one block per server with its own step,
// progress, newest trained batch and client shares.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "client/multi_episode.h"
#include "client_e2e/client_e2e_util.h"

namespace ajet::clients_test {
namespace {

using ::testing::HasSubstr;

std::string line_with(const std::string& text, const std::string& needle) {
  size_t at = text.find(needle);
  if (at == std::string::npos) return "";
  size_t begin = text.rfind('\n', at);
  begin = begin == std::string::npos ? 0 : begin + 1;
  return text.substr(begin, text.find('\n', at) - begin);
}

TEST(OverwatchOnceTest, SnapshotShowsProgressEpisodesRewardsAndLogs) {
  BootedSwarm swarm("ajet-echo-engine", "", 2, "watch-admin");
  if (HasFailure()) return;
  Api& api = swarm.api();
  Json a = api.claim("watcher-client");
  Json b = api.claim("watcher-client");
  Json c = api.claim("watcher-client");
  ASSERT_EQ(api.end(a["client_uuid"], a["episode_uuid"], "task-one", 1.0).status, 200);
  ASSERT_EQ(api.end(b["client_uuid"], b["episode_uuid"], "task-one", 0.0).status, 200);
  const std::string overwatch = shell_quote(bin("ajet-swarm").string()) +
                                " overwatch --once --width 200 --swarm-url " +
                                shell_quote(swarm.url());
  // Without the admin token another client's episode is listed under a pseudonym, not its uuid.
  Captured anonymous = run_capture("env -u AJET_ADMIN_TOKEN -u AJET_ADMIN_TOKENS " + overwatch);
  ASSERT_EQ(anonymous.status, 0) << anonymous.out;
  EXPECT_THAT(line_with(anonymous.out, "Running episodes"), HasSubstr("(1"));
  EXPECT_EQ(line_with(anonymous.out, c["episode_uuid"].get<std::string>()), "") << anonymous.out;
  EXPECT_EQ(anonymous.out.find("watcher-client"), std::string::npos) << anonymous.out;
  Captured r = run_capture("AJET_ADMIN_TOKEN=watch-admin " + overwatch);
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_THAT(line_with(r.out, "Engine:"), HasSubstr("ENGINE.ROLLING"));
  // train_batch_size 2, num_repeat 2: task-one is finished, 1 of 2 tasks; the default trigger is
  // chosen.
  EXPECT_THAT(line_with(r.out, "Completed tasks "), HasSubstr("1 / 2"));
  EXPECT_THAT(line_with(r.out, "Completed tasks "), HasSubstr("(chosen)"));
  EXPECT_THAT(line_with(r.out, "Completed episodes"), HasSubstr("2 / 4"));
  EXPECT_THAT(line_with(r.out, "Running episodes"), HasSubstr("(1"));
  EXPECT_NE(line_with(r.out, c["episode_uuid"].get<std::string>()), "") << r.out;
  EXPECT_THAT(line_with(r.out, "task-one"), HasSubstr("+0.500 ± 0.500"));
  EXPECT_NE(r.out.find("Recent log"), std::string::npos);
  EXPECT_EQ(r.out.find("(none)"), std::string::npos) << "the server logs the engine start:\n"
                                                     << r.out;
}

// The block of `text` that starts at `heading` and ends before the next "Server " heading.
std::string block_of(const std::string& text, const std::string& heading) {
  size_t at = text.find(heading);
  if (at == std::string::npos) return "";
  size_t next = text.find("\nServer ", at + 1);
  return text.substr(at, next == std::string::npos ? std::string::npos : next - at);
}

TEST(OverwatchOnceTest, SeveralServersShowOneBlockEachWithStepMetricsAndClientShares) {
  ScratchDir scratch;
  // Model A trains every episode (torch backbone, batch 1 x 1); model B collects (debug, batch 2 x
  // 2).
  EchoSwarm a(scratch / "model-a", "torch", 1, 1);
  EchoSwarm b(scratch / "model-b", "debug", 2, 2, a.url());
  if (HasFailure()) return;
  client::SwarmClient ca(a.url()), cb(b.url());
  client::MultiEpisode group = client::MultiEpisode::begin({&ca, &cb});
  ASSERT_EQ(a.api().chat(group.episode(0).api_key, user_chat("model A")).status, 200);
  ASSERT_EQ(b.api().chat(group.episode(1).api_key, user_chat("model B")).status, 200);
  client::WorkflowOutput ra, rb;
  ra.reward = 1.0;
  rb.reward = 0.25;
  group.end("task-1", {ra, rb});
  ASSERT_TRUE(eventually([&] { return a.api().status()["global_step"] == 1; }))
      << a.api().status().dump();

  // With the admin token overwatch shows every client's id (a caller without it sees pseudonyms).
  const std::string overwatch = "AJET_ADMIN_TOKEN=" + kEchoAdminToken + " " +
                                shell_quote(bin("ajet-swarm").string()) +
                                " overwatch --once --width 200";
  Captured r = run_capture(overwatch + " --swarm-url " + shell_quote(a.url() + "," + b.url()));
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_THAT(r.out, HasSubstr("2 servers"));
  const std::string block_a = block_of(r.out, "Server 1 of 2: " + a.url());
  const std::string block_b = block_of(r.out, "Server 2 of 2: " + b.url());
  ASSERT_NE(block_a, "") << r.out;
  ASSERT_NE(block_b, "") << r.out;
  // A trained the group's episode as step 0 (reward 1; the echo engine reports loss 0 and no KL).
  EXPECT_THAT(line_with(block_a, "Engine:"), HasSubstr("global step 1  backbone torch"));
  EXPECT_THAT(line_with(block_a, "Newest trained batch"), HasSubstr("step 0"));
  EXPECT_THAT(line_with(block_a, "Newest trained batch"), HasSubstr("reward mean +1.000"));
  EXPECT_THAT(line_with(block_a, "Newest trained batch"), HasSubstr("loss 0.0000  KL -"));
  EXPECT_THAT(line_with(block_a, "Client shares of this batch"),
              HasSubstr("(0)"));  // a fresh batch
  // B holds its half of the group in the batch being collected: 1 of 4 episodes, all from one
  // client.
  EXPECT_THAT(line_with(block_b, "Engine:"), HasSubstr("global step 0  backbone debug"));
  EXPECT_THAT(line_with(block_b, "Completed episodes"), HasSubstr("1 / 4"));
  EXPECT_THAT(line_with(block_b, "Newest trained batch"),
              HasSubstr("none (debug backbone: 0 batches recorded"));
  EXPECT_THAT(line_with(block_b, cb.client_uuid().substr(0, 32)), HasSubstr("100%"));
  EXPECT_THAT(line_with(block_b, cb.client_uuid().substr(0, 32)), HasSubstr("1 episodes"));

  // The flag repeated reads the same; a third server that is down gets its own block and exit
  // code 1.
  Captured repeated =
      run_capture(overwatch + " --url " + shell_quote(a.url()) + " --swarm-url " +
                  shell_quote(b.url()) + " --swarm-url http://127.0.0.1:1 --refresh-interval 0.5");
  EXPECT_EQ(WEXITSTATUS(repeated.status), 1) << repeated.out;
  EXPECT_THAT(repeated.out, HasSubstr("3 servers"));
  EXPECT_THAT(block_of(repeated.out, "Server 2 of 3: " + b.url()), HasSubstr("1 / 4"));
  EXPECT_THAT(block_of(repeated.out, "Server 3 of 3: http://127.0.0.1:1"),
              HasSubstr("ENGINE.CANNOT_CONNECT"));
}

TEST(OverwatchOnceTest, AnUnreachableServerPrintsCannotConnectAndExits1) {
  Captured r =
      run_capture(shell_quote(bin("ajet-swarm").string()) +
                  " overwatch --once --refresh-interval 0.5 --swarm-url http://127.0.0.1:1");
  EXPECT_EQ(WEXITSTATUS(r.status), 1) << r.out;
  EXPECT_THAT(r.out, HasSubstr("ENGINE.CANNOT_CONNECT"));
}

}  // namespace
}  // namespace ajet::clients_test
