// `ajet-swarm overwatch --once` against the real server: the plain-text snapshot shows the engine,
// the chosen batch trigger's progress, running episodes, per-task rewards and log lines; an
// unreachable server prints CANNOT_CONNECT and exits 1.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

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
  BootedSwarm swarm("ajet-echo-engine");
  if (HasFailure()) return;
  Api& api = swarm.api();
  Json a = api.claim("watcher-client");
  Json b = api.claim("watcher-client");
  Json c = api.claim("watcher-client");
  ASSERT_EQ(api.end(a["client_uuid"], a["episode_uuid"], "task-one", 1.0).status, 200);
  ASSERT_EQ(api.end(b["client_uuid"], b["episode_uuid"], "task-one", 0.0).status, 200);
  Captured r = run_capture(shell_quote(bin("ajet-swarm").string()) + " overwatch --once --width 200 --swarm-url " +
                           shell_quote(swarm.url()));
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_THAT(line_with(r.out, "Engine:"), HasSubstr("ENGINE.ROLLING"));
  // train_batch_size 2, num_repeat 2: task-one is finished, 1 of 2 tasks; the default trigger is chosen.
  EXPECT_THAT(line_with(r.out, "Completed tasks "), HasSubstr("1 / 2"));
  EXPECT_THAT(line_with(r.out, "Completed tasks "), HasSubstr("(chosen)"));
  EXPECT_THAT(line_with(r.out, "Completed episodes"), HasSubstr("2 / 4"));
  EXPECT_THAT(line_with(r.out, "Running episodes"), HasSubstr("(1"));
  EXPECT_NE(line_with(r.out, c["episode_uuid"].get<std::string>()), "") << r.out;
  EXPECT_THAT(line_with(r.out, "task-one"), HasSubstr("+0.500 ± 0.500"));
  EXPECT_NE(r.out.find("Recent log"), std::string::npos);
  EXPECT_EQ(r.out.find("(none)"), std::string::npos) << "the server logs the engine start:\n" << r.out;
}

TEST(OverwatchOnceTest, AnUnreachableServerPrintsCannotConnectAndExits1) {
  Captured r = run_capture(shell_quote(bin("ajet-swarm").string()) +
                           " overwatch --once --refresh-interval 0.5 --swarm-url http://127.0.0.1:1");
  EXPECT_EQ(WEXITSTATUS(r.status), 1) << r.out;
  EXPECT_THAT(r.out, HasSubstr("ENGINE.CANNOT_CONNECT"));
}

}  // namespace
}  // namespace ajet::clients_test
