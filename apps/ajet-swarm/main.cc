// `ajet-swarm`: the swarm server (`start`) and its tools. Subcommands live in cmd_*.cc (command.h).
#include <cstdio>
#include <map>

#include "command.h"
#include "common/error.h"
#include "common/log.h"

namespace ajet::swarm_cli {

namespace {
std::map<std::string, CommandFactory>& registry() {
  static std::map<std::string, CommandFactory> r;
  return r;
}
}  // namespace

CommandRegistration::CommandRegistration(std::string order_key, CommandFactory factory) {
  registry().emplace(std::move(order_key), std::move(factory));
}

void add_registered_commands(CLI::App& app) {
  for (auto& [key, factory] : registry()) factory(app);
}

}  // namespace ajet::swarm_cli

int main(int argc, char** argv) {
  CLI::App app{"AgentJet swarm server: the OpenAI-compatible API and swarm command API in front of ajet-engine"};
  app.require_subcommand(1);
  app.add_option_function<std::string>("--log-level", [](const std::string& level) { ajet::set_log_level(level); },
                                       "trace, debug, info, warn, error or off (default info)");
  ajet::swarm_cli::add_registered_commands(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int code = app.exit(e);
    return code == 0 ? 0 : 2;
  } catch (const ajet::Error& e) {
    std::fprintf(stderr, "ajet-swarm: error: %s\n", e.what());
    return e.code() == ajet::ErrorCode::kInvalidArgument ? 2 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ajet-swarm: error: %s\n", e.what());
    return 1;
  }
  return 0;
}
