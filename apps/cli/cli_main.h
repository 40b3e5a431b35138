// What the binaries' main() functions share: subcommands that register themselves from their
// cmd_*.cc files (each binary links its own, so each has its own registry), and the
// parse-run-report loop of `ajet-engine` and `ajet-swarm`. Header-only, no libtorch; link
// ajet_build_info.
#pragma once

#include <CLI/CLI.hpp>

#include <algorithm>
#include <cstdio>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "common/build_info.h"
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

// What `--version` prints: "PROGRAM VERSION (commit COMMIT, build type TYPE)", the three fields
// GET /version of the front reports (common/build_info.h).
inline std::string version_text(const std::string& program) {
  const BuildInfo& b = build_info();
  return program + " " + std::string(b.version) + " (commit " + std::string(b.git_commit) +
         ", build type " +
         (b.build_type.empty() ? std::string("none") : std::string(b.build_type)) + ")";
}

inline void add_version_flag(CLI::App& app, const std::string& program) {
  app.set_version_flag("--version", version_text(program),
                       "Print the version, commit and build type, and exit");
}

// The (sub)command being parsed: the last selected subcommand, depth first.
inline CLI::App* innermost_command(CLI::App& app) {
  CLI::App* at = &app;
  while (!at->get_subcommands().empty()) at = at->get_subcommands().back();
  return at;
}

// "ajet episode list": the program and the selected subcommands.
inline std::string command_path(CLI::App& app, const std::string& program) {
  std::string path = program;
  for (CLI::App* at = &app; !at->get_subcommands().empty();) {
    at = at->get_subcommands().back();
    path += " " + at->get_name();
  }
  return path;
}

// The arguments no (sub)command consumed, in order, leaving out those of commands that keep them on
// purpose (prefix commands such as `ajet generate`, which hand them to ajet-engine).
inline std::vector<std::string> unconsumed_arguments(const CLI::App& app) {
  std::vector<std::string> out;
  if (!app.get_prefix_command() && !app.get_allow_extras()) out = app.remaining(false);
  for (const CLI::App* sub : app.get_subcommands()) {
    for (std::string& a : unconsumed_arguments(*sub)) out.push_back(std::move(a));
  }
  return out;
}

// The names a typed token may have meant at `at`: its flags (and the top level's), or its
// subcommands.
inline std::vector<std::string> known_names(CLI::App& app, CLI::App* at, bool flags) {
  std::vector<std::string> out;
  if (flags) {
    for (CLI::App* scope : {at, &app}) {
      for (const CLI::Option* o : scope->get_options()) {
        for (const auto& n : o->get_lnames()) out.push_back("--" + n);
        for (const auto& n : o->get_snames()) out.push_back("-" + n);
      }
    }
  } else {
    for (const CLI::App* sub : at->get_subcommands([](const CLI::App*) { return true; })) {
      out.push_back(sub->get_name());
    }
  }
  return out;
}

// For a parse error about an unexpected argument: the nearest flag or subcommand of the
// (sub)command being parsed, e.g. "--conf" for "--cnf" or "start" for "strat"; "" when nothing is
// close. `args`: the command line without the program; consulted when the parse left nothing over
// (a required subcommand that was mistyped).
inline std::string did_you_mean(CLI::App& app, const std::vector<std::string>& args) {
  CLI::App* at = innermost_command(app);
  std::vector<std::string> typed = app.remaining(true);  // the arguments nothing consumed, in order
  if (typed.empty()) typed = args;
  for (std::string token : typed) {
    const bool flag = token.rfind("-", 0) == 0;
    if (flag) token = token.substr(0, token.find('='));
    const std::vector<std::string> known = known_names(app, at, flag);
    if (std::find(known.begin(), known.end(), token) != known.end()) continue;  // spelled right
    const std::string near = closest_name(token, known);
    if (!near.empty()) return near;
  }
  return "";
}

// Reports a CLI11 parse error (or prints --help / --version); returns the exit code: 0 for --help
// and
// --version, 2 for every usage error. The message comes first and says what was wrong in words
// ("ajet: unknown subcommand 'proxy'", "ajet episode list: unknown option '--stauts'; did you mean
// --status?"), then where to look. A group command given no subcommand (`ajet episode`,
// `ajet-swarm`) prints its help, which lists the subcommands, and exits 2, as bare `ajet` does.
// `--help` after an unknown subcommand (`ajet proxy --help`) is that usage error, not the top help.
inline int report_parse_error(CLI::App& app, const CLI::ParseError& e, const char* program,
                              int argc, char** argv) {
  const std::vector<std::string> left = unconsumed_arguments(app);
  const bool help = e.get_name() == "CallForHelp" || e.get_name() == "CallForAllHelp";
  if (e.get_exit_code() == 0 && (!help || left.empty())) return app.exit(e) == 0 ? 0 : 2;
  CLI::App* at = innermost_command(app);
  const std::string path = command_path(app, program);
  const std::string usage = "Run '" + path + " --help' for the usage.\n";
  if (!left.empty()) {
    // The first argument that is a near miss of a known name, else the first one left over.
    std::string culprit = left.front(), near;
    for (const std::string& token : left) {
      const bool flag = token.rfind("-", 0) == 0;
      const std::string name = flag ? token.substr(0, token.find('=')) : token;
      const std::vector<std::string> known = known_names(app, at, flag);
      if (std::find(known.begin(), known.end(), name) != known.end()) continue;
      if (std::string n = closest_name(name, known); !n.empty()) {
        culprit = name;
        near = std::move(n);
        break;
      }
    }
    const bool flag = culprit.rfind("-", 0) == 0;
    const std::vector<std::string> subcommands = known_names(app, at, false);
    const char* what = flag                   ? "unknown option"
                       : !subcommands.empty() ? "unknown subcommand"
                                              : "unexpected argument";
    std::string message = path + ": " + what + " '" + culprit + "'";
    if (!near.empty()) {
      message += "; did you mean " + near + "?";
    } else if (!flag && !subcommands.empty()) {
      message += " (subcommands:";
      for (const std::string& name : subcommands) message += " " + name;
      message += ")";
    }
    std::fprintf(stderr, "%s\n%s", message.c_str(), usage.c_str());
    return 2;
  }
  if (at->get_require_subcommand_min() > 0 && at->get_subcommands().empty() &&
      !at->get_subcommands([](const CLI::App*) { return true; }).empty()) {
    std::fputs(app.help().c_str(),
               stdout);  // the selected subcommand's help, named by its full path
    std::fprintf(stderr, "%s: a subcommand is required\n", path.c_str());
    return 2;
  }
  std::string message = path + ": error: " + e.what();
  if (const std::string near = did_you_mean(app, std::vector<std::string>(argv + 1, argv + argc));
      !near.empty()) {
    message += " (did you mean " + near + "?)";
  }
  std::fprintf(stderr, "%s\n%s", message.c_str(), usage.c_str());
  return 2;
}

// main() of a binary whose only entry points are its registered subcommands, plus --log-level.
// Exit codes: 0 done (or --help), 2 bad usage (CLI11 parse errors and Error(kInvalidArgument)),
// 1 any other failure, with "PROGRAM: error: ..." on stderr.
inline int run_subcommands(CLI::App& app, int argc, char** argv, const char* program) {
  app.require_subcommand(1);
  app.add_option_function<std::string>(
      "--log-level", [](const std::string& level) { set_log_level(level); },
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
