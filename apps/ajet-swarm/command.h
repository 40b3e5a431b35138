// Subcommands of `ajet-swarm` register themselves here: each cmd_*.cc in apps/ajet-swarm defines a
// static `CommandRegistration` that adds its subcommand (start, overwatch, …) to the CLI11 app.
// `ajet-swarm` never links libtorch: the engine runs as the separate `ajet-engine` process.
#pragma once

#include <CLI/CLI.hpp>
#include <functional>
#include <string>

namespace ajet::swarm_cli {

// Adds a subcommand to `app`; its callback does the work and may throw ajet::Error, which main()
// prints and turns into exit code 1 (2 for bad usage).
using CommandFactory = std::function<void(CLI::App& app)>;

struct CommandRegistration {
  CommandRegistration(std::string order_key, CommandFactory factory);
};

void add_registered_commands(CLI::App& app);

}  // namespace ajet::swarm_cli
