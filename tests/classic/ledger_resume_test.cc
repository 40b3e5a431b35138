// Every task exactly once across crashes (docs/classic.md "The task ledger"): a torch run on the
// micro model is SIGKILLed (the launcher, the front, or the engine, one each) after its step-3
// line, continued with --resume where the kill ended it, and the ledger read back with `ajet
// ledger`: no task skipped, none trained twice, and each step trained the tasks it drew.
// Checkpoints every 2 steps, so a kill after step 3 loses a trained step that must be trained
// again. Every wait is for a file, a log line or a process exit, never a fixed time.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>

#include <map>

#include "classic/experiment_dir.h"
#include "classic_fixture.h"
#include "common/fs.h"
#include "common/json.h"
#include "e2e/e2e_util.h"

namespace ajet::classic {
namespace {

namespace fs = std::filesystem;

constexpr int64_t kSteps = 10;
constexpr int64_t kTasksPerStep = 2;  // classic_yaml's train_batch_size

struct LedgerRun {
  e2e::ScratchDir dir;
  fs::path exp;
  std::vector<std::string> base;
};

void start(LedgerRun& run) {
  std::string yaml = long_run_yaml(micro_model(), "torch");
  yaml.replace(yaml.find("total_training_steps: 100000"), 28,
               "total_training_steps: " + std::to_string(kSteps));
  yaml.replace(yaml.find("test_freq: 0"), 12, "test_freq: 0\n    save_freq: 2");
  write_file_atomic(run.dir / "torch.yaml", yaml);
  run.exp = run.dir / "exps" / "run";
  run.base = {"--conf", (run.dir / "torch.yaml").string(), "--exp-dir",
              (run.dir / "exps").string()};
}

pid_t pid_of(const fs::path& exp, const std::string& program) {
  for (const Leftover& l : find_leftovers(exp)) {
    if (l.program == program) return l.pid;
  }
  return 0;
}

// `ajet ledger EXP --json`: the rows and the summary of the stopped run's store.
Json ledger_of(const fs::path& exp) {
  e2e::Captured r = e2e::run_capture(e2e::shell_quote(e2e::bin("ajet").string()) + " ledger " +
                                     e2e::shell_quote(exp.string()) + " --json 2>&1");
  EXPECT_EQ(r.status, 0) << r.out;
  return Json::parse(r.out);
}

// No task skipped or trained twice; each step 1..kSteps consumed exactly the tasks it drew.
void expect_every_task_once(const fs::path& exp, const std::string& log) {
  const Json ledger = ledger_of(exp);
  const Json& s = ledger["summary"];
  EXPECT_EQ(s["skipped"], 0) << ledger.dump(1) << log;
  EXPECT_EQ(s["duplicated"], 0) << ledger.dump(1) << log;
  EXPECT_EQ(s["in_flight"], 0) << ledger.dump(1);
  EXPECT_EQ(ledger["global_step"], kSteps);
  std::map<int64_t, int64_t> consumed;  // step -> rows trained or dropped in it
  for (const Json& r : ledger["rows"]) {
    if (r["reason"] == "repeat_in_step") continue;
    EXPECT_EQ(r["consumed"], 1) << r.dump();
    EXPECT_EQ(r["step"], r["drawn_step"]) << r.dump();
    consumed[r["step"].get<int64_t>()] += 1;
  }
  for (int64_t step = 1; step <= kSteps; ++step)
    EXPECT_EQ(consumed[step], kTasksPerStep) << "step " << step << "\n" << ledger.dump(1);
}

void resume_to_the_end(LedgerRun& run, const std::string& name) {
  std::vector<std::string> args = run.base;
  args.push_back("--resume");
  const pid_t pid = spawn_ajet(run.dir / (name + ".txt"), args, run.dir.path());
  const int status = wait_exit(pid, std::chrono::seconds(600));
  const std::string out = read_file(run.dir / (name + ".txt"));
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status << "\n" << out;
  EXPECT_NE(out.find("task cursor from the task ledger"), std::string::npos) << out;
}

// Starts the run and returns ajet's pid once metrics.jsonl has step 3.
pid_t run_to_step_3(LedgerRun& run) {
  start(run);
  const pid_t pid = spawn_ajet(run.dir / "first.txt", run.base, run.dir.path());
  EXPECT_TRUE(e2e::eventually([&] { return has_train_step(run.exp / "metrics.jsonl", 3); },
                              std::chrono::seconds(300)))
      << read_file(run.dir / "first.txt");
  return pid;
}

TEST(LedgerResume, KillingTheLauncherSkipsNoTaskAndTrainsNoneTwice) {
  LedgerRun run;
  const pid_t ajet = run_to_step_3(run);
  ::kill(ajet, SIGKILL);
  wait_exit(ajet, std::chrono::seconds(30));
  ASSERT_TRUE(
      e2e::eventually([&] { return find_leftovers(run.exp).empty(); }, std::chrono::seconds(30)));
  resume_to_the_end(run, "resumed");
  expect_every_task_once(run.exp, read_file(run.dir / "resumed.txt"));
}

TEST(LedgerResume, KillingTheFrontSkipsNoTaskAndTrainsNoneTwice) {
  LedgerRun run;
  const pid_t ajet = run_to_step_3(run);
  const pid_t front = pid_of(run.exp, "ajet-swarm");
  ASSERT_GT(front, 0);
  ::kill(front, SIGKILL);
  // ajet fails on the lost front (or finishes, had it been at its end); either way it exits.
  ASSERT_NE(wait_exit(ajet, std::chrono::seconds(120)), -1) << read_file(run.dir / "first.txt");
  ASSERT_TRUE(
      e2e::eventually([&] { return find_leftovers(run.exp).empty(); }, std::chrono::seconds(30)));
  resume_to_the_end(run, "resumed");
  expect_every_task_once(run.exp, read_file(run.dir / "resumed.txt"));
}

// The front restarts a killed engine from its newest checkpoint (step 2); the steps trained after
// it are trained again from their stored episodes, and ajet goes on without a --resume.
TEST(LedgerResume, KillingTheEngineTrainsTheLostStepsAgain) {
  LedgerRun run;
  const pid_t ajet = run_to_step_3(run);
  const pid_t engine = pid_of(run.exp, "ajet-engine");
  ASSERT_GT(engine, 0);
  ::kill(engine, SIGKILL);
  const int status = wait_exit(ajet, std::chrono::seconds(600));
  const std::string out = read_file(run.dir / "first.txt");
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status << "\n" << out;
  expect_every_task_once(run.exp, out);
}

}  // namespace
}  // namespace ajet::classic
