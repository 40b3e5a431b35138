// The warm-up race (sft/race.h) with a shell script standing in for ajet-engine: each stage's
// behaviour is chosen by its demos file and seed ("first-1", "main-1001", "init-1001"), and every
// call's arguments are logged, so the tests are independent of timing: a candidate that must lose
// sleeps until stopped.
#include "sft/race.h"

#include <gtest/gtest.h>

#include <fstream>
#include <mutex>
#include <sstream>
#include <string>
#include <vector>

#include "common/error.h"
#include "support/scratch_dir.h"

namespace ajet::sft {
namespace {

namespace fs = std::filesystem;
using test_support::ScratchDir;

std::string read_text(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

class RaceTest : public ::testing::Test {
 protected:
  // `behaviour`: the body of a `case "$key" in ... esac` whose helpers are pass SUCCESS, finish
  // SUCCESS (a report without stopped_at_success) and die MESSAGE (exit code 3). Unlisted keys
  // finish at 0.1.
  RaceOptions options(const std::string& behaviour) {
    const fs::path script = dir_ / "fake-engine";
    std::ofstream(script) << "#!/bin/bash\n"
                          << "calls=" << (dir_ / "calls").string() << "\nmkdir -p \"$calls\"\n"
                          << "kind=$1; demos=init; out=; seed=\n"
                          << "for ((i = 1; i <= $#; i++)); do n=$((i + 1)); case \"${!i}\" in\n"
                          << "  --demos) demos=$(basename \"${!n}\" .jsonl) ;; --out) out=${!n} ;; "
                             "--seed) seed=${!n} ;;\n"
                          << "esac; done\n"
                          << "key=$demos-$seed; echo \"$*\" > \"$calls/$key\"\n"
                          << "report() { mkdir -p \"$out\"; echo '{}' > \"$out/config.json\";\n"
                          << "  echo \"{$1\\\"eval_after\\\": {\\\"success_rate\\\": $2}}\" > "
                             "\"$out/sft_report.json\"; }\n"
                          << "pass() { echo \"$key passes at $1\"; report '\"stopped_at_success\": "
                             "{\"step\": 2}, ' $1; }\n"
                          << "finish() { echo \"$key ends at $1\"; report '' $1; }\n"
                          << "die() { echo \"$1\" >&2; exit 3; }\n"
                          << "case \"$key\" in\n"
                          << behaviour << "\n  *) finish 0.1 ;;\nesac\n";
    fs::permissions(script, fs::perms::owner_all);
    RaceOptions o;
    o.program = script;
    o.candidates = 2;
    o.model = dir_ / "init";
    o.out = dir_ / "gate";
    o.seed = 1;
    o.threads = 2;
    o.main = RaceStage{"main.jsonl", 600, 10, 2e-3, 0.3};
    o.gate = 0.5;
    o.stage_flags = {"--eval-task", "calc", "--eval-every", "50"};
    return o;
  }
  RaceResult race(const RaceOptions& o) {
    Printer printer([this](std::string_view line) { lines_.emplace_back(line); });
    return run_race(o, printer);
  }
  bool printed(const std::string& text) const {
    for (const auto& l : lines_) {
      if (l.find(text) != std::string::npos) return true;
    }
    return false;
  }
  std::string call(const std::string& key) const { return read_text(dir_ / "calls" / key); }
  std::string output() const {
    std::string all;
    for (const auto& l : lines_) all += l + "\n";
    return all;
  }

  ScratchDir dir_;
  std::vector<std::string> lines_;
};

// scripts/run.sh's race: the flags of every stage and of candidate 1's initial model, as the bash
// had them.
TEST_F(RaceTest, EachStageRunsTheCommandTheScriptRan) {
  RaceOptions o = options("");
  o.first = RaceStage{"first.jsonl", 150, 30, 2e-3, 1.0};
  o.max_seconds = 100;
  o.candidate_init = {"--preset", "tiny", "--tokenizer", "TOK"};
  o.stage_flags = {"--batch-tokens", "4096", "--log-every", "50", "--eval-task",  "calc",
                   "--eval-n",       "50",   "--eval-seed", "1",  "--eval-every", "50"};
  const RaceResult r = race(o);
  const std::string init = o.model.string(), out = o.out.string();
  EXPECT_EQ(call("init-1001"), "model init --preset tiny --tokenizer TOK --seed 1001 --out " +
                                   init + "-candidate1 --force\n");
  const std::string common =
      " --seed 1 --threads 1 --batch-tokens 4096 --log-every 50 --eval-task calc --eval-n 50 "
      "--eval-seed 1 --eval-every 50";
  EXPECT_EQ(call("first-1"), "sft --model " + init + " --demos first.jsonl --out " + out +
                                 "-candidate0-first --force "
                                 "--steps 150 --warmup 30 --lr 0.002 --min-lr-ratio 1" +
                                 common + " --max-seconds 100\n");
  const std::string main = call("main-1");
  const std::string main_head =
      "sft --model " + out + "-candidate0-first --demos main.jsonl --out " + out +
      "-candidate0 --force --steps 600 --warmup 10 --lr 0.002 --min-lr-ratio 0.3" + common +
      " --stop-at-success 0.5 --max-seconds ";
  ASSERT_EQ(main.substr(0, main_head.size()), main_head);
  const int left = std::stoi(main.substr(main_head.size()));
  EXPECT_TRUE(left == 100 || left == 99)
      << left;  // what is left of 100 s, counted in whole seconds
  EXPECT_NE(call("first-1001").find("--model " + init + "-candidate1 "), std::string::npos);
  EXPECT_NE(call("main-1001").find("--seed 1001 "), std::string::npos);
  EXPECT_EQ(r.winner, 0);  // none passed: the first of equals
  EXPECT_FALSE(r.passed);
}

TEST_F(RaceTest, TheFirstPastTheGateWinsAndTheOthersAreStopped) {
  const RaceResult r = race(options("  main-1001) pass 0.6 ;;\n  main-1) exec sleep 600 ;;"));
  ASSERT_EQ(r.winner, 1) << output();
  EXPECT_TRUE(r.passed);
  EXPECT_EQ(r.candidates[0].outcome, CandidateOutcome::kStopped);
  EXPECT_EQ(r.candidates[1].outcome, CandidateOutcome::kPassed);
  EXPECT_NE(read_text(dir_ / "gate" / "sft_report.json").find("stopped_at_success"),
            std::string::npos);
  EXPECT_TRUE(printed("  [candidate 1] main-1001 passes at 0.6")) << output();
  EXPECT_TRUE(printed("candidate 1 passed the gate first")) << output();
  EXPECT_FALSE(fs::exists(dir_ / "gate-candidate0"));
  EXPECT_FALSE(fs::exists(dir_ / "gate-candidate1"));
}

TEST_F(RaceTest, WhenNonePassesTheBestIsKept) {
  const RaceResult r = race(options("  main-1) finish 0.2 ;;\n  main-1001) finish 0.4 ;;"));
  ASSERT_EQ(r.winner, 1) << output();
  EXPECT_FALSE(r.passed);
  EXPECT_EQ(r.candidates[0].outcome, CandidateOutcome::kFinished);
  EXPECT_DOUBLE_EQ(*r.candidates[0].success, 0.2);
  EXPECT_NE(read_text(dir_ / "gate" / "sft_report.json").find("0.4"), std::string::npos);
  EXPECT_TRUE(printed("WARNING: no candidate reached the gate (0.5); keeping candidate 1"))
      << output();
}

TEST_F(RaceTest, AFailingCandidateIsReportedAndTheOthersGoOn) {
  RaceOptions o = options("  first-1001) die 'no such demos file' ;;\n  main-1) finish 0.3 ;;");
  o.first = RaceStage{"first.jsonl", 150, 30, 2e-3, 1.0};
  const RaceResult r = race(o);
  ASSERT_EQ(r.winner, 0) << output();
  EXPECT_EQ(r.candidates[1].outcome, CandidateOutcome::kFailed);
  EXPECT_EQ(r.candidates[1].detail, "the first stage ended with exit code 3");
  EXPECT_TRUE(printed("  [candidate 1] no such demos file")) << output();
  EXPECT_TRUE(printed("sft: candidate 1: FAILED (the first stage ended with exit code 3)"))
      << output();
  EXPECT_FALSE(
      fs::exists(dir_ / "calls" / "main-1001"));  // a failed first stage ends the candidate
}

TEST_F(RaceTest, NoModelWhenEveryCandidateFails) {
  const RaceResult r = race(options("  main-*) die 'out of memory' ;;"));
  EXPECT_EQ(r.winner, -1);
  EXPECT_FALSE(fs::exists(dir_ / "gate"));
  EXPECT_TRUE(printed("sft: no candidate produced a model")) << output();
}

// A candidate's initial model that cannot be made ends the race: the candidates already running
// stop.
TEST_F(RaceTest, AFailedInitialModelStopsTheRace) {
  RaceOptions o = options("  init-1001) die 'no tokenizer' ;;\n  main-1) exec sleep 600 ;;");
  o.candidate_init = {"--preset", "tiny"};
  try {
    race(o);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(
                  "candidate 1's initial model (--candidate-init): model init ended with exit "
                  "code 3:\nno tokenizer"),
              std::string::npos)
        << e.what();
  }
  EXPECT_FALSE(fs::exists(dir_ / "gate"));
}

TEST_F(RaceTest, BadOptionsNameTheFlag) {
  struct Case {
    void (*edit)(RaceOptions&);
    std::string message;
  };
  for (const Case& c : std::vector<Case>{
           {[](RaceOptions& o) { o.candidates = 0; }, "--candidates must be at least 1"},
           {[](RaceOptions& o) {
              o.stage_flags = {"--eval-every", "5"};
            },
            "--candidates needs --eval-task"},
           {[](RaceOptions& o) { o.stage_flags.push_back("--eval-only"); }, "--eval-only"},
           {[](RaceOptions& o) { o.main.demos.clear(); }, "--demos is required"},
           {[](RaceOptions& o) { o.first = RaceStage{}; }, "--first-steps needs --first-demos"},
           {[](RaceOptions& o) { o.gate = 1.5; },
            "--stop-at-success must be a success rate in [0, 1]"},
       }) {
    RaceOptions o = options("");
    c.edit(o);
    try {
      check_race_options(o);
      ADD_FAILURE() << "no error for: " << c.message;
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
      EXPECT_NE(std::string(e.what()).find(c.message), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace ajet::sft
