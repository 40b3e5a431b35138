// Validation of a classic run: greedy, T=1 and pass@k on each task source's held-out tasks (at most
// val_max_num_task_each_validation per source); a cocktail's record also holds each task's own
// summary under "cocktail". The record goes to metrics.jsonl, the Markdown table, the front's
// store.
#pragma once

#include <cstdint>

#include "classic/run_parts.h"

namespace ajet::classic {

void run_validation(RunParts& parts, int64_t step);

}  // namespace ajet::classic
