// `ajet generate ...`: generation is tensor work, so this runs `ajet-engine generate ...` (found
// next to this binary) with the same arguments and stdin; `ajet` itself never links libtorch.
#include "command.h"

namespace ajet::cli {
namespace {

const CommandRegistration kGenerate("generate", [](CLI::App& app) {
  add_engine_forward(
      app, "generate",
      "Generate from a prompt on stdin with a model directory (runs ajet-engine generate ...)");
});

}  // namespace
}  // namespace ajet::cli
