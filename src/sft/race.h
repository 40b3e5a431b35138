// The warm-up race (`ajet sft --candidates N`): N candidates train side by side, each a child
// process running `ajet-engine sft` (the same binary) with one share of the threads, candidate k
// with the seed seed + 1000 k and, with `candidate_init`, its own initial model. Each candidate
// runs an optional first stage (no gate) and then the main stage with the gate (--stop-at-success);
// the first whose report says stopped_at_success wins and the others are stopped; when none passes,
// the best by held-out success (eval_after.success_rate) is kept. The winner's model directory
// becomes `out`. The copying a calc warm-up needs appears at a step that varies from run to run
// (docs/sft.md), so racing candidates bounds the warm-up's time where one candidate alone sometimes
// needs 2-3x. No libtorch here.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "sft/printer.h"

namespace ajet::sft {

// One stage of a candidate: the `ajet sft` flags that differ between stages.
struct RaceStage {
  std::string demos;
  int64_t steps = 100;
  int64_t warmup = 0;
  double lr = 1e-3;
  double min_lr_ratio = 0.1;
};

struct RaceOptions {
  std::filesystem::path program;  // the ajet-engine binary: candidates run `program sft ...`
  int candidates = 2;
  std::filesystem::path
      model;  // candidate 0's initial model (every candidate's without candidate_init)
  std::filesystem::path out;  // the winner's model directory
  bool force = false;         // replace a model directory at `out`
  // Not empty: candidate k > 0 starts from its own model, `program model init <candidate_init>
  // --seed seed+1000k --out <candidate_prefix><k> --force`, made once (kept and reused, like
  // --model).
  std::vector<std::string> candidate_init;
  std::string candidate_prefix;  // with candidate_init: candidate k's model is
                                 // <candidate_prefix><k> (default <model>-candidate)
  uint64_t seed = 1;             // candidate k: seed + 1000 k (demo order, and its initial model)
  int threads = 2;               // shared out: each candidate max(1, threads / candidates)
  int64_t max_seconds = 0;       // each candidate's time for all its stages (0: no limit)
  std::optional<RaceStage>
      first;  // trained before the main stage, no gate (e.g. symbolic calc demos)
  RaceStage main;
  double gate = -1;  // the main stage's --stop-at-success (< 0: none; the best is kept)
  std::vector<std::string>
      stage_flags;  // given to every stage as they are (--eval-task, --batch-tokens, ...)
};

enum class CandidateOutcome {
  kPassed,    // its report says stopped_at_success
  kFinished,  // ran to its end without passing the gate
  kStopped,   // stopped because another candidate won
  kFailed,    // a stage failed, or no time was left for the main stage
};
const char* outcome_name(CandidateOutcome outcome);

struct CandidateResult {
  CandidateOutcome outcome = CandidateOutcome::kFailed;
  std::string detail;             // why it failed, e.g. "the first stage ended with exit code 1"
  std::optional<double> success;  // eval_after.success_rate of its report, when it wrote one
};

struct RaceResult {
  int winner = -1;      // -1: no candidate produced a model (nothing at `out`)
  bool passed = false;  // the winner passed the gate (else: the best of those that did not)
  std::vector<CandidateResult> candidates;
};

// Throws Error(kInvalidArgument) naming the flag for options the race cannot run.
void check_race_options(const RaceOptions& options);

// The arguments (after `program`) of candidate k's stage: from `from` into `dir`, with `seconds` of
// time (0: none). `first` picks the first stage.
std::vector<std::string> stage_arguments(const RaceOptions& options, int k, bool first,
                                         const std::filesystem::path& from,
                                         const std::filesystem::path& dir, int64_t seconds);

// Runs the race; every line (the candidates' output prefixed "  [candidate k] ") goes to `out`.
RaceResult run_race(const RaceOptions& options, Printer& out);

}  // namespace ajet::sft
