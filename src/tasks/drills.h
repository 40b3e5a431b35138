// Copy drills: SFT demonstrations whose reply repeats the user's text, for the warm-up of a fresh
// tiny model before a task's own demos (docs/sft.md). Tool use needs in-context copying (calc
// copies the numbers of the question into its calculator call and the tool's result into its
// answer), which a tiny model learns late and abruptly on calc demos; on these short drills it
// learns to copy within 100-200 steps. How much that shortens a calc warm-up is measured, not
// settled (docs/sft.md). A drill is not a task: it has no judge, agent or validation split.
#pragma once

#include <cstdint>
#include <vector>

#include "tasks/builtin.h"

namespace ajet::tasks {

struct CopyDrillOptions {
  int64_t count = 1000;
  uint64_t seed = 1;
  int64_t min_terms = 1;  // numbers per drill text, joined by + - * (calc's alphabet)
  int64_t max_terms = 4;
  int64_t max_number = 999;  // numbers are uniform in [1, max_number]
};

// `count` drills: system "Repeat the user's text exactly.", user TEXT, assistant TEXT (kind "copy",
// reward 1). Drill i draws from its own stream (seed, i), so a prefix of a longer run equals a
// shorter run. Throws Error(kInvalidArgument) naming a bad option.
std::vector<Demo> copy_drills(const CopyDrillOptions& options);

}  // namespace ajet::tasks
