// Helpers shared by the chat-template tests: running a command, finding the npm reference packages
// (scripts/npm-deps.sh), and reading the test data.
#pragma once

#include <gtest/gtest.h>

#include <filesystem>
#include <optional>
#include <string>

#include "common/fs.h"
#include "support/run_command.h"

namespace ajet::text::testing {

using test_support::CommandResult;
using test_support::run_command;

inline std::filesystem::path source_dir() { return AJET_SOURCE_DIR; }
inline std::filesystem::path data_dir() { return source_dir() / "tests" / "text" / "data"; }

// The node_modules directory with the reference packages, or nullopt with `why` set when node/npm
// are unavailable (the caller must GTEST_SKIP with that reason, loudly).
inline std::optional<std::filesystem::path> npm_node_modules(std::string* why) {
  if (run_command("command -v node >/dev/null 2>&1 && echo ok").out.find("ok") ==
      std::string::npos) {
    *why =
        "node is not installed: cannot compare against the JS reference (install nodejs, see "
        "scripts/setup.sh)";
    return std::nullopt;
  }
  CommandResult r =
      run_command("bash '" + (source_dir() / "scripts" / "npm-deps.sh").string() + "'");
  if (r.exit_code != 0) {
    *why = "scripts/npm-deps.sh exited with " + std::to_string(r.exit_code) +
           " (npm or the registry unavailable): cannot compare against the JS reference";
    return std::nullopt;
  }
  std::string last = r.out;
  while (!last.empty() && (last.back() == '\n' || last.back() == '\r')) last.pop_back();
  last = last.substr(last.rfind('\n') == std::string::npos ? 0 : last.rfind('\n') + 1);
  if (!std::filesystem::is_directory(last)) {
    *why = "scripts/npm-deps.sh printed '" + last + "', which is not a directory";
    return std::nullopt;
  }
  return std::filesystem::path(last);
}

inline std::string shell_quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) {
    if (c == '\'') {
      out += "'\\''";
    } else {
      out += c;
    }
  }
  return out + "'";
}

}  // namespace ajet::text::testing
