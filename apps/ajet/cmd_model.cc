// `ajet model ...`: model directories are tensor work, so this forwards the whole command line
// after `model` to `ajet-engine model ...` (found next to this binary); `ajet` itself never links
// libtorch.
#include "command.h"

namespace ajet::cli {
namespace {

const CommandRegistration kModel("model", [](CLI::App& app) {
  add_engine_forward(app, "model", "Create model directories (runs ajet-engine model ...)");
});

}  // namespace
}  // namespace ajet::cli
