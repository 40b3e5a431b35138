// The rollout of one training step: its task batches (one, or with dynamic sampling as many as it
// takes for train_batch_size groups whose rewards differ), their episodes run through the workflow
// with max_env_worker in flight, the progress bar, and the step's record up to what training adds.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

#include "classic/run_parts.h"
#include "common/json.h"

namespace ajet::classic {

struct PendingStep {
  int64_t step = 0;
  bool rolled_out = false;  // false: stopped during the rollout
  std::chrono::steady_clock::time_point started, rollout_ended;
  Json record;
  std::string markdown;  // the step's section of train_print_to_markdown_file_path
  bool judged = false;   // some episode reported is_success
};

PendingStep roll_out_step(RunParts& parts, int64_t step);

// A per-episode environment seed: splitmix-style combination.
uint64_t mix_seed(uint64_t a, uint64_t b);

}  // namespace ajet::classic
