// `ajet generate ...`: generation is tensor work, so this runs `ajet-engine generate ...` (found next
// to this binary) with the same arguments and stdin; `ajet` itself never links libtorch.
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <vector>

#include "command.h"
#include "common/error.h"

namespace ajet::cli {
namespace {

[[noreturn]] void exec_engine_generate(const std::vector<std::string>& rest) {
  const std::string engine = sibling_binary("ajet-engine");
  std::vector<std::string> args = {engine, "generate"};
  args.insert(args.end(), rest.begin(), rest.end());
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  ::execv(engine.c_str(), argv.data());
  fail(ErrorCode::kNotFound, "cannot run " + engine + " (" + std::strerror(errno) + "); build the ajet-engine target");
}

const CommandRegistration kRegistration("generate", [](CLI::App& app) {
  auto* generate = app.add_subcommand(
      "generate", "Generate from a prompt on stdin with a model directory (runs ajet-engine generate ...)");
  // Everything after `generate` (its options, --help) belongs to ajet-engine.
  generate->prefix_command();
  generate->set_help_flag();
  generate->callback([generate] { exec_engine_generate(generate->remaining()); });
});

}  // namespace
}  // namespace ajet::cli
