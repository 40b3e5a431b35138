// What the binaries' main() functions share: subcommands that register themselves from their cmd_*.cc
// files (each binary links its own, so each has its own registry), and the parse-run-report loop of
// `ajet-engine` and `ajet-swarm`. Header-only, no libtorch.
#pragma once

#include <CLI/CLI.hpp>

#include <algorithm>
#include <cstdio>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "common/error.h"
#include "common/log.h"
#include "common/strings.h"

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

// `--version` prints "PROGRAM VERSION" (the project version; main.cc gets AJET_VERSION from CMake).
inline void add_version_flag(CLI::App& app, const std::string& program, const std::string& version) {
  app.set_version_flag("--version", program + " " + version, "Print the version and exit");
}

// For a parse error about an unexpected argument: the nearest flag or subcommand of the (sub)command
// being parsed, e.g. "--conf" for "--cnf" or "start" for "strat"; "" when nothing is close.
// `args`: the command line without the program; consulted when the parse left nothing over (a
// required subcommand that was mistyped).
inline std::string did_you_mean(CLI::App& app, const std::vector<std::string>& args) {
  CLI::App* at = &app;
  while (!at->get_subcommands().empty()) at = at->get_subcommands().back();
  std::vector<std::string> flags, names;
  for (CLI::App* scope : {at, &app}) {
    for (const CLI::Option* o : scope->get_options()) {
      for (const auto& n : o->get_lnames()) flags.push_back("--" + n);
      for (const auto& n : o->get_snames()) flags.push_back("-" + n);
    }
  }
  for (const CLI::App* sub : at->get_subcommands([](const CLI::App*) { return true; })) names.push_back(sub->get_name());
  std::vector<std::string> typed = app.remaining(true);  // the arguments nothing consumed, in order
  if (typed.empty()) typed = args;
  for (std::string token : typed) {
    const bool flag = token.rfind("-", 0) == 0;
    if (flag) token = token.substr(0, token.find('='));
    const std::vector<std::string>& known = flag ? flags : names;
    if (std::find(known.begin(), known.end(), token) != known.end()) continue;  // spelled right
    const std::string near = closest_name(token, known);
    if (!near.empty()) return near;
  }
  return "";
}

// Reports a CLI11 parse error (or prints --help / --version) with a "did you mean" hint; returns the
// exit code: 0 for --help and --version, 2 for every usage error.
inline int report_parse_error(CLI::App& app, const CLI::ParseError& e, const char* program, int argc, char** argv) {
  const int code = app.exit(e);
  if (code == 0) return 0;
  if (const std::string near = did_you_mean(app, std::vector<std::string>(argv + 1, argv + argc)); !near.empty()) {
    std::fprintf(stderr, "%s: did you mean %s?\n", program, near.c_str());
  }
  return 2;
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
    return report_parse_error(app, e, program, argc, argv);
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
