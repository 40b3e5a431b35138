// Subcommands of `ajet-engine` register themselves here: each cmd_*.cc in apps/ajet-engine defines
// a static `CommandRegistration` that adds its subcommand (model, serve, generate, sft, ...) to the
// CLI11 app. This binary is the only one that links libtorch; `ajet` forwards tensor work to it.
#pragma once

#include <CLI/CLI.hpp>
#include <functional>
#include <string>

#include "cli/cli_main.h"

namespace ajet::engine_cli {

using apps::add_registered_commands;
using apps::CommandFactory;
using apps::CommandRegistration;

}  // namespace ajet::engine_cli
