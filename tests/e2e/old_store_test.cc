// `ajet-swarm start` on a directory whose store holds an earlier run: refused without a choice
// (exit 2, naming what the store holds and both flags), continued with --resume (printing what it
// restored), moved aside with --fresh; and --conf warnings printed in full. With ajet-echo-engine.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "e2e_util.h"

namespace ajet::e2e {
namespace {

using ::testing::HasSubstr;

TEST(OldStoreTest, AnEarlierRunIsRefusedResumedOnlyWithResumeOrMovedAsideWithFresh) {
  ScratchDir dir;
  const fs::path model = fixture(false).tokenizer;
  const fs::path server = dir / "server";
  {
    SwarmProcess first(SwarmProcess::Options{server, bin("ajet-echo-engine"), "", {}, false});
    Api api(first.url());
    api.boot(config_yaml(model));
    Json episode = api.claim("client-a");
    ASSERT_EQ(api.chat(episode["openai_api_key"], user_chat("hi")).status, 200);
    ASSERT_EQ(api.end("client-a", episode["episode_uuid"], "task-1", 1.0).status, 200);
  }  // SIGTERM: the store keeps the run (engine status ROLLING)

  Captured refused = run_capture(shell_quote(bin("ajet-swarm").string()) +
                                 " start --port 0 --exp-dir " + shell_quote(server.string()) +
                                 " --engine " + shell_quote(bin("ajet-echo-engine").string()));
  EXPECT_EQ(WEXITSTATUS(refused.status), 2) << refused.out;
  EXPECT_THAT(
      refused.out,
      HasSubstr("holds an earlier run (global step 0, engine was ENGINE.ROLLING, 1 finished"));
  EXPECT_THAT(refused.out, HasSubstr("--resume"));
  EXPECT_THAT(refused.out, HasSubstr("--fresh"));

  {
    SwarmProcess resumed(SwarmProcess::Options{server, bin("ajet-echo-engine"), "", {}, true});
    EXPECT_THAT(resumed.wait_for_line("ajet-swarm: resuming the earlier run", 10s),
                HasSubstr("1 finished episodes"))
        << resumed.output();
    Api api(resumed.url());
    EXPECT_TRUE(eventually([&] { return api.engine_status() == "ENGINE.ROLLING"; }))
        << api.status().dump();
  }

  SwarmProcess fresh(
      SwarmProcess::Options{server, bin("ajet-echo-engine"), "", {"--fresh"}, false});
  const std::string moved = fresh.wait_for_line("was moved aside to", 10s);
  ASSERT_THAT(moved, HasSubstr("--fresh: the earlier run in")) << fresh.output();
  const std::string aside = moved.substr(moved.find("moved aside to ") + 15);
  EXPECT_TRUE(fs::exists(aside)) << aside;
  Api api(fresh.url());
  EXPECT_EQ(api.engine_status(), "ENGINE.OFFLINE");
  EXPECT_EQ(api.get("/get_current_batch_rollout_pool_information").json()["completed_episodes"], 0);
}

TEST(OldStoreTest, StartPrintsEveryConfigWarningInFull) {
  ScratchDir dir;
  const fs::path model = fixture(false).tokenizer;
  write_file_atomic(dir / "warn.yaml",
                    config_yaml(model, "  nonsense_key: 1\n  trainer_common:\n    save_frq: 3\n"));
  SwarmProcess swarm(SwarmProcess::Options{
      dir / "server", bin("ajet-echo-engine"), "", {"--conf", (dir / "warn.yaml").string()}});
  const std::string out = swarm.output();
  EXPECT_THAT(out, HasSubstr("ajet-swarm: warning: "));
  EXPECT_THAT(out, HasSubstr("unknown key 'ajet.nonsense_key'"));
  EXPECT_THAT(out, HasSubstr("unknown key 'ajet.trainer_common.save_frq' (ignored; did you mean "
                             "'ajet.trainer_common.save_freq'?)"));
  EXPECT_THAT(out, ::testing::Not(HasSubstr("warnings)")));
}

}  // namespace
}  // namespace ajet::e2e
