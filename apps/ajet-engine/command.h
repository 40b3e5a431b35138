// Subcommands of `ajet-engine` register themselves here: each cmd_*.cc in apps/ajet-engine defines a
// static `CommandRegistration` that adds its subcommand (model, serve, generate, sft, ...) to the CLI11
// app. This binary is the only one that links libtorch; `ajet` forwards tensor work to it.
#pragma once

#include <CLI/CLI.hpp>
#include <functional>
#include <string>

namespace ajet::engine {

// Adds a subcommand to `app`; the subcommand's callback does the work and may throw ajet::Error, which
// main() prints and turns into exit code 1 (2 for bad usage).
using CommandFactory = std::function<void(CLI::App& app)>;

struct CommandRegistration {
  CommandRegistration(std::string order_key, CommandFactory factory);
};

void add_registered_commands(CLI::App& app);

}  // namespace ajet::engine
