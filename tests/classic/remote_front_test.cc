// Classic mode against a front it did not start (`ajet --conf x.yaml --swarm-url URL`), with the
// real binaries on the micro model: the run syncs its config, starts the engine, runs its episodes
// here, writes metrics.jsonl into the local experiment directory and stops the engine at its end,
// leaving the front running and free for the next run; a run killed with kill -9 leaves the engine
// running, and the next one stops it and continues (--resume); a front that does not answer is
// named. Every wait is for a file, a log line or a process exit, never a fixed time.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>

#include "classic/experiment_dir.h"
#include "classic_fixture.h"
#include "client/swarm_client.h"
#include "common/fs.h"
#include "common/json.h"
#include "e2e/e2e_util.h"

namespace ajet::classic {
namespace {

namespace fs = std::filesystem;
using e2e::Captured;
using e2e::shell_quote;

std::string engine_status(const std::string& url) {
  return client::SwarmClient(url).get_engine_status().status;
}

// The steps of metrics.jsonl's records of `kind` (after the last resume line, when there is one).
std::vector<int64_t> steps_of(const fs::path& metrics, const std::string& kind) {
  std::vector<int64_t> steps;
  for (const Json& r : read_jsonl(metrics)) {
    if (r["kind"] == kind) steps.push_back(r["step"].get<int64_t>());
  }
  return steps;
}

// A "forever" run (long_run_yaml, experiment "run") of `ajet --swarm-url URL` in the background,
// its output in dir/OUT; returns its pid once metrics.jsonl has train step `step` (-1 and a test
// failure when it never gets there).
pid_t spawn_long_run(const e2e::ScratchDir& dir, const std::string& url, const std::string& out,
                     int64_t step) {
  if (!fs::exists(dir / "long.yaml"))
    write_file_atomic(dir / "long.yaml", long_run_yaml(micro_model()));
  const pid_t pid = spawn_ajet(dir / out, {"--conf", (dir / "long.yaml").string(), "--exp-dir",
                                           (dir / "exps").string(), "--swarm-url", url});
  if (!e2e::eventually([&] { return has_train_step(dir / "exps" / "run" / "metrics.jsonl", step); },
                       std::chrono::seconds(180))) {
    ADD_FAILURE() << "no train step " << step << ":\n" << read_file(dir / out);
    return -1;
  }
  return pid;
}

TEST(ClassicRemote, ARunDrivesARunningFrontAndLeavesItFreeForTheNext) {
  e2e::ScratchDir dir;
  const fs::path model = micro_model();
  write_file_atomic(dir / "calc.yaml", classic_yaml(model));
  e2e::SwarmProcess front(e2e::SwarmProcess::Options{dir / "front", {}, "", {}});
  ASSERT_FALSE(front.url().empty());
  const std::string args = "--conf " + shell_quote((dir / "calc.yaml").string()) + " --exp-dir " +
                           shell_quote((dir / "exps").string()) + " --swarm-url " + front.url();
  const fs::path exp = dir / "exps" / "run";

  Captured first = run_ajet(args);
  ASSERT_EQ(first.status, 0) << first.out;
  EXPECT_NE(first.out.find("front at " + front.url() + " (--swarm-url"), std::string::npos)
      << first.out;
  EXPECT_EQ(steps_of(exp / "metrics.jsonl", "train"), (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(steps_of(exp / "metrics.jsonl", "validation"), (std::vector<int64_t>{0, 1, 2}));
  EXPECT_TRUE(fs::exists(exp / "reward_curve.html"));
  // The engine is stopped, the front still serves; the front's files are in its own directory.
  EXPECT_EQ(engine_status(front.url()), client::kOffline);
  EXPECT_GT(front.pid(), 0);
  EXPECT_FALSE(e2e::process_gone(front.pid()));
  EXPECT_TRUE(fs::exists(dir / "front" / "experiments" / "run" / "train_config.yaml"));
  EXPECT_FALSE(fs::exists(exp / "swarm"));
  EXPECT_FALSE(fs::exists(exp / "swarm.log"));
  EXPECT_FALSE(fs::exists(exp / "train_config.yaml"));
  EXPECT_FALSE(fs::exists(exp / "ajet.pid"));

  // The same front again: a second run works; the first run's local files are moved aside.
  Captured second = run_ajet(args);
  ASSERT_EQ(second.status, 0) << second.out;
  EXPECT_NE(second.out.find("held an earlier run"), std::string::npos) << second.out;
  EXPECT_EQ(steps_of(exp / "metrics.jsonl", "train"), (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(steps_of(exp / "metrics.jsonl", "validation"), (std::vector<int64_t>{0, 1, 2}));
  EXPECT_EQ(engine_status(front.url()), client::kOffline);
  EXPECT_FALSE(e2e::process_gone(front.pid()));
}

// kill -9 of ajet leaves the front's engine rolling (ajet did not start the front, so nothing dies
// with it); --resume on the same front stops that engine, continues after the last step in
// metrics.jsonl (debug: nothing trained) and stops the engine at its end.
TEST(ClassicRemote, AKilledRunLeavesTheEngineAndTheResumeStopsItAndContinues) {
  e2e::ScratchDir dir;
  const fs::path model = micro_model();
  write_file_atomic(dir / "long.yaml", long_run_yaml(model));
  e2e::SwarmProcess front(e2e::SwarmProcess::Options{dir / "front", {}, "", {}});
  ASSERT_FALSE(front.url().empty());
  const fs::path exp = dir / "exps" / "run";
  std::vector<std::string> args = {"--conf",      (dir / "long.yaml").string(),
                                   "--exp-dir",   (dir / "exps").string(),
                                   "--swarm-url", front.url()};
  pid_t pid = spawn_ajet(dir / "out1.txt", args);
  ASSERT_TRUE(e2e::eventually([&] { return has_train_step(exp / "metrics.jsonl", 2); },
                              std::chrono::seconds(180)))
      << read_file(dir / "out1.txt");
  ::kill(pid, SIGKILL);
  wait_exit(pid, std::chrono::seconds(30));
  EXPECT_NE(engine_status(front.url()), client::kOffline);
  const int64_t done = steps_of(exp / "metrics.jsonl", "train").back();

  args.insert(args.end(), {"--resume", "--set",
                           "ajet.trainer_common.total_training_steps=" + std::to_string(done + 1)});
  pid = spawn_ajet(dir / "out2.txt", args);
  const int status = wait_exit(pid, std::chrono::seconds(300));
  const std::string out = read_file(dir / "out2.txt");
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status << "\n" << out;
  EXPECT_NE(out.find("the front's engine is ENGINE."), std::string::npos) << out;
  EXPECT_NE(out.find("continuing after step " + std::to_string(done)), std::string::npos) << out;
  const std::vector<Json> records = read_jsonl(exp / "metrics.jsonl");
  ASSERT_GE(records.size(), 2u);
  EXPECT_EQ(records[records.size() - 2]["kind"], "resume");
  EXPECT_EQ(records.back()["kind"], "train");
  EXPECT_EQ(records.back()["step"], done + 1);
  EXPECT_EQ(engine_status(front.url()), client::kOffline);
  EXPECT_FALSE(e2e::process_gone(front.pid()));
}

// SIGTERM (what `ajet research` sends a trial it stops) ends the run cleanly: the engine on the
// front is stopped, the front itself keeps running.
TEST(ClassicRemote, SigtermStopsTheEngineOnTheFrontButNotTheFront) {
  e2e::ScratchDir dir;
  e2e::SwarmProcess front(e2e::SwarmProcess::Options{dir / "front", {}, "", {}});
  ASSERT_FALSE(front.url().empty());
  const pid_t pid = spawn_long_run(dir, front.url(), "out.txt", 1);
  ASSERT_GT(pid, 0);
  ::kill(pid, SIGTERM);
  const int status = wait_exit(pid, std::chrono::seconds(90));
  const std::string out = read_file(dir / "out.txt");
  ASSERT_TRUE(WIFEXITED(status)) << status << "\n" << out;
  EXPECT_EQ(WEXITSTATUS(status), 128 + SIGTERM) << out;
  EXPECT_NE(out.find("stopping the engine on the front"), std::string::npos) << out;
  EXPECT_EQ(engine_status(front.url()), client::kOffline);
  EXPECT_FALSE(e2e::process_gone(front.pid()));
}

// The torch backbone: checkpoints stay on the front (under its directory of the experiment);
// --resume continues from the front's newest checkpoint while it is this run's, and starts the run
// again from step 0 (the earlier local files moved aside) once another experiment ran there since.
TEST(ClassicRemote, ResumeContinuesFromTheFrontsCheckpointOnlyWhileItIsThisRuns) {
  e2e::ScratchDir dir;
  std::string yaml = classic_yaml(micro_model());
  yaml.replace(yaml.find("backbone: debug"), 15, "backbone: torch");
  yaml.replace(yaml.find("test_freq: 1"), 12, "test_freq: 1\n    save_freq: 1");
  write_file_atomic(dir / "torch.yaml", yaml);
  e2e::SwarmProcess front(e2e::SwarmProcess::Options{dir / "front", {}, "", {}});
  ASSERT_FALSE(front.url().empty());
  const std::string args = "--conf " + shell_quote((dir / "torch.yaml").string()) + " --exp-dir " +
                           shell_quote((dir / "exps").string()) + " --swarm-url " + front.url();
  const fs::path exp = dir / "exps" / "run";
  const fs::path checkpoints = dir / "front" / "experiments" / "run" / "saved_checkpoints";

  Captured r = run_ajet(args);
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("final model: " + (checkpoints / "global_step_2" / "model").string() +
                       " on the front"),
            std::string::npos)
      << r.out;
  EXPECT_FALSE(fs::exists(exp / "saved_checkpoints"));

  r = run_ajet(args + " --resume --set ajet.trainer_common.total_training_steps=3");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("continuing after step 2 of 3 (global step 2)"), std::string::npos) << r.out;
  EXPECT_EQ(steps_of(exp / "metrics.jsonl", "train"), (std::vector<int64_t>{1, 2, 3}));
  EXPECT_EQ(read_jsonl(exp / "metrics.jsonl").back()["kind"], "validation");
  EXPECT_TRUE(fs::is_directory(checkpoints / "global_step_3" / "model"));

  r = run_ajet(args + " --set ajet.experiment_name=other");
  ASSERT_EQ(r.status, 0) << r.out;
  r = run_ajet(args + " --resume --set ajet.trainer_common.total_training_steps=2");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("holds no checkpoint of this run (its newest, " + (dir / "front").string() +
                       "/experiments/other/saved_checkpoints/global_step_2, is another "
                       "experiment's); starting the "
                       "run again from step 0"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("held an earlier run"), std::string::npos) << r.out;
  EXPECT_EQ(steps_of(exp / "metrics.jsonl", "train"), (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(steps_of(exp / "metrics.jsonl", "resume"), (std::vector<int64_t>{}));
  EXPECT_EQ(client::SwarmClient(front.url()).get_engine_status().status, client::kOffline);
}

// A front shared by two experiments: a run does not stop another experiment's engine unless told to
// (--force-restart); the run whose engine was replaced stops on its own and leaves the new engine
// to the run that started it.
TEST(ClassicRemote, AnotherExperimentsEngineIsLeftAloneUnlessForceRestart) {
  e2e::ScratchDir dir;
  e2e::SwarmProcess front(e2e::SwarmProcess::Options{dir / "front", {}, "", {}});
  ASSERT_FALSE(front.url().empty());
  const pid_t first = spawn_long_run(dir, front.url(), "out1.txt", 1);
  ASSERT_GT(first, 0);
  const Json first_run = client::SwarmClient(front.url()).get_engine_status().body["engine_run"];
  ASSERT_TRUE(first_run.is_string());

  const std::string other =
      "--conf " + shell_quote((dir / "long.yaml").string()) + " --exp-dir " +
      shell_quote((dir / "exps").string()) + " --swarm-url " + front.url() +
      " --set ajet.experiment_name=other --set ajet.trainer_common.total_training_steps=2";
  Captured refused = run_ajet(other);
  EXPECT_EQ(WEXITSTATUS(refused.status), 1) << refused.out;
  EXPECT_NE(refused.out.find("the front's engine is ENGINE."), std::string::npos) << refused.out;
  EXPECT_NE(
      refused.out.find("not this run's experiment 'other'; stopping it would end that training"),
      std::string::npos)
      << refused.out;
  EXPECT_NE(refused.out.find("--force-restart"), std::string::npos) << refused.out;
  EXPECT_EQ(client::SwarmClient(front.url()).get_engine_status().body["engine_run"], first_run);
  EXPECT_EQ(::waitpid(first, nullptr, WNOHANG), 0) << "the first run ended:\n"
                                                   << read_file(dir / "out1.txt");

  Captured forced = run_ajet(other + " --force-restart");
  ASSERT_EQ(forced.status, 0) << forced.out;
  EXPECT_NE(forced.out.find("stopping it so this run's config can be synced (--force-restart;"),
            std::string::npos)
      << forced.out;
  EXPECT_EQ(steps_of(dir / "exps" / "other" / "metrics.jsonl", "train"),
            (std::vector<int64_t>{1, 2}));
  const int status = wait_exit(first, std::chrono::seconds(300));
  const std::string out1 = read_file(dir / "out1.txt");
  ASSERT_TRUE(WIFEXITED(status)) << status << "\n" << out1;
  EXPECT_EQ(WEXITSTATUS(status), 1) << out1;
  // Replaced while it waited (or found the engine OFFLINE in between): either way it stopped
  // nothing.
  EXPECT_TRUE(out1.find("the front's engine is no longer this run's") != std::string::npos ||
              out1.find("is no longer the one this client follows") != std::string::npos ||
              out1.find("ENGINE.OFFLINE") != std::string::npos)
      << out1;
  EXPECT_EQ(engine_status(front.url()), client::kOffline);
  EXPECT_FALSE(e2e::process_gone(front.pid()));
}

// Someone stops the run's engine (a plain stop_engine) and nobody starts another: the run, whatever
// it was doing, ends with an error naming ENGINE.OFFLINE instead of waiting for an engine forever.
TEST(ClassicRemote, ARunWhoseEngineIsStoppedUnderItEnds) {
  e2e::ScratchDir dir;
  e2e::SwarmProcess front(e2e::SwarmProcess::Options{dir / "front", {}, "", {}});
  ASSERT_FALSE(front.url().empty());
  const pid_t pid = spawn_long_run(dir, front.url(), "out.txt", 2);
  ASSERT_GT(pid, 0);
  client::SwarmClient(front.url()).stop_engine(true, 60.0);
  const int status = wait_exit(pid, std::chrono::seconds(120));
  const std::string out = read_file(dir / "out.txt");
  ASSERT_TRUE(WIFEXITED(status)) << status << "\n" << out;
  EXPECT_EQ(WEXITSTATUS(status), 1) << out;
  EXPECT_NE(out.find("ENGINE.OFFLINE"), std::string::npos) << out;
  EXPECT_EQ(engine_status(front.url()), client::kOffline);
}

TEST(ClassicRemote, AFrontThatDoesNotAnswerIsNamedAndBadFlagsAreRefused) {
  e2e::ScratchDir dir;
  write_file_atomic(dir / "calc.yaml", classic_yaml(micro_model()));
  const std::string conf = "--conf " + shell_quote((dir / "calc.yaml").string()) + " --exp-dir " +
                           shell_quote((dir / "exps").string());
  e2e::ClosedPort dead;
  Captured r = run_ajet(conf + " --swarm-url " + dead.url());
  EXPECT_EQ(WEXITSTATUS(r.status), 1) << r.out;
  EXPECT_NE(r.out.find("--swarm-url " + dead.url() + ": the front does not answer"),
            std::string::npos)
      << r.out;
  EXPECT_FALSE(fs::exists(dir / "exps" / "run" / "ajet.pid"));
  r = run_ajet(conf + " --swarm-url 127.0.0.1:10086");
  EXPECT_EQ(WEXITSTATUS(r.status), 2) << r.out;
  EXPECT_NE(r.out.find("expected http://HOST:PORT"), std::string::npos) << r.out;
  r = run_ajet(conf + " --swarm-url " + dead.url() + " --swarm-flag=--engine=/x");
  EXPECT_EQ(WEXITSTATUS(r.status), 2) << r.out;
  EXPECT_NE(r.out.find("give one or the other"), std::string::npos) << r.out;
  r = run_ajet(conf + " --force-restart");
  EXPECT_EQ(WEXITSTATUS(r.status), 2) << r.out;
  EXPECT_NE(r.out.find("--force-restart needs --swarm-url"), std::string::npos) << r.out;
}

}  // namespace
}  // namespace ajet::classic
