// `ajet sft` end to end: the real `ajet` binary forwarding to `ajet-engine sft` on copy drills from
// `ajet tasks drills`, with worker threads, periodic evaluation and --stop-at-success; and the flag
// errors a user meets, each naming what is wrong.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "engine_process.h"

namespace ajet::engine {
namespace {

using namespace testing;

const fs::path& drills_file() {
  static const fs::path path = [] {
    const fs::path p = process_dir() / "drills.jsonl";
    auto r = run_command(kAjet + " tasks drills --n 64 --seed 3 --max-terms 2 --out " + quote(p));
    if (r.exit_code != 0) throw std::runtime_error("ajet tasks drills failed: " + r.out);
    return p;
  }();
  return path;
}

std::string sft_args(const fs::path& out) {
  return " sft --model " + quote(tiny_model_dir()) + " --demos " + quote(drills_file()) +
         " --out " + quote(out) + " --batch-tokens 512 --lr 1e-3 --threads 2";
}

nlohmann::json report_of(const fs::path& out) {
  return nlohmann::json::parse(run_command("cat " + quote(out / "sft_report.json")).out);
}

TEST(SftCli, WorkerThreadsTrainAndSaveALoadableModel) {
  const fs::path out = process_dir() / "sft-workers";
  auto r = run_command(kAjet + sft_args(out) + " --steps 3 --workers 2 --log-every 1");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_NE(r.out.find("2 worker thread(s) per step, 1 intra-op thread(s) each"), std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("step 3/3 loss"), std::string::npos) << r.out;
  const auto report = report_of(out);
  EXPECT_EQ(report["steps"].get<int64_t>(), 3);
  EXPECT_LT(report["loss_after"].get<double>(), report["loss_before"].get<double>());
  // The saved model generates.
  auto g = run_command(kAjet + " generate --model " + quote(out) +
                       " --threads 1 --kv-cache-mb 16 --max-tokens 4 --prompt hi");
  EXPECT_EQ(g.exit_code, 0) << g.out;
}

// A success threshold the first evaluation always meets stops training right after it.
TEST(SftCli, StopAtSuccessStopsAfterTheFirstEvaluationThatReachesIt) {
  const fs::path out = process_dir() / "sft-stop";
  auto r = run_command(kAjet + sft_args(out) +
                       " --steps 20 --eval-task frozenlake --eval-n 2 --eval-max-tokens 8 "
                       "--eval-every 2 --stop-at-success 0");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_NE(r.out.find("(--stop-at-success): stopping at step 2 of 20"), std::string::npos)
      << r.out;
  // One line per evaluation: the evaluation's engine does not log its cache sizing (issue 13).
  EXPECT_EQ(r.out.find("inference engine:"), std::string::npos) << r.out;
  const auto report = report_of(out);
  EXPECT_EQ(report["steps"].get<int64_t>(), 2);
  EXPECT_EQ(report["stopped_at_success"]["step"].get<int64_t>(), 2);
  ASSERT_EQ(report["eval_during"].size(), 1u);
  EXPECT_TRUE(report.contains("eval_after"));
}

// A gate the model never reaches: the run ends with the best evaluated model and says loudly that
// the warm-up missed its gate, with the numbers; the report records both.
TEST(SftCli, AMissedGateIsReportedLoudlyAndTheBestEvaluatedModelIsKept) {
  const fs::path out = process_dir() / "sft-missed";
  auto r = run_command(kAjet + sft_args(out) +
                       " --steps 4 --eval-task frozenlake --eval-n 2 --eval-max-tokens 8 "
                       "--eval-every 2 --stop-at-success 1");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_NE(r.out.find("WARNING: the warm-up missed its gate"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("(best "), std::string::npos)
      << r.out;  // each evaluation line says the best so far
  const auto report = report_of(out);
  EXPECT_FALSE(report.contains("stopped_at_success"));
  ASSERT_TRUE(report.contains("gate_missed"));
  EXPECT_DOUBLE_EQ(report["gate_missed"]["gate"].get<double>(), 1.0);
  // The kept step is the last one or the best evaluated one (step 2), never another.
  const int64_t kept = report["kept_step"].get<int64_t>();
  EXPECT_TRUE(kept == 4 || kept == 2) << kept;
  EXPECT_LE(report["eval_after"]["success_rate"].get<double>(), 1.0);
}

TEST(SftCli, BadFlagsNameTheProblem) {
  const fs::path out = process_dir() / "sft-bad";
  struct Case {
    std::string flags, message;
  };
  for (const Case& c : std::vector<Case>{
           {" --stop-at-success 0.5", "--stop-at-success needs --eval-task and --eval-every N"},
           {" --eval-task frozenlake --eval-every 5 --stop-at-success 1.5",
            "--stop-at-success must be a success rate in [0, 1]"},
           {" --workers 0", "--workers"},
           {" --eval-task chess", "unknown built-in task 'chess'"},
       }) {
    auto r = run_command(kAjet + sft_args(out) + " --steps 1" + c.flags);
    EXPECT_NE(r.exit_code, 0) << c.flags;
    EXPECT_NE(r.out.find(c.message), std::string::npos) << c.flags << "\n" << r.out;
  }
  auto r = run_command(kAjet + " sft --model " + quote(tiny_model_dir()) + " --out " + quote(out));
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.out.find("--demos is required"), std::string::npos) << r.out;
  EXPECT_FALSE(fs::exists(out / "config.json"));
}

// `ajet sft --candidates 2` on the tiny model: a first stage, then the main one with a gate the
// first evaluation meets. Whichever candidate passes first, its model becomes --out and the rest is
// cleaned up.
TEST(SftCli, ARaceOfTwoCandidatesKeepsTheWinner) {
  const fs::path out = process_dir() / "sft-race";
  const fs::path tok = process_dir() / "tok";
  auto r = run_command(
      kAjet + sft_args(out) +
      " --steps 4 --candidates 2 --candidate-init=\"--preset tiny --tokenizer " + tok.string() +
      " --threads 1\" --first-demos " + quote(drills_file()) +
      " --first-steps 1 --eval-task frozenlake --eval-n 2 --eval-max-tokens 8 --eval-every 2 "
      "--stop-at-success 0 2>&1");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_NE(r.out.find("  [candidate 0] "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("  [candidate 1] "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("passed the gate first"), std::string::npos) << r.out;
  // Each stage's command line is printed before it starts: the flags the race does not set reach
  // every stage as given. Which candidate reaches its main stage first is up to the scheduler; the
  // winner always has, and candidate 1's first stage always starts (it prints its seed).
  EXPECT_NE(r.out.find("] sft: main stage, up to 4 steps: ajet-engine sft --model "),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find(" --batch-tokens 512 --eval-task frozenlake --eval-n 2 --eval-max-tokens 8 "
                       "--eval-every 2 "
                       "--stop-at-success 0\n"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find(" --seed 1001 --threads 1 "), std::string::npos) << r.out;
  EXPECT_TRUE(fs::exists(out / "config.json"));
  EXPECT_EQ(report_of(out)["stopped_at_success"]["step"].get<int64_t>(), 2);
  EXPECT_TRUE(fs::exists(fs::path(tiny_model_dir().string() + "-candidate1") / "config.json"));
  for (const char* left :
       {"-candidate0", "-candidate1", "-candidate0-first", "-candidate1-first"}) {
    EXPECT_FALSE(fs::exists(out.string() + left)) << left;
  }
}

TEST(SftCli, RaceFlagErrorsExitTwo) {
  const fs::path out = process_dir() / "sft-race-bad";
  struct Case {
    std::string flags, message;
  };
  for (const Case& c : std::vector<Case>{
           {" --candidates 2", "--candidates needs --eval-task"},
           {" --candidates 2 --eval-task frozenlake --eval-only", "--eval-only"},
           {" --first-steps 5", "--candidates"},
           {" --candidates -1", "--candidates"},
           {" --candidates 2 --eval-task frozenlake --eval-every 1 --first-steps 1",
            "--first-steps needs --first-demos"},
       }) {
    auto r = run_command(kAjet + sft_args(out) + " --steps 1" + c.flags + " 2>&1");
    EXPECT_EQ(r.exit_code, 2) << c.flags << "\n" << r.out;
    EXPECT_NE(r.out.find(c.message), std::string::npos) << c.flags << "\n" << r.out;
  }
  EXPECT_FALSE(fs::exists(out));
}

}  // namespace
}  // namespace ajet::engine
