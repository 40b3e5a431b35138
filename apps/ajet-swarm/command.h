// Subcommands of `ajet-swarm` register themselves here: each cmd_*.cc in apps/ajet-swarm defines a
// static `CommandRegistration` that adds its subcommand (start, overwatch, …) to the CLI11 app.
// `ajet-swarm` never links libtorch: the engine runs as the separate `ajet-engine` process.
#pragma once

#include <CLI/CLI.hpp>
#include <functional>
#include <string>

#include "cli/cli_main.h"

namespace ajet::swarm_cli {

using apps::add_registered_commands;
using apps::CommandFactory;
using apps::CommandRegistration;

}  // namespace ajet::swarm_cli
