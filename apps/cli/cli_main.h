// What the binaries' main() functions share: subcommands that register themselves from their cmd_*.cc
// files (each binary links its own, so each has its own registry), and the parse-run-report loop of
// `ajet-engine` and `ajet-swarm`. Header-only, no libtorch.
#pragma once

#include <CLI/CLI.hpp>

#include <cstdio>
#include <functional>
#include <map>
#include <string>

#include "common/error.h"
#include "common/log.h"

namespace ajet::apps {

// Adds a subcommand to `app`; its callback does the work and may throw ajet::Error, which main()
// prints and turns into an exit code.
using CommandFactory = std::function<void(CLI::App& app)>;

// The binary's subcommands by order key (they appear in --help in key order).
inline std::map<std::string, CommandFactory>& command_registry() {
  static std::map<std::string, CommandFactory> registry;
  return registry;
}

// A static CommandRegistration in a cmd_*.cc file adds its subcommand to the binary.
struct CommandRegistration {
  CommandRegistration(std::string order_key, CommandFactory factory) {
    command_registry().emplace(std::move(order_key), std::move(factory));
  }
};

inline void add_registered_commands(CLI::App& app) {
  for (auto& [key, factory] : command_registry()) factory(app);
}

// main() of a binary whose only entry points are its registered subcommands, plus --log-level.
// Exit codes: 0 done (or --help), 2 bad usage (CLI11 parse errors and Error(kInvalidArgument)),
// 1 any other failure, with "PROGRAM: error: ..." on stderr.
inline int run_subcommands(CLI::App& app, int argc, char** argv, const char* program) {
  app.require_subcommand(1);
  app.add_option_function<std::string>("--log-level", [](const std::string& level) { set_log_level(level); },
                                       "trace, debug, info, warn, error or off (default info)");
  add_registered_commands(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int code = app.exit(e);
    return code == 0 ? 0 : 2;
  } catch (const Error& e) {
    std::fprintf(stderr, "%s: error: %s\n", program, e.what());
    return e.code() == ErrorCode::kInvalidArgument ? 2 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: error: %s\n", program, e.what());
    return 1;
  }
  return 0;
}

}  // namespace ajet::apps
