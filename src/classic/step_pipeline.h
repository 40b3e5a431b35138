// The step pipelines of a classic run, chosen once from the backbone:
//   torch, debug (SyncPipeline): a step rolls out, its batch trains (torch) or is recorded (debug),
//     and its record is finished before the next step;
//   async (AsyncPipeline): a step rolls out while earlier batches train, within async.max_staleness
//     policy versions; it owns the steps in flight and records each once its batch has trained.
#pragma once

#include <memory>

#include "classic/run_loop.h"
#include "classic/run_parts.h"

namespace ajet::classic {

std::unique_ptr<StepPipeline> make_step_pipeline(RunParts& parts);

}  // namespace ajet::classic
