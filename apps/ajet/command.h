// Subcommands of `ajet` register themselves here: each cmd_*.cc in apps/ajet defines a static
// `CommandRegistration` that adds its subcommand to the CLI11 app. `ajet` never links libtorch:
// tensor subcommands (model init, generate, sft) run `ajet-engine` found next to this binary.
#pragma once

#include <CLI/CLI.hpp>
#include <functional>
#include <string>
#include <vector>

#include "cli/cli_main.h"

namespace ajet::cli {

using apps::add_registered_commands;
using apps::CommandFactory;
using apps::CommandRegistration;

// The main command (`ajet --conf x.yaml`, no subcommand; cmd_classic.cc): its options on the top
// level, and the run main() calls when no subcommand was given (returns the exit code).
void add_main_entry(CLI::App& app);
int run_main_entry(CLI::App& app);

// Path of a sibling binary (e.g. "ajet-engine") in the directory of the running executable.
std::string sibling_binary(const std::string& name);

// Adds `ajet NAME ...`, which replaces this process with `ajet-engine NAME ...` (same arguments,
// stdin and stdout); everything after NAME, --help included, belongs to ajet-engine.
void add_engine_forward(CLI::App& app, const std::string& name, const std::string& description);

}  // namespace ajet::cli
