// `ajet sft ...`: the supervised warm-up is tensor work, so this runs `ajet-engine sft ...` (found next
// to this binary) with the same arguments; `ajet` itself never links libtorch. Typical use (docs/sft.md):
//   ajet tasks demos --task calc --n 2000 --out demos.jsonl
//   ajet sft --model tiny --demos demos.jsonl --out tiny-sft --steps 150 --eval-task calc
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <vector>

#include "command.h"
#include "common/error.h"

namespace ajet::cli {
namespace {

[[noreturn]] void exec_engine_sft(const std::vector<std::string>& rest) {
  const std::string engine = sibling_binary("ajet-engine");
  std::vector<std::string> args = {engine, "sft"};
  args.insert(args.end(), rest.begin(), rest.end());
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  ::execv(engine.c_str(), argv.data());
  fail(ErrorCode::kNotFound, "cannot run " + engine + " (" + std::strerror(errno) + "); build the ajet-engine target");
}

const CommandRegistration kRegistration("sft", [](CLI::App& app) {
  auto* sft = app.add_subcommand(
      "sft", "Supervised warm-up on chat demonstrations, e.g. from `ajet tasks demos` (runs ajet-engine sft ...)");
  // Everything after `sft` (its options, --help) belongs to ajet-engine.
  sft->prefix_command();
  sft->set_help_flag();
  sft->callback([sft] { exec_engine_sft(sft->remaining()); });
});

}  // namespace
}  // namespace ajet::cli
