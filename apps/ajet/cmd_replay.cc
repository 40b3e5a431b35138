// `ajet replay RECORD ...`: training again from a run's rollout record is tensor work, so this runs
// `ajet-engine replay ...` (found next to this binary) with the same arguments
// (docs/determinism.md).
#include "command.h"

namespace ajet::cli {
namespace {

const CommandRegistration kReplay("replay", [](CLI::App& app) {
  add_engine_forward(app, "replay",
                     "Train again from a run's rollout record without an engine or clients, and "
                     "compare each step with the run (runs ajet-engine replay ...)");
});

}  // namespace
}  // namespace ajet::cli
