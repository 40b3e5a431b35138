// `ajet-swarm`: the swarm server (`start`) and its tools. Subcommands live in cmd_*.cc (command.h).
#include "command.h"

int main(int argc, char** argv) {
  CLI::App app{
      "AgentJet swarm server: the OpenAI-compatible API and swarm command API in front of "
      "ajet-engine"};
  ajet::apps::add_version_flag(app, "ajet-swarm");
  return ajet::apps::run_subcommands(app, argc, argv, "ajet-swarm");
}
