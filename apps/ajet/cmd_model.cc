// `ajet model ...`: model directories are tensor work, so this forwards the whole command line after
// `model` to `ajet-engine model ...` (found next to this binary); `ajet` itself never links libtorch.
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <vector>

#include "command.h"
#include "common/error.h"

namespace ajet::cli {
namespace {

[[noreturn]] void exec_engine(const std::vector<std::string>& rest) {
  const std::string engine = sibling_binary("ajet-engine");
  std::vector<std::string> args = {engine, "model"};
  args.insert(args.end(), rest.begin(), rest.end());
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  ::execv(engine.c_str(), argv.data());
  fail(ErrorCode::kNotFound, "cannot run " + engine + " (" + std::strerror(errno) + "); build the ajet-engine target");
}

const CommandRegistration kRegistration("model", [](CLI::App& app) {
  auto* model = app.add_subcommand("model", "Create model directories (runs ajet-engine model ...)");
  // Everything after `model` (init, its options, --help) belongs to ajet-engine.
  model->prefix_command();
  model->set_help_flag();
  model->callback([model] { exec_engine(model->remaining()); });
});

}  // namespace
}  // namespace ajet::cli
