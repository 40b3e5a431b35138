// `ajet`: the user's command line. Subcommands live in cmd_*.cc files (see command.h).
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <unistd.h>

#include <filesystem>

#include "command.h"
#include "common/error.h"

namespace ajet::cli {

std::string sibling_binary(const std::string& name) {
  std::error_code ec;
  auto self = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (ec) return name;
  return (self.parent_path() / name).string();
}

void add_engine_forward(CLI::App& app, const std::string& name, const std::string& description) {
  auto* sub = app.add_subcommand(name, description);
  sub->prefix_command();
  sub->set_help_flag();
  sub->callback([sub, name] {
    const std::string engine = sibling_binary("ajet-engine");
    std::vector<std::string> args = {engine, name};
    for (const auto& a : sub->remaining()) args.push_back(a);
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    ::execv(engine.c_str(), argv.data());
    fail(ErrorCode::kNotFound,
         "cannot run " + engine + " (" + std::strerror(errno) + "); build the ajet-engine target");
  });
}

}  // namespace ajet::cli

int main(int argc, char** argv) {
  CLI::App app{"AgentJet: train the LLM behind an agent with reinforcement learning"};
  app.require_subcommand(0, 1);
  ajet::apps::add_version_flag(app, "ajet");
  ajet::cli::add_registered_commands(app);
  ajet::cli::add_main_entry(app);  // `ajet --conf x.yaml`: classic mode (cmd_classic.cc)
  try {
    app.parse(argc, argv);
    if (app.get_subcommands().empty()) return ajet::cli::run_main_entry(app);
  } catch (const CLI::ParseError& e) {
    return ajet::apps::report_parse_error(app, e, "ajet", argc, argv);
  } catch (const ajet::Error& e) {
    std::fprintf(stderr, "ajet: error: %s\n", e.what());
    return e.code() == ajet::ErrorCode::kInvalidArgument ? 2 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ajet: error: %s\n", e.what());
    return 1;
  }
  return 0;
}
