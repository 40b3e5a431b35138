// `ajet-engine`: the tensor process. Subcommands live in cmd_*.cc files (see command.h).
#include "command.h"
#include "model/blas_kernel.h"

int main(int argc, char** argv) {
  ajet::model::pick_blas_kernel(argc, argv);  // first: it may re-execute the process
  CLI::App app{"AgentJet engine: the model, inference and training (libtorch)"};
  ajet::apps::add_version_flag(app, "ajet-engine");
  return ajet::apps::run_subcommands(app, argc, argv, "ajet-engine");
}
