// Classic mode against what users do to it, with the real binaries on the micro model: a closed
// terminal (SIGHUP), `ajet … | head` (a closed stdout), kill -9 and a rerun of the same experiment
// (leftovers stopped, the earlier run moved aside, or continued with --resume from its checkpoint),
// a second ajet on a running experiment, and the command line's version, usage errors and hints.
// Every wait is for a file, a log line or a process exit, never a fixed time.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include "classic/experiment_dir.h"
#include "classic_fixture.h"
#include "common/fs.h"
#include "common/json.h"
#include "e2e/e2e_util.h"

namespace ajet::classic {
namespace {

namespace fs = std::filesystem;
using e2e::bin;
using e2e::Captured;
using e2e::shell_quote;

fs::path only_entry(const fs::path& dir) {
  std::vector<fs::path> entries;
  if (fs::is_directory(dir)) {
    for (const auto& e : fs::directory_iterator(dir)) entries.push_back(e.path());
  }
  return entries.size() == 1 ? entries[0] : fs::path();
}

// A closed terminal (SIGHUP) stops the run like Ctrl-C: the front and the engine are stopped, none
// outlives ajet, and the next run of the same experiment starts cleanly, the earlier one moved
// aside.
TEST(ClassicRobust, SighupStopsFrontAndEngineAndARerunStartsCleanly) {
  e2e::ScratchDir dir;
  const fs::path model = micro_model();
  write_file_atomic(dir / "long.yaml", long_run_yaml(model));
  const fs::path exp = dir / "exps" / "run";
  pid_t pid = spawn_ajet(dir / "out.txt", {"--conf", (dir / "long.yaml").string(), "--exp-dir",
                                           (dir / "exps").string()});
  ASSERT_TRUE(e2e::eventually([&] { return has_train_step(exp / "metrics.jsonl", 1); },
                              std::chrono::seconds(180)))
      << read_file(dir / "out.txt");
  // The pid file names this ajet and its front; the front and its engine run on this experiment.
  Json pids = Json::parse(read_file(exp / "ajet.pid"));
  EXPECT_EQ(pids["ajet_pid"].get<int64_t>(), pid);
  const std::vector<Leftover> running = find_leftovers(exp);
  ASSERT_EQ(running.size(), 2u) << read_file(dir / "out.txt");
  bool front_listed = false;
  for (const auto& l : running)
    front_listed = front_listed || l.pid == pids["front_pid"].get<pid_t>();
  EXPECT_TRUE(front_listed);

  ::kill(pid, SIGHUP);
  const int status = wait_exit(pid, std::chrono::seconds(90));
  ASSERT_TRUE(WIFEXITED(status)) << status << "\n" << read_file(dir / "out.txt");
  EXPECT_EQ(WEXITSTATUS(status), 128 + SIGHUP) << read_file(dir / "out.txt");
  EXPECT_NE(read_file(exp / "swarm.log").find("ajet-swarm: stopped"), std::string::npos);
  for (const auto& l : running)
    EXPECT_TRUE(e2e::process_gone(l.pid)) << l.program << " " << l.pid << " survived";
  EXPECT_FALSE(fs::exists(exp / "ajet.pid"));

  // The same experiment again (2 steps): it runs, and the earlier run's files are kept aside.
  write_file_atomic(dir / "short.yaml", classic_yaml(model));
  Captured r = run_ajet("--conf " + shell_quote((dir / "short.yaml").string()) + " --exp-dir " +
                        shell_quote((dir / "exps").string()));
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("held an earlier run"), std::string::npos) << r.out;
  const fs::path earlier = only_entry(exp / "earlier");
  ASSERT_FALSE(earlier.empty());
  EXPECT_TRUE(has_train_step(earlier / "metrics.jsonl", 1));
  EXPECT_TRUE(fs::exists(earlier / "swarm" / "swarm.sqlite"));
  int train = 0;
  for (const auto& rec : read_jsonl(exp / "metrics.jsonl")) train += rec["kind"] == "train" ? 1 : 0;
  EXPECT_EQ(train, 2);
}

// `ajet … | head -n 1`: the closed pipe stops the run cleanly (no SIGPIPE death), nothing left
// running.
TEST(ClassicRobust, AClosedStdoutStopsTheRunCleanly) {
  e2e::ScratchDir dir;
  const fs::path model = micro_model();
  write_file_atomic(dir / "long.yaml", long_run_yaml(model));
  const fs::path exp = dir / "exps" / "run";
  const std::string script =
      shell_quote(bin("ajet").string()) + " --conf " + shell_quote((dir / "long.yaml").string()) +
      " --exp-dir " + shell_quote((dir / "exps").string()) + " 2>" +
      shell_quote((dir / "err.txt").string()) + " | head -n 1; echo \"ajet exit ${PIPESTATUS[0]}\"";
  Captured r = e2e::run_capture("bash -c " + shell_quote(script));
  EXPECT_NE(r.out.find("ajet exit 141"), std::string::npos) << r.out << read_file(dir / "err.txt");
  EXPECT_NE(read_file(dir / "err.txt").find("stdout was closed"), std::string::npos)
      << read_file(dir / "err.txt");
  EXPECT_NE(read_file(exp / "swarm.log").find("ajet-swarm: stopped"), std::string::npos);
  EXPECT_TRUE(find_leftovers(exp).empty());
}

// A front left running on the experiment (say, started by hand on its directory) is stopped by the
// next run, which names it; the earlier metrics are moved aside, never wiped.
TEST(ClassicRobust, ARerunStopsALeftoverFrontAndKeepsTheEarlierMetrics) {
  e2e::ScratchDir dir;
  const fs::path model = micro_model();
  write_file_atomic(dir / "calc.yaml", classic_yaml(model));
  const std::string args = "--conf " + shell_quote((dir / "calc.yaml").string()) + " --exp-dir " +
                           shell_quote((dir / "exps").string());
  Captured first = run_ajet(args);
  ASSERT_EQ(first.status, 0) << first.out;
  const fs::path exp = dir / "exps" / "run";
  e2e::SwarmProcess leftover(e2e::SwarmProcess::Options{exp / "swarm", {}, "", {}});
  const pid_t leftover_pid = leftover.pid();
  ASSERT_GT(leftover_pid, 0);

  Captured second = run_ajet(args);
  ASSERT_EQ(second.status, 0) << second.out;
  EXPECT_NE(
      second.out.find("ajet-swarm pid " + std::to_string(leftover_pid) + " of an earlier run"),
      std::string::npos)
      << second.out;
  EXPECT_TRUE(
      e2e::eventually([&] { return e2e::process_gone(leftover_pid); }, std::chrono::seconds(30)));
  const fs::path earlier = only_entry(exp / "earlier");
  ASSERT_FALSE(earlier.empty()) << second.out;
  EXPECT_EQ(read_jsonl(earlier / "metrics.jsonl").size(), read_jsonl(exp / "metrics.jsonl").size());
  EXPECT_NE(second.out.find(earlier.string()), std::string::npos) << second.out;
}

// A second ajet on an experiment that is running is refused with the first one's pid; the lock goes
// when its holder does.
TEST(ClassicRobust, ASecondAjetOnARunningExperimentIsRefused) {
  e2e::ScratchDir dir;
  const fs::path model = micro_model();
  write_file_atomic(dir / "calc.yaml", classic_yaml(model));
  {
    ExperimentLock held(dir / "exps" / "run");
    Captured r = run_ajet("--conf " + shell_quote((dir / "calc.yaml").string()) + " --exp-dir " +
                          shell_quote((dir / "exps").string()));
    EXPECT_EQ(WEXITSTATUS(r.status), 1) << r.out;
    EXPECT_NE(r.out.find("is being run by ajet pid " + std::to_string(::getpid())),
              std::string::npos)
        << r.out;
  }
  ExperimentLock again(dir / "exps" / "run");  // released: taken again without error
}

// The torch backbone: checkpoints go under the experiment directory and are named by the step the
// launcher and the engine log report; after kill -9, --resume continues from the newest checkpoint
// (step, weights, optimizer, task order) and appends to metrics.jsonl; the end names the final
// model.
TEST(ClassicRobust, TorchCheckpointsStayInTheExperimentAndResumeContinuesAfterKill9) {
  e2e::ScratchDir dir;
  const fs::path model = micro_model();
  std::string yaml = long_run_yaml(model, "torch");
  yaml.replace(yaml.find("test_freq: 0"), 12, "test_freq: 0\n    save_freq: 1");
  write_file_atomic(dir / "torch.yaml", yaml);
  const fs::path exp = dir / "exps" / "run";
  const std::vector<std::string> base = {"--conf", (dir / "torch.yaml").string(), "--exp-dir",
                                         (dir / "exps").string()};
  pid_t pid = spawn_ajet(dir / "out1.txt", base, dir.path());
  ASSERT_TRUE(e2e::eventually([&] { return has_train_step(exp / "metrics.jsonl", 2); },
                              std::chrono::seconds(300)))
      << read_file(dir / "out1.txt");
  ::kill(pid, SIGKILL);
  wait_exit(pid, std::chrono::seconds(30));
  // The front dies with ajet (PR_SET_PDEATHSIG) and the engine with the front.
  EXPECT_TRUE(
      e2e::eventually([&] { return find_leftovers(exp).empty(); }, std::chrono::seconds(30)));
  EXPECT_TRUE(fs::is_directory(exp / "saved_checkpoints" / "global_step_2" / "model"));
  EXPECT_FALSE(fs::exists(dir / "saved_checkpoints"));  // nothing in the working directory

  std::vector<std::string> resume = base;
  resume.insert(resume.end(), {"--resume", "--set", "ajet.trainer_common.total_training_steps=4"});
  pid = spawn_ajet(dir / "out2.txt", resume, dir.path());
  const int status = wait_exit(pid, std::chrono::seconds(600));
  const std::string out = read_file(dir / "out2.txt");
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status << "\n" << out;
  // Where it continued: the newest checkpoint's step (2 or 3, depending on where kill -9 landed).
  std::vector<Json> records = read_jsonl(exp / "metrics.jsonl");
  int64_t resumed_at = -1;
  std::vector<int64_t> steps_after;
  for (const auto& rec : records) {
    if (rec["kind"] == "resume") {
      resumed_at = rec["step"].get<int64_t>();
      EXPECT_EQ(rec["global_step"].get<int64_t>(), resumed_at);
      steps_after.clear();
    } else if (rec["kind"] == "train" && resumed_at >= 0) {
      steps_after.push_back(rec["step"].get<int64_t>());
      EXPECT_EQ(rec["global_step"].get<int64_t>(), rec["step"].get<int64_t>()) << rec.dump();
    }
  }
  ASSERT_GE(resumed_at, 2) << out;
  EXPECT_NE(out.find("continuing after step " + std::to_string(resumed_at)), std::string::npos)
      << out;
  std::vector<int64_t> expected;
  for (int64_t s = resumed_at + 1; s <= 4; ++s) expected.push_back(s);
  EXPECT_EQ(steps_after, expected) << out;
  const fs::path final_checkpoint = exp / "saved_checkpoints" / "global_step_4";
  EXPECT_NE(out.find("final model: " + (final_checkpoint / "model").string()), std::string::npos)
      << out;
  EXPECT_TRUE(fs::is_directory(final_checkpoint / "model"));
  EXPECT_NE(read_file(exp / "engine.log")
                .find(final_checkpoint.string() + " (policy version 4, global step 4)"),
            std::string::npos);
  EXPECT_NE(
      read_file(exp / "swarm.log").find("from checkpoint " + (exp / "saved_checkpoints").string()),
      std::string::npos);
}

// A run stopped after a step but before that step's validation (here: metrics.jsonl cut after step
// 2's train record, what kill -9 between the two leaves) is validated at that step by --resume
// before the run goes on; validations the run already has are not run again.
TEST(ClassicRobust, ResumeValidatesTheStepWhoseValidationWasLost) {
  e2e::ScratchDir dir;
  write_file_atomic(dir / "calc.yaml", classic_yaml(micro_model()));
  const std::string args = "--conf " + shell_quote((dir / "calc.yaml").string()) + " --exp-dir " +
                           shell_quote((dir / "exps").string());
  Captured first = run_ajet(args);
  ASSERT_EQ(first.status, 0) << first.out;
  const fs::path metrics = dir / "exps" / "run" / "metrics.jsonl";
  std::vector<Json> records = read_jsonl(metrics);
  ASSERT_EQ(records.back()["kind"], "validation");
  ASSERT_EQ(records.back()["step"], 2);
  records.pop_back();  // step 2's validation never happened
  std::string cut;
  for (const Json& r : records) cut += r.dump() + "\n";
  write_file_atomic(metrics, cut);

  Captured resumed = run_ajet(args + " --resume --set ajet.trainer_common.total_training_steps=3");
  ASSERT_EQ(resumed.status, 0) << resumed.out;
  EXPECT_NE(resumed.out.find("step 2 has no validation record"), std::string::npos) << resumed.out;
  std::vector<std::string> after;  // what the resumed run wrote, in order
  bool seen_resume = false;
  for (const Json& r : read_jsonl(metrics)) {
    if (r["kind"] == "resume") {
      seen_resume = true;
      EXPECT_EQ(r["step"], 2);
    } else if (seen_resume) {
      after.push_back(r["kind"].get<std::string>() + " " +
                      std::to_string(r["step"].get<int64_t>()));
    }
  }
  EXPECT_EQ(after, (std::vector<std::string>{"validation 2", "train 3", "validation 3"}));
}

TEST(ClassicCli, VersionUsageErrorsAndDidYouMean) {
  for (const char* program : {"ajet", "ajet-swarm", "ajet-engine"}) {
    Captured r = e2e::run_capture(shell_quote(bin(program).string()) + " --version");
    EXPECT_EQ(r.status, 0) << program << ": " << r.out;
    EXPECT_EQ(r.out.rfind(std::string(program) + " ", 0), 0u) << r.out;
  }
  Captured r = run_ajet("--cnf x.yaml");
  EXPECT_EQ(WEXITSTATUS(r.status), 2) << r.out;
  EXPECT_NE(r.out.find("did you mean --conf?"), std::string::npos) << r.out;
  r = run_ajet("tokenze");
  EXPECT_EQ(WEXITSTATUS(r.status), 2) << r.out;
  EXPECT_NE(r.out.find("did you mean tokenize?"), std::string::npos) << r.out;
  r = e2e::run_capture(shell_quote(bin("ajet-swarm").string()) + " strat");
  EXPECT_EQ(WEXITSTATUS(r.status), 2) << r.out;
  EXPECT_NE(r.out.find("did you mean start?"), std::string::npos) << r.out;
  r = e2e::run_capture(shell_quote(bin("ajet-swarm").string()) + " start --prot 0");
  EXPECT_EQ(WEXITSTATUS(r.status), 2) << r.out;
  EXPECT_NE(r.out.find("did you mean --port?"), std::string::npos) << r.out;

  e2e::ScratchDir dir;
  const fs::path model = micro_model();
  write_file_atomic(dir / "ok.yaml", classic_yaml(model));
  r = run_ajet("--conf " + shell_quote((dir / "ok.yaml").string()) +
               " --set ajet.rollout.nmu_repeat=3");
  EXPECT_EQ(WEXITSTATUS(r.status), 2) << r.out;
  EXPECT_NE(r.out.find("did you mean 'ajet.rollout.num_repeat'?"), std::string::npos) << r.out;
}

}  // namespace
}  // namespace ajet::classic
