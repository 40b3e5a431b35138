// `ajet-engine`: the tensor process. Subcommands live in cmd_*.cc files (see command.h).
#include "command.h"

int main(int argc, char** argv) {
  CLI::App app{"AgentJet engine: the model, inference and training (libtorch)"};
  return ajet::apps::run_subcommands(app, argc, argv, "ajet-engine");
}
