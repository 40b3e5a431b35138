// One SFT session (`ajet sft` without --candidates): load a model, optionally evaluate it on
// held-out episodes of a built-in task, fine-tune it on demonstrations (train/sft.h) with
// evaluations every N steps, a success gate that stops training (--stop-at-success) and the best
// evaluated model kept, then save it with its report (sft_report.json). Every line goes through one
// Printer. libtorch.
#pragma once

#include <cstdint>
#include <string>

#include "sft/printer.h"
#include "text/messages.h"
#include "train/sft.h"

namespace ajet::sft {

// Held-out episodes of a built-in task, played with the built-in agent on an in-process engine.
struct EvalOptions {
  std::string task;         // empty: no evaluation
  int64_t n = 100;          // episodes per evaluation
  uint64_t seed = 1;        // the held-out tasks and sampling
  double temperature = 0;   // 0: greedy
  int64_t max_tokens = 96;  // generated tokens per turn
  int64_t parallel = 16;    // episodes at once
  int64_t every = 0;        // also every N steps during training (0: before and after only)
};

struct SessionOptions {
  std::string model, demos, out;
  train::SftOptions sft;  // sft.workers, sft.stop: set by the session (from `workers`)
  int64_t max_demo_tokens = 0;
  double min_reward = -1e300;
  int threads = 2;
  int workers = 1;
  double stop_at_success = -1;  // < 0: off
  bool force = false;
  int64_t log_every = 10;
  EvalOptions eval;
  bool eval_only = false;
};

// Throws Error(kInvalidArgument) naming the flag for options a session cannot run.
void check_session_options(const SessionOptions& options);

// Runs the session; returns the report (also written to OUT/sft_report.json and printed last).
text::OrderedJson run_session(const SessionOptions& options, Printer& out);

}  // namespace ajet::sft
